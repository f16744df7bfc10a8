"""The layers of a ViT (§3.1, appendix A): the encoder block of eq. 2-3 and its parts, the patch embedding of eq. 1,
attention pooling (MAP), and `EncodeState`, what one forward pass hands each block.

`Block.forward(x, state)` is the one block computation. What varies between calls -- the patch grid, the prefix
count, token merging's sizes and this layer's r, whether the attention weights are recorded -- travels in the
`EncodeState` that `VisionTransformer.encode` makes for each call and passes to every block and its attention;
no layer is set from outside. Packed images of different sizes (NaViT, models/packing.py) are one more state: the
boolean attention mask that keeps them apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.config import GELU_APPROXIMATE, ViTConfig
from vitkit.models.posemb import RelativePositionBias, init_normal_
from vitkit.models.resnet import ResNetStem
from vitkit.models.tome import merge_tokens, size_bias


@dataclass
class EncodeState:
    """What one forward pass hands every block (made by `VisionTransformer.encode`, one per call).

    `grid`: the (gh, gw) patch grid of the input; `num_prefix`: class, distillation and register tokens before the
    patches; `schedule`: token merging's r of each layer (ToMe, models/tome.py; () without merging) and `layer` the
    index of the block now running; `sizes` (B, T, 1): each token's patch count once tokens have merged (None
    before); `attention`: a list that receives each attention's weights (B, heads, T, T) in call order (None: not
    recorded); `metric`: the keys averaged over heads that this layer's attention leaves for its merge; `mask`
    (B, 1, T, T) bool: where a query may attend to a key (packed images, models/packing.py: each token to its own
    image's tokens; None: everywhere)."""

    grid: tuple[int, int] | None
    num_prefix: int
    schedule: tuple[int, ...] = ()
    layer: int = 0
    sizes: torch.Tensor | None = None
    attention: list[torch.Tensor] | None = None
    metric: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    @property
    def r(self) -> int:
        """The tokens the running block merges."""
        return self.schedule[self.layer] if self.schedule else 0

    @property
    def plain(self) -> bool:
        """Whether every block's output depends on its `x` and the attention `mask` alone (no merging schedule,
        nothing recorded): the state a fused block may run with (honouring the mask) and a checkpointed block may be
        replayed with (whatever `layer` says by then)."""
        return not self.schedule and self.sizes is None and self.attention is None


class Tokens(NamedTuple):
    """The encoder's output, the one record every consumer reads (pooling, heads, features, intermediates).

    `z` (B, T, D): the tokens, prefix first (after eq. 4's LN unless the encoder stopped early); `sizes` (B, T, 1):
    each token's patch count after token merging (None: no token merged, every token one patch); `grid`: the input's
    patch grid (None where a bare sequence came without one); `num_prefix`: class, distillation and register tokens
    before the patches; `attention`: each layer's weights when recorded (merged layers: their shorter sequences).
    `packed`: the tokens of packed images (NaViT, `VisionTransformer.tokens_packed`), one image per row, padded to
    the longest: `sizes` is 1 for each of an image's tokens and 0 for its padding (a slot that stands for no patch),
    `grid` None (each image has its own), `attention` the packed rows' weights."""

    z: torch.Tensor
    sizes: torch.Tensor | None
    grid: tuple[int, int] | None
    num_prefix: int
    attention: list[torch.Tensor] | None = None
    packed: bool = False

    @property
    def patches(self) -> torch.Tensor:
        """The patch tokens (B, N, D), prefix left out."""
        return self.z[:, self.num_prefix:]

    @property
    def patch_sizes(self) -> torch.Tensor | None:
        """The patch tokens' patch counts (B, N, 1), or None without merging."""
        return None if self.sizes is None else self.sizes[:, self.num_prefix:]


class TwoHeads(NamedTuple):
    """A distilled ViT's training output: the class head's and the distillation head's logits."""

    logits: torch.Tensor
    dist_logits: torch.Tensor

    def mean(self) -> torch.Tensor:
        """DeiT's inference output: the two heads' mean."""
        return (self.logits + self.dist_logits) / 2


class DropPath(nn.Module):
    """Stochastic depth: drop a whole residual branch per sample (training only)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Attention(nn.Module):
    """Multi-head self-attention (MSA, appendix A) with one fused qkv projection.

    The path is `F.scaled_dot_product_attention`. Where the state records attention, the same
    softmax(q k^T / sqrt(d)) is computed explicitly and its (B, heads, T, T) weights are appended to its list.
    Merged tokens (the state's `sizes`) get ToMe's proportional-attention bias log(size) on their keys; the state's
    boolean `mask` (packed images) removes the keys a query may not see.
    """

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.head_dim
        self.scale = self.head_dim**-0.5
        # SDPA's own default, 1 / sqrt(d) in double (bit-identical eager results), passed as a number so that an
        # ONNX export holds a constant, which onnxruntime folds into the q k^T MatMul (no shape -> sqrt at run time)
        self.sdpa_scale: float | None = 1 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width, bias=cfg.qkv_bias)
        self.attn_drop = cfg.attn_dropout
        self.proj = nn.Linear(cfg.width, cfg.width)
        # appendix D.4: relative position logits added to the content logits before the softmax
        tokens = cfg.num_prefix_tokens + cfg.num_patches
        self.rel = RelativePositionBias(tokens, self.head_dim) if cfg.posemb == "relative" else None

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, heads, T, head_dim) of the fused projection's output `qkv` (B, T, 3 * width)."""
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def forward(self, x: torch.Tensor, state: EncodeState | None = None) -> torch.Tensor:
        """MSA(x) for tokens `x` (B, T, D); `state` as `EncodeState` says (merge sizes, recording; the keys
        averaged over heads are left in `state.metric` when this layer merges)."""
        B, T, C = x.shape
        q, k, v = self.split_heads(self.qkv(x))
        drop = self.attn_drop if self.training else 0.0
        bias = self.rel(q, self.scale) if self.rel is not None else None
        if state is not None and state.sizes is not None:
            bias = size_bias(state.sizes) if bias is None else bias + size_bias(state.sizes)
        mask = state.mask if state is not None else None
        if state is not None and state.attention is not None:
            logits = (q * self.scale) @ k.transpose(-2, -1)
            logits = logits if bias is None else logits + bias
            attn = torch.softmax(logits if mask is None else logits.masked_fill(~mask, float("-inf")), dim=-1)
            state.attention.append(attn)
            out = F.dropout(attn, drop, self.training) @ v
        else:
            if mask is not None:  # a boolean mask alone, or the float bias with the masked keys at -inf
                bias = mask if bias is None else torch.where(mask, bias, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=drop, scale=self.sdpa_scale)
        if state is not None and state.r:
            state.metric = k.mean(dim=1)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))


class QuickGELU(nn.Module):
    """OpenAI CLIP's GELU approximation, x * sigmoid(1.702 x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Mlp(nn.Module):
    """MLP of the block: Dense(D -> mlp) -> GELU -> dropout -> Dense(mlp -> D) -> dropout."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_dim)
        self.act = QuickGELU() if cfg.gelu == "quick" else nn.GELU(approximate=GELU_APPROXIMATE[cfg.gelu])
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.width)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class LayerScale(nn.Module):
    """A learned per-channel scale of a residual branch (Touvron et al. 2021), initialised to `init`."""

    def __init__(self, width: int, init: float) -> None:
        super().__init__()
        self.init = init
        self.gamma = nn.Parameter(torch.full((width,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Block(nn.Module):
    """One pre-norm encoder block: eq. 2 then eq. 3 (with LayerScale, each branch scaled before it is added)."""

    def __init__(self, cfg: ViTConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.ln_eps)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.ln_eps)
        self.mlp = Mlp(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.drop_path = DropPath(drop_path)
        scale = cfg.layer_scale
        self.ls1: nn.Module = LayerScale(cfg.width, scale) if scale is not None else nn.Identity()
        self.ls2: nn.Module = LayerScale(cfg.width, scale) if scale is not None else nn.Identity()

    def forward(self, x: torch.Tensor, state: EncodeState | None = None) -> torch.Tensor:
        """eq. 2-3 on tokens `x` (B, T, D). With token merging (`state.r` > 0) the state's `r` patch tokens merge
        between eq. 2 and eq. 3 by their keys (ToMe), and `state.sizes` becomes the merged tokens' patch counts."""
        x = x + self.drop_path(self.ls1(self.drop(self.attn(self.norm1(x), state))))  # eq. 2: z' = MSA(LN(z)) + z
        if state is not None and state.r:
            x, state.sizes = merge_tokens(x, state.metric, state.sizes, state.r, state.num_prefix)
            state.metric = None
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # eq. 3: z = MLP(LN(z')) + z'


def resample_patch_kernel(weight: torch.Tensor, size: int, mode: str = "bicubic") -> torch.Tensor:
    """The patch embedding's kernel (D, C, P, P) for patches of `size` px (FlexiViT, Beyer et al. 2023, "PI-resize";
    timm's `resample_patch_embed`): with B the matrix of resizing a P x P patch to size x size (`mode`, antialiased),
    the new kernel is pinv(B^T) w, so that a patch resized up by B gets the token it got at P px (<B x, w'> = <x, w>,
    exact for size >= P; for size < P the least-squares kernel)."""
    old = weight.shape[-1]
    if weight.ndim != 4 or weight.shape[-2] != old:
        raise ValueError(f"resample_patch_kernel: expected a square kernel (D, C, P, P), got {tuple(weight.shape)}")
    if size < 1:
        raise ValueError(f"resample_patch_kernel: the new patch size must be >= 1, got {size}")
    if size == old:
        return weight.clone()
    basis = torch.eye(old * old, dtype=torch.float64).reshape(old * old, 1, old, old)
    resize = F.interpolate(basis, size=(size, size), mode=mode, antialias=True, align_corners=False)
    b = resize.reshape(old * old, size * size).T  # (size^2, P^2): column j is basis patch j resized
    pinv = torch.linalg.pinv(b.T)  # (size^2, P^2)
    flat = weight.detach().to(torch.float64).reshape(-1, old * old)  # (D * C, P^2)
    return (flat @ pinv.T).reshape(*weight.shape[:2], size, size).to(weight.dtype)


class PatchEmbed(nn.Module):
    """eq. 1's x_p E: a P x P stride-P convolution is exactly the linear map of flattened patches.

    For the hybrid the input patches come from a BiT ResNet feature map instead of pixels.
    """

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.backbone: nn.Module | None = None
        in_chans = cfg.in_chans
        if cfg.resnet_layers is not None:
            self.backbone = ResNetStem(cfg.resnet_layers, cfg.resnet_width, cfg.in_chans)
            in_chans = self.backbone.out_channels
        self.proj = nn.Conv2d(in_chans, cfg.width, cfg.patch_size, stride=cfg.patch_size, bias=cfg.patch_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backbone is not None:
            x = self.backbone(x)
        return self.proj(x)  # (B, D, gh, gw)


class MAPHead(nn.Module):
    """Multi-head attention pooling (big_vision's MAPHead): a learned query attends over the tokens, then a
    pre-norm MLP with a residual; its output is the pooled representation."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        D = cfg.width
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.probe = nn.Parameter(torch.zeros(1, 1, D))
        self.q = nn.Linear(D, D, bias=cfg.qkv_bias)
        self.kv = nn.Linear(D, 2 * D, bias=cfg.qkv_bias)
        self.proj = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=cfg.ln_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x: torch.Tensor, size: torch.Tensor | None = None) -> torch.Tensor:
        """The pooled representation of tokens `x`; `size` (merged tokens' patch counts) weights the keys."""
        B, T, D = x.shape
        q = self.q(self.probe.expand(B, -1, -1).to(x.dtype)).view(B, 1, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=size_bias(size), scale=1 / math.sqrt(self.head_dim))
        y = self.proj(y.transpose(1, 2).reshape(B, 1, D))
        y = y + self.mlp(self.norm(y))
        return y[:, 0]


@torch.no_grad()
def init_original(model: nn.Module, posemb: list[nn.Parameter]) -> None:
    """Initialise a ViT as the original code: xavier-uniform kernels (q, k, v each its own), N(0, 1e-6) biases,
    LayerNorms 1 / 0, lecun-normal patch embedding and pre-logits layer, N(0, 0.02) position embeddings `posemb`,
    registers and distillation token, a zero class token. The head is left to `reset_head`."""
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and m is not model.head and m is not model.head_dist:
            if name.endswith("attn.qkv"):  # q, k and v are three (D, D) kernels in the original
                for w in m.weight.chunk(3, dim=0):
                    nn.init.xavier_uniform_(w)
            else:
                nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                init_normal_(m.bias, std=1e-6)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    if model.pre_logits is not None:  # flax Dense default: lecun-normal kernel, zero bias
        lin = model.pre_logits[0]
        nn.init.trunc_normal_(lin.weight, std=math.sqrt(1.0 / lin.in_features))
        nn.init.zeros_(lin.bias)
    proj = model.patch_embed.proj  # flax Conv default: lecun-normal over fan-in P*P*C
    fan_in = proj.in_channels * proj.kernel_size[0] * proj.kernel_size[1]
    nn.init.trunc_normal_(proj.weight, std=math.sqrt(1.0 / fan_in))
    if proj.bias is not None:
        nn.init.zeros_(proj.bias)
    for m in model.modules():
        if isinstance(m, LayerScale):
            nn.init.constant_(m.gamma, m.init)
    for p in posemb:
        init_normal_(p, std=0.02)
    if model.cls_token is not None:
        nn.init.zeros_(model.cls_token)
    if model.reg_token is not None:
        init_normal_(model.reg_token, std=0.02)
    if model.dist_token is not None:
        init_normal_(model.dist_token, std=0.02)
    if model.map_head is not None:
        nn.init.xavier_uniform_(model.map_head.probe.view(1, -1))
