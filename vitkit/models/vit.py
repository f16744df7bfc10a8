"""The Vision Transformer of Dosovitskiy et al. (ICLR 2021), §3.1, eq. 1-4, in one file.

    z_0  = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (eq. 1)  -> PatchEmbed, VisionTransformer.embed
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                          (eq. 2)  -> Block.forward
    z_l  = MLP(LN(z'_l)) + z'_l                                (eq. 3)  -> Block.forward
    y    = LN(z_L^0)                                           (eq. 4)  -> VisionTransformer.encode / pool

Numerics follow the original JAX code (google-research/vision_transformer): LayerNorm eps 1e-6, GELU with the tanh
approximation by default, xavier-uniform kernels with N(0, 1e-6) biases, N(0, 0.02) position
embeddings, a zero class token and a zero-initialised head. Appendix D variants carried by the
config: GAP pooling, no / learned 1D / learned 2D position embeddings, a hybrid ResNet stem. Later work's
options (Beyer et al. 2022; Darcet et al. 2024; Touvron et al. 2021): fixed 2-D sin-cos embeddings, MAP
pooling, register tokens, DeiT's distillation token, LayerScale, a class token beside GAP, the final LN after
pooling (fc_norm), CLIP's pre-encoder LN, bias-free patch embedding and QuickGELU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from vitkit.models.axial import AxialBlock
from vitkit.models.base import PreprocessDeclared
from vitkit.models.hub_api import HubApi
from vitkit.models.posemb import RelativePositionBias, resample_axis, resample_posemb, sincos_2d
from vitkit.models.resnet import ResNetStem, hybrid_stride, root_width
from vitkit.models.timm_api import TimmApi
from vitkit.models.tome import merge_schedule, merge_tokens, size_bias, weighted_mean
from vitkit.utils import check_choice, check_fields, check_int, check_range, to_pair

Pooling = Literal["token", "gap", "map"]  # class token, global average (D.3), attention pooling (MAP)
PosEmb = Literal["learn1d", "learn2d", "relative", "none", "sincos2d", "sincos2d_big_vision"]
SINCOS = ("sincos2d", "sincos2d_big_vision")
# appendix D.4's placements of 1-D / 2-D position embeddings: once at the input (the paper's default), a
# table learned per layer and added before each block, or one table added before every block
Placement = Literal["input", "every_layer", "every_layer_shared"]
PosembResample = Literal["bicubic", "bicubic_antialias", "bicubic_dino"]
POSEMB_RESAMPLE: tuple[str, ...] = get_args(PosembResample)
BlockKind = Literal["global", "axial"]  # global self-attention, or Axial-ViT's row + column blocks (D.7)
Gelu = Literal["tanh", "exact", "quick"]
# GELU flavour -> torch's `approximate` argument: the original JAX code's tanh formula, or the exact erf; "quick" is
# OpenAI CLIP's x * sigmoid(1.702 x) (QuickGELU), which torch's GELU does not have
GELU_APPROXIMATE: dict[str, str] = {"tanh": "tanh", "exact": "none"}
GELUS = ("tanh", "exact", "quick")


# Sanity bounds, checked before anything is built (a config of depth 100000 would take minutes and gigabytes
# first); far above every published ViT (ViT-22B: depth 48, width 6144, MLP 24576).
MAX_SIZES = {"img_size": 1 << 16, "patch_size": 1 << 12, "in_chans": 1 << 10, "width": 1 << 16, "depth": 1 << 10,
             "num_heads": 1 << 12, "mlp_dim": 1 << 18, "num_classes": 1 << 24, "num_registers": 1 << 10}
MAX_PARAMETERS = 10**11
MAX_TOKENS = 1 << 18  # patches per image (a 8192 px image in 16 px patches)


@dataclass
class ViTConfig:
    """Plain-data description of a ViT; round-trips through JSON (`to_dict` / `from_dict`).

    The fields come in the order a reader of the paper meets them: the model of §3.1 with Table 1's sizes and the
    original code's numerics, its pooling and head, position embeddings, the hybrid stem, the block (appendix
    D.7), regularisation, and last the options later families added (vitkit/formats/families/ names the family
    each marks). The JSON keys are the field names, in any order.
    `__post_init__` checks each group with its own method, so a bad config fails before any work, naming the field.
    """

    # --- the paper's model (§3.1, eq. 1-4; Table 1's sizes) ----------------------------------------------------
    img_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    width: int = 768  # D, the hidden size
    depth: int = 12  # L, the number of encoder blocks
    num_heads: int = 12
    mlp_dim: int = 3072
    # its numerics: the original code's q, k, v biases, LayerNorm eps 1e-6 and tanh GELU ("exact": the erf form,
    # "quick": CLIP's QuickGELU)
    qkv_bias: bool = True
    ln_eps: float = 1e-6
    gelu: Gelu = "tanh"

    # --- pooling and head (§3.1: the class token, the pre-training head; appendix D.3: global average pooling) ---
    pooling: Pooling = "token"  # class token (paper default), global average pooling (appendix D.3), or "map"
    # (multi-head attention pooling: a learned query attends over the patch tokens, big_vision's MAPHead)
    class_token: bool | None = None  # a class token in the sequence; None: exactly when pooling = "token". With
    # pooling "gap" a class token is carried but not pooled (timm's global_pool="avg" beside a class token)
    fc_norm: bool = False  # the final LayerNorm after pooling instead of before it (timm's fc_norm: MAE, BEiT)
    representation_size: int | None = None  # "pre_logits" Dense + tanh (pre-training head)
    head_bias_init: float = 0.0  # the paper's 21k pre-training used -10 with sigmoid cross-entropy

    # --- position embeddings (§3.1; appendix D.4; other resolutions §3.2) ---------------------------------------
    posemb: PosEmb = "learn1d"  # appendix D.4: none, learned 1D / 2D (absolute), relative (in the attention);
    # "sincos2d": fixed 2-D sine-cosine ("Better plain ViT baselines", Beyer et al. 2022); "sincos2d_big_vision":
    # big_vision's exact formula (other frequencies and channel order, models/posemb.py)
    posemb_placement: Placement = "input"  # appendix D.4, for learn1d / learn2d
    posemb_resample: PosembResample = "bicubic"  # how a learned 1D E_pos is resampled to another grid (§3.2):
    # "bicubic" to the grid's size (transformers' classes); "bicubic_antialias" (timm's resample_abs_pos_embed, DINOv2's
    # register backbones); "bicubic_dino": scale factors (g + 0.1) / g_old, DINO's and DINOv2's plain backbones
    dynamic_img_size: bool = False  # accept other resolutions by resampling E_pos on the fly (§3.2)

    # --- the hybrid (§3.1 "Hybrid Architecture"): a BiT ResNet stem whose feature map is the patch grid -----------
    resnet_layers: tuple[int, ...] | None = None
    resnet_width: float = 1  # width factor of the hybrid's ResNet: the root conv has 64 x this channels

    # --- the block (appendix D.7) --------------------------------------------------------------------------------
    block: BlockKind = "global"  # "axial": Axial-ViT, GAP pooling, 2-D patch grid

    # --- regularisation (training; appendix B.1) -----------------------------------------------------------------
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0

    # --- later families' options (vitkit/formats/families/ says which option marks which family) ---------------
    num_registers: int = 0  # register tokens (Darcet et al. 2024): learned, no E_pos, dropped at the output
    distill_token: bool = False  # DeiT's distillation token (Touvron et al. 2021): a second class token with its
    # own head, trained towards a teacher; the two heads' logits are averaged at inference
    layer_scale: float | None = None  # LayerScale (Touvron et al. 2021, "Going deeper"): a learned per-channel
    # scale on each residual branch, initialised to this value (DeiT III, DINOv2); None: none
    pre_norm: bool = False  # a LayerNorm on z_0 before the first block (CLIP's ln_pre, timm's norm_pre)
    patch_bias: bool = True  # the patch embedding's bias (CLIP has none)

    # --- bookkeeping ---------------------------------------------------------------------------------------------
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. "assumed": what a loader took as given (logged)

    def __post_init__(self) -> None:
        """Every value is checked here, group by group, so a bad config fails before any work, naming the field."""
        self._check_model()
        self._check_regularisation()
        self._check_hybrid()
        self._check_pooling()
        self._check_family_options()
        self._check_posemb()
        self._check_block()
        for side in self.img_size:
            if side % self.total_stride:
                raise ValueError(
                    f"image size {self.img_size} is not divisible by the patch stride {self.total_stride}"
                )
        if self.num_patches > MAX_TOKENS:  # checked before a position table or a model of that length is built
            raise ValueError(f"image size {self.img_size} with patch stride {self.total_stride} makes "
                             f"{self.num_patches:,} patches, over vitkit's sanity bound of {MAX_TOKENS:,} tokens "
                             "(attention over them would need terabytes)")

    def _check_model(self) -> None:
        """The paper's model: sizes within vitkit's sanity bounds, heads that divide the width, its numerics."""
        self.img_size = to_pair(self.img_size, "img_size")
        check_int("img_size", min(self.img_size))
        check_int("img_size", max(self.img_size), high=MAX_SIZES["img_size"])
        for key in ("patch_size", "in_chans", "width", "depth", "num_heads", "mlp_dim"):
            check_int(key, getattr(self, key), high=MAX_SIZES[key])
        check_int("num_classes", self.num_classes, low=0, high=MAX_SIZES["num_classes"])
        if self.representation_size is not None:
            check_int("representation_size", self.representation_size, high=MAX_SIZES["width"])
        est = self.depth * (4 * self.width**2 + 2 * self.width * self.mlp_dim)
        if est > MAX_PARAMETERS:
            raise ValueError(f"depth {self.depth} x width {self.width} (MLP {self.mlp_dim}) makes ~{est:.2e} encoder "
                             f"parameters, over vitkit's sanity bound of {MAX_PARAMETERS:.0e} (ViT-22B has 2.2e10)")
        check_range("ln_eps", self.ln_eps, 0.0, 1.0, low_open=True)
        if self.width % self.num_heads:
            raise ValueError(f"width {self.width} is not divisible by num_heads {self.num_heads}")
        if self.gelu not in GELUS:
            raise ValueError(f"gelu must be one of {', '.join(GELUS)}, got {self.gelu!r}")

    def _check_regularisation(self) -> None:
        for key in ("dropout", "attn_dropout", "drop_path"):
            check_range(key, getattr(self, key), 0.0, 1.0)

    def _check_hybrid(self) -> None:
        if self.resnet_layers is not None:
            if not isinstance(self.resnet_layers, (list, tuple)) or not self.resnet_layers:
                raise ValueError(f"resnet_layers must be a list of unit counts per stage, got {self.resnet_layers!r}")
            self.resnet_layers = tuple(check_int("resnet_layers[]", n) for n in self.resnet_layers)
            check_range("resnet_width", self.resnet_width, 0.0, math.inf, low_open=True)
            root_width(self.resnet_width)  # a factor whose root width GroupNorm cannot split is refused here

    def _check_pooling(self) -> None:
        """Pooling and the class token (resolved here when not given); the boolean switches."""
        check_choice("pooling", self.pooling, ("token", "gap", "map"))
        if self.class_token is None:
            self.class_token = self.pooling == "token"
        for key in ("class_token", "fc_norm", "pre_norm", "patch_bias"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be true or false, got {getattr(self, key)!r}")
        if self.pooling == "token" and not self.class_token:
            raise ValueError("pooling='token' pools the class token: it needs class_token=True")
        if self.class_token and self.pooling == "map":
            raise ValueError("attention pooling (pooling='map') pools the patches; a class token beside it is not a "
                             "model vitkit builds")

    def _check_family_options(self) -> None:
        if self.layer_scale is not None:
            check_range("layer_scale", self.layer_scale, 0.0, math.inf, low_open=True)
        check_int("num_registers", self.num_registers, low=0, high=MAX_SIZES["num_registers"])
        # a representation layer on the class token beside it: transformers' DeiTModel's pooler (no heads then)
        if self.distill_token and (self.pooling != "token" or self.fc_norm or (self.representation_size
                                                                                and self.num_classes > 0)):
            raise ValueError("a distillation token sits beside the class token: it needs pooling='token', no "
                             "fc_norm, and no representation_size under heads")

    def _check_posemb(self) -> None:
        check_choice("posemb", self.posemb, ("learn1d", "learn2d", "relative", "none", *SINCOS))
        check_choice("posemb_placement", self.posemb_placement, ("input", "every_layer", "every_layer_shared"))
        check_choice("posemb_resample", self.posemb_resample, POSEMB_RESAMPLE)
        if self.posemb_placement != "input" and self.posemb not in ("learn1d", "learn2d"):
            raise ValueError(f"posemb_placement {self.posemb_placement!r} applies to learned 1D / 2D position "
                             f"embeddings, not posemb={self.posemb!r}")
        if self.posemb in SINCOS and (self.width % 4 or (self.posemb == "sincos2d_big_vision" and self.width < 8)):
            also = " (>= 8 for big_vision's formula)" if self.posemb == "sincos2d_big_vision" else ""
            raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4{also}, got {self.width}")
        if self.posemb == "learn2d" and self.width % 2:
            raise ValueError("learned 2D position embeddings need an even width")

    def _check_block(self) -> None:
        """Axial-ViT (appendix D.7) keeps the patch grid 2-D: GAP, no class token, no registers, no 1-D biases."""
        check_choice("block", self.block, ("global", "axial"))
        if self.block != "axial":
            return
        if self.pooling != "gap" or self.class_token:
            raise ValueError("Axial-ViT keeps the patch grid 2-D and has no class token: use pooling='gap'")
        if self.num_registers:
            raise ValueError("Axial-ViT's row and column attention sees only the patch grid: it takes no registers")
        if self.posemb == "relative":
            raise ValueError("relative position embeddings are 1-D over the whole sequence; Axial-ViT's row and "
                             "column attention does not take them (use learn1d or learn2d)")

    @property
    def total_stride(self) -> int:
        """Pixels per token side: the patch size, times 16 for a hybrid's ResNet stem."""
        if self.resnet_layers is None:
            return self.patch_size
        return self.patch_size * hybrid_stride(self.resnet_layers)

    @property
    def grid_size(self) -> tuple[int, int]:
        s = self.total_stride
        return (self.img_size[0] // s, self.img_size[1] // s)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def num_class_tokens(self) -> int:
        """Tokens before the patches that take a position embedding: the class token (and DeiT's
        distillation token)."""
        return (1 + int(self.distill_token)) if self.class_token else 0

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches in the sequence: the class (and distillation) token, then the registers."""
        return self.num_class_tokens + self.num_registers

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["img_size"] = list(self.img_size)
        if self.resnet_layers is not None:
            d["resnet_layers"] = list(self.resnet_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ViTConfig":
        if not isinstance(d, dict):
            raise ValueError(f"a ViT config is a JSON object, got {type(d).__name__}")
        check_fields(cls, d, "ViTConfig fields")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ViTConfig":
        return cls.from_dict(json.loads(text))

    def replace(self, **overrides: Any) -> "ViTConfig":
        return dataclasses.replace(self, **overrides)


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

    The path is `F.scaled_dot_product_attention`. While `record` holds a list (`recording_attention`), the same
    softmax(q k^T / sqrt(d)) is computed explicitly and its (B, heads, T, T) weights are appended to it.
    """

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.head_dim
        self.scale = self.head_dim**-0.5
        # SDPA's own default, 1 / sqrt(d) in double (bit-identical eager results), passed as a number so that an
        # ONNX export holds a constant, which onnxruntime folds into the q k^T MatMul (no shape -> sqrt at run time)
        self.sdpa_scale = 1 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width, bias=cfg.qkv_bias)
        self.attn_drop = cfg.attn_dropout
        self.proj = nn.Linear(cfg.width, cfg.width)
        # appendix D.4: relative position logits added to the content logits before the softmax
        tokens = cfg.num_prefix_tokens + cfg.num_patches
        self.rel = RelativePositionBias(tokens, self.head_dim) if cfg.posemb == "relative" else None
        self.record: list[torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x)[0]

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, heads, T, head_dim) of the fused projection's output `qkv` (B, T, 3 * width)."""
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def attend(self, x: torch.Tensor, size: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the attention's output, its keys (B, heads, T, head_dim)); `size` (B, T, 1), the patch count of each
        token after token merging, adds ToMe's proportional-attention bias log(size) to the logits of each key."""
        B, T, C = x.shape
        q, k, v = self.split_heads(self.qkv(x))
        drop = self.attn_drop if self.training else 0.0
        bias = self.rel(q, self.scale) if self.rel is not None else None
        if size is not None:
            bias = size_bias(size) if bias is None else bias + size_bias(size)
        if self.record is not None:
            logits = (q * self.scale) @ k.transpose(-2, -1)
            attn = torch.softmax(logits if bias is None else logits + bias, dim=-1)
            self.record.append(attn)
            out = F.dropout(attn, drop, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=drop, scale=self.sdpa_scale)
        out = out.transpose(1, 2).reshape(B, T, C)
        return self.proj(out), k


@contextlib.contextmanager
def attention_overrides(model: nn.Module, **values: Any) -> Iterator[list[Attention]]:
    """Within the block, every `Attention` of `model` has the attributes `values`; each gets its own earlier values
    back after it (also on an error). Yields the layers."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    saved = [{k: getattr(m, k) for k in values} for m in layers]
    for m in layers:
        for k, v in values.items():
            setattr(m, k, v)
    try:
        yield layers
    finally:
        for m, old in zip(layers, saved):
            for k, v in old.items():
                setattr(m, k, v)


@contextlib.contextmanager
def recording_attention(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, every `Attention` of `model` appends its weights, in call order, to the list yielded."""
    record: list[torch.Tensor] = []
    with attention_overrides(model, record=record):
        yield record


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.ls1(self.drop(self.attn(self.norm1(x)))))  # eq. 2: z' = MSA(LN(z)) + z
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # eq. 3: z = MLP(LN(z')) + z'

    def merged(self, x: torch.Tensor, size: torch.Tensor | None, r: int,
               prefix: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The block with token merging (models/tome.py): proportional attention by `size`, then `r` patch tokens
        merged between eq. 2 and eq. 3 by their keys; returns (z, sizes)."""
        y, k = self.attn.attend(self.norm1(x), size)
        x = x + self.drop_path(self.ls1(self.drop(y)))
        if r:
            x, size = merge_tokens(x, k.mean(dim=1), size, r, prefix)
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x)))), size


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


class VisionTransformer(PreprocessDeclared, HubApi, TimmApi, nn.Module):
    """ViT (§3.1). `forward` = `forward_head(forward_features(x))`; see the module docstring."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.config = cfg
        D = cfg.width
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if cfg.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if cfg.distill_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, cfg.num_registers, D)) if cfg.num_registers else None
        gh, gw = cfg.grid_size
        n = cfg.depth if cfg.posemb_placement == "every_layer" else 1  # tables: one per layer, or one
        if cfg.posemb == "learn1d":  # one table over the flattened sequence, class token included
            self.pos_embed = nn.Parameter(torch.zeros(n, cfg.num_class_tokens + gh * gw, D))
        elif cfg.posemb == "learn2d":  # appendix D.4: X- and Y-embeddings of size D/2, concatenated
            self.pos_embed_row = nn.Parameter(torch.zeros(n, gh, D // 2))
            self.pos_embed_col = nn.Parameter(torch.zeros(n, gw, D // 2))
            self.pos_embed_cls = nn.Parameter(torch.zeros(n, cfg.num_class_tokens, D))
        self.pos_drop = nn.Dropout(cfg.dropout)
        self.norm_pre: nn.Module = nn.LayerNorm(D, eps=cfg.ln_eps) if cfg.pre_norm else nn.Identity()
        rates = [cfg.drop_path * i / max(cfg.depth - 1, 1) for i in range(cfg.depth)]
        if cfg.block == "axial":  # appendix D.7: a row block then a column block in place of each block
            self.blocks = nn.ModuleList(AxialBlock(lambda r=r: Block(cfg, r)) for r in rates)
        else:
            self.blocks = nn.ModuleList(Block(cfg, r) for r in rates)
        # eq. 4's LN: on every token before pooling, or (fc_norm) on the pooled representation
        self.norm: nn.Module = nn.Identity() if cfg.fc_norm else nn.LayerNorm(D, eps=cfg.ln_eps)
        self.fc_norm: nn.Module = nn.LayerNorm(D, eps=cfg.ln_eps) if cfg.fc_norm else nn.Identity()
        self.map_head = MAPHead(cfg) if cfg.pooling == "map" else None
        self.pre_logits: nn.Module | None = None
        head_in = D
        if cfg.representation_size:
            self.pre_logits = nn.Sequential(nn.Linear(D, cfg.representation_size), nn.Tanh())
            head_in = cfg.representation_size
        self.head = nn.Linear(head_in, cfg.num_classes) if cfg.num_classes > 0 else nn.Identity()
        self.head_dist: nn.Module | None = None
        if cfg.distill_token:
            self.head_dist = nn.Linear(D, cfg.num_classes) if cfg.num_classes > 0 else nn.Identity()
        self.grad_checkpointing = False
        self.merge_r: int | tuple[int, ...] = 0  # token merging (ToMe), an inference option: set_token_merging
        self.init_preprocess(cfg.img_size, cfg.in_chans)  # the original's [-1, 1] until a file or run says otherwise
        self.reset_parameters()

    # ----------------------------------------------------------------------------- init
    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise as the original code: xavier-uniform kernels, N(0, 1e-6) biases, ..."""
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear) and m is not self.head and m is not self.head_dist:
                if name.endswith("attn.qkv"):  # q, k and v are three (D, D) kernels in the original
                    for w in m.weight.chunk(3, dim=0):
                        nn.init.xavier_uniform_(w)
                else:
                    nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if self.pre_logits is not None:  # flax Dense default: lecun-normal kernel, zero bias
            lin = self.pre_logits[0]
            nn.init.trunc_normal_(lin.weight, std=math.sqrt(1.0 / lin.in_features))
            nn.init.zeros_(lin.bias)
        proj = self.patch_embed.proj  # flax Conv default: lecun-normal over fan-in P*P*C
        fan_in = proj.in_channels * proj.kernel_size[0] * proj.kernel_size[1]
        nn.init.trunc_normal_(proj.weight, std=math.sqrt(1.0 / fan_in))
        if proj.bias is not None:
            nn.init.zeros_(proj.bias)
        for m in self.modules():
            if isinstance(m, LayerScale):
                nn.init.constant_(m.gamma, m.init)
        for p in self._posemb_params():
            nn.init.normal_(p, std=0.02)
        if self.cls_token is not None:
            nn.init.zeros_(self.cls_token)
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=0.02)
        if self.dist_token is not None:
            nn.init.normal_(self.dist_token, std=0.02)
        if self.map_head is not None:
            nn.init.xavier_uniform_(self.map_head.probe.view(1, -1))
        if isinstance(self.head, nn.Linear):
            self.reset_head(self.config.num_classes, bias=self.config.head_bias_init)

    def _posemb_params(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters(recurse=False) if n.startswith("pos_embed")]

    def reset_head(self, num_classes: int, bias: float = 0.0, drop_pre_logits: bool = False) -> None:
        """Replace the classifier with a zero-initialised K-way Dense (the paper's fine-tuning head, §3.2)."""
        # DeiT's two heads read their tokens directly: a pooler (DeiTModel's) goes when heads come
        drop_pre_logits = drop_pre_logits or (self.config.distill_token and num_classes > 0)
        # validated (0 <= K <= 2^24) before anything is allocated
        self.config.replace(num_classes=num_classes, **({"representation_size": None} if drop_pre_logits else {}))
        if drop_pre_logits and self.pre_logits is not None:
            self.pre_logits = None
            self.config.representation_size = None
        head_in = self.config.representation_size or self.config.width
        ref = self.patch_embed.proj.weight  # the device and dtype the new head takes

        def zero_head() -> nn.Module:
            if num_classes <= 0:
                return nn.Identity()
            head = nn.Linear(head_in, num_classes, device=ref.device, dtype=ref.dtype)
            nn.init.zeros_(head.weight)
            nn.init.constant_(head.bias, bias)
            return head

        self.head = zero_head()
        if self.head_dist is not None:  # DeiT's second head is replaced alike
            self.head_dist = zero_head()
        self.config.num_classes = num_classes

    # ----------------------------------------------------------------------------- resolution
    def set_img_size(self, img_size: int | tuple[int, int], mode: str = "bicubic") -> None:
        """Permanently move the model to another resolution, resampling E_pos in 2D (§3.2)."""
        new = to_pair(img_size, "img_size")
        old_grid = self.config.grid_size
        new_cfg = self.config.replace(img_size=new)  # validates divisibility
        prefix = self.config.num_class_tokens
        if self.config.posemb == "learn1d":
            self.pos_embed = nn.Parameter(torch.cat(
                [resample_posemb(t[None], new_cfg.grid_size, old_grid, prefix, mode, **self._resample_kwargs())
                 for t in self.pos_embed.data]))
        elif self.config.posemb == "learn2d":
            gh, gw = new_cfg.grid_size
            self.pos_embed_row = nn.Parameter(torch.cat([resample_axis(t[None], gh, mode) for t in self.pos_embed_row.data]))
            self.pos_embed_col = nn.Parameter(torch.cat([resample_axis(t[None], gw, mode) for t in self.pos_embed_col.data]))
        elif self.config.posemb == "relative":  # the offset tables follow the new sequence length
            for blk in self.blocks:
                blk.attn.rel.resize(self.config.num_prefix_tokens + new_cfg.num_patches)
        self.config = new_cfg

    def _resample_kwargs(self) -> dict[str, Any]:
        """`resample_posemb`'s antialias and offset for the config's `posemb_resample`."""
        how = self.config.posemb_resample
        return {"antialias": how == "bicubic_antialias", "offset": 0.1 if how == "bicubic_dino" else 0.0}

    def _check_input(self, x: torch.Tensor) -> tuple[int, int]:
        cfg = self.config
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"expected a torch.Tensor of images (B, C, H, W), got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(
                f"expected a 4-D batch of images (B, {cfg.in_chans}, H, W), got a {x.ndim}-D tensor of shape "
                f"{tuple(x.shape)}" + ("; add a batch dimension with x.unsqueeze(0)" if x.ndim == 3 else "")
            )
        if x.shape[1] != cfg.in_chans:
            raise ValueError(f"expected {cfg.in_chans} input channels, got {x.shape[1]} (shape {tuple(x.shape)})")
        if not x.is_floating_point():
            raise ValueError(f"expected normalised float images, got a {x.dtype} tensor; for pixels 0..255 use "
                             "model.preprocess(x.float() / 255)")
        H, W = x.shape[-2:]
        s = cfg.total_stride
        if H % s or W % s:
            raise ValueError(f"image size {H}x{W} is not divisible by the patch stride {s}")
        if (H, W) != cfg.img_size and not cfg.dynamic_img_size:
            raise ValueError(
                f"this model expects {cfg.img_size[0]}x{cfg.img_size[1]} images, got {H}x{W}; "
                "build it with dynamic_img_size=True or call model.set_img_size(...) to resample "
                "the position embeddings (paper §3.2)"
            )
        return H // s, W // s

    def position_embedding(self, grid: tuple[int, int], layer: int = 0) -> torch.Tensor | None:
        """E_pos (1, T, D) for a (gh, gw) patch grid, prefix tokens first, resampled in 2D if the grid differs;
        `layer` picks the table of that layer when each layer has its own (appendix D.4). None for `none` and
        `relative` (which acts inside the attention). Registers take none (they are not in the table)."""
        cfg = self.config
        if cfg.posemb in ("none", "relative"):
            return None
        if cfg.posemb in SINCOS:  # fixed, computed for any grid; the class token gets zeros
            pe = sincos_2d(grid, cfg.width, big_vision=cfg.posemb == "sincos2d_big_vision")
            pe = pe.to(self.patch_embed.proj.weight.device)
            return torch.cat([pe.new_zeros(1, cfg.num_class_tokens, cfg.width), pe], dim=1)
        i = layer if cfg.posemb_placement == "every_layer" else 0
        if cfg.posemb == "learn1d":
            pe = self.pos_embed[i : i + 1]
            if grid != cfg.grid_size:
                pe = resample_posemb(pe, grid, cfg.grid_size, cfg.num_class_tokens, **self._resample_kwargs())
            return pe
        gh, gw = grid
        row, col = self.pos_embed_row[i : i + 1], self.pos_embed_col[i : i + 1]
        if grid != cfg.grid_size:
            row, col = resample_axis(row, gh), resample_axis(col, gw)
        D2 = row.shape[-1]
        grid_pe = torch.cat(
            [row[:, :, None, :].expand(1, gh, gw, D2), col[:, None, :, :].expand(1, gh, gw, D2)], dim=-1
        ).reshape(1, gh * gw, 2 * D2)
        return torch.cat([self.pos_embed_cls[i : i + 1], grid_pe], dim=1)

    # ----------------------------------------------------------------------------- forward
    def embed(
        self, x: torch.Tensor, patch_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """eq. 1: z_0 = [x_class; x_p E] + E_pos (position embedding added after the class token).

        `patch_fn` may rewrite the patch embeddings x_p E (B, N, D) before the class token and E_pos
        are added: masked patch prediction (§4.6) corrupts them there.
        """
        return self._embed(x, patch_fn)[0]

    def _embed(self, x: torch.Tensor, patch_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, tuple[int, int]]:
        """`embed`, and the patch grid of `x` (the input checked once)."""
        grid = self._check_input(x)
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
        if patch_fn is not None:
            x = patch_fn(x)
        if self.dist_token is not None:
            x = torch.cat([self.dist_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        pe = self.position_embedding(grid) if self.config.posemb_placement == "input" else None
        if pe is not None:
            x = x + pe.to(x.dtype)
        if self.reg_token is not None:  # registers after the class token, without a position embedding
            c = self.config.num_class_tokens
            x = torch.cat([x[:, :c], self.reg_token.expand(x.shape[0], -1, -1).to(x.dtype), x[:, c:]], dim=1)
        return self.norm_pre(self.pos_drop(x)), grid

    def _grid_of(self, z: torch.Tensor) -> tuple[int, int]:
        """The patch grid of a token sequence at the model's own size (a dynamic size must be passed)."""
        if z.shape[1] - self.config.num_prefix_tokens == self.config.num_patches:
            return self.config.grid_size
        raise ValueError(f"{z.shape[1]} tokens do not fit the model's {self.config.grid_size} grid; pass grid=")

    # ----------------------------------------------------------------------------- token merging
    def set_token_merging(self, r: int | list[int] | tuple[int, ...] = 0) -> None:
        """Merge `r` patch tokens in every block (ToMe, Bolya et al. 2023; models/tome.py), or `r[i]` in block i;
        0 turns merging off. An inference-time option, not part of the config: it changes no weight, applies to any
        checkpoint, and an export records it in the file's metadata. Class, distillation and register tokens are
        never merged. Refused for the paper's ablations whose positions must stay a full grid after the first
        block: relative position embeddings, per-layer position embeddings, Axial-ViT."""
        cfg = self.config
        merge_schedule(r, cfg.depth, cfg.num_prefix_tokens + cfg.num_patches, cfg.num_prefix_tokens)  # checks r
        if any(v > 0 for v in ([r] if isinstance(r, int) else r)):
            if cfg.block == "axial":
                raise ValueError("token merging needs the global block: Axial-ViT's row / column attention needs the "
                                 "full patch grid in every block")
            if cfg.posemb == "relative" or cfg.posemb_placement != "input":
                raise ValueError(f"token merging needs position embeddings added once at the input; this model has "
                                 f"posemb={cfg.posemb!r}, posemb_placement={cfg.posemb_placement!r}, which need the "
                                 "full patch grid in every block")
        self.merge_r = r if isinstance(r, int) else tuple(int(v) for v in r)

    def encode(self, z: torch.Tensor, grid: tuple[int, int] | None = None, keep: list[torch.Tensor] | None = None,
               last: int | None = None) -> torch.Tensor:
        """eq. 2-3 applied L times to z_0, then the LN of eq. 4 on every token. With appendix D.4's
        per-layer placements E_pos is added before each block; Axial-ViT's blocks see the 2-D grid.
        `keep` (a list) receives each block's output z_l; `last` stops after that block (no final LN).
        With token merging (`set_token_merging`) the sequence shortens block by block."""
        return self._encode(z, grid, keep, last)[0]

    def _encode(self, z: torch.Tensor, grid: tuple[int, int] | None = None, keep: list[torch.Tensor] | None = None,
                last: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`encode`, and the patch count of each output token under token merging (None without)."""
        cfg = self.config
        prefix = cfg.num_prefix_tokens
        rs = merge_schedule(self.merge_r, cfg.depth, z.shape[1], prefix) if self.merge_r else ()
        if any(rs):
            size = None
            for i, blk in enumerate(self.blocks):
                z, size = blk.merged(z, size, rs[i], prefix)
                if keep is not None:
                    keep.append(z)
                if i == last:
                    return z, size
            return self.norm(z), size
        per_layer = cfg.posemb_placement != "input" and cfg.posemb in ("learn1d", "learn2d")
        if grid is None and (per_layer or cfg.block == "axial"):
            grid = self._grid_of(z)
        for i, blk in enumerate(self.blocks):
            if per_layer:
                z = z + self.position_embedding(grid, i).to(z.dtype)
            args = (z, grid) if cfg.block == "axial" else (z,)
            if self.grad_checkpointing and self.training:
                z = torch.utils.checkpoint.checkpoint(blk, *args, use_reentrant=False)
            else:
                z = blk(*args)
            if keep is not None:
                keep.append(z)
            if i == last:
                return z, None
        return self.norm(z), None

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder output LN(z_L) for all tokens, (B, T, D)."""
        return self.encode(*self._embed(x))

    def _features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward_features`, and the merged tokens' patch counts (None without token merging)."""
        return self._encode(*self._embed(x))

    def intermediates(self, x: torch.Tensor, attention: bool = False, last_block: int | None = None,
                      patch_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
                      blocks: bool = True) -> dict[str, Any]:
        """Every intermediate of one forward pass by name (big_vision's dict), the one API that `inspect`,
        `fewshot`, masked patch prediction and timm's `forward_intermediates` read:

        - "embedded": z_0 of eq. 1 (B, T, D); "blocks": [z_1 .. z_L], each block's output before the final LN;
        - "attention" (with `attention=True`): each layer's weights (B, heads, T, T), computed explicitly
          (Axial-ViT: the row step's and the column step's per block, each a (B, heads, N, N) map);
        - "encoded": LN(z_L); "pooled": eq. 4's y; "pre_logits": the head's input; "logits": the output of
          `forward` in eval mode (a distilled model: the two heads' mean).

        `last_block` stops after that block (then only "embedded", "blocks" and "attention"); `patch_fn` rewrites
        the patch embeddings as in `embed` (masked patch prediction, §4.6); `blocks=False` keeps no block outputs
        (a caller that reads only the pooled features need not hold L copies of the tokens)."""
        z, grid = self._embed(x, patch_fn)
        out: dict[str, Any] = {"embedded": z, "blocks": []}
        with contextlib.ExitStack() as stack:
            maps = stack.enter_context(recording_attention(self)) if attention else None
            z, size = self._encode(z, grid, out["blocks"] if blocks else None, last_block)
        if attention:
            out["attention"] = maps if self.config.block != "axial" else [
                AxialBlock.full_map(a, x.shape[0], grid, i % 2 == 0) for i, a in enumerate(maps)]
        if last_block is not None:
            return out
        out["encoded"] = z
        out["pooled"] = self.pool(z, size)
        out["pre_logits"] = self.pre_logits(out["pooled"]) if self.pre_logits is not None else out["pooled"]
        out["logits"] = self.head(out["pre_logits"]) if self.head_dist is None else self._two_heads(z).mean()
        return out

    def pool(self, x: torch.Tensor, size: torch.Tensor | None = None) -> torch.Tensor:
        """eq. 4's y: the class token z_L^0, the mean over patch tokens (GAP), or their attention pooling
        (MAP); prefix tokens (class token, registers) are not pooled by GAP and MAP. With fc_norm, eq. 4's LN
        comes here, after pooling. `size`: the tokens' patch counts after token merging, which weight GAP's mean
        and MAP's keys."""
        if self.config.pooling == "token":
            return self.fc_norm(x[:, 0])
        p = self.config.num_prefix_tokens
        patches, size = x[:, p:], (size[:, p:] if size is not None else None)
        return self.fc_norm(weighted_mean(patches, size) if self.map_head is None else self.map_head(patches, size))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False, size: torch.Tensor | None = None
                     ) -> torch.Tensor:
        """Classification head on the encoder output; `pre_logits=True` returns the representation; `size`: the
        tokens' patch counts after token merging."""
        x = self.pool(x, size)
        if self.pre_logits is not None:
            x = self.pre_logits(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> Any:
        """Logits (B, K). With a distillation token: in training, both heads' logits as `TwoHeads` (the engine
        supervises the second by the teacher); in eval mode their mean (DeiT's inference)."""
        z, size = self._features(x)
        if self.head_dist is None:
            return self.forward_head(z, size=size)
        heads = self._two_heads(z)
        return heads if self.training else heads.mean()

    def _two_heads(self, z: torch.Tensor) -> TwoHeads:
        """A distilled ViT's class-token and distillation-token logits (DeiT)."""
        return TwoHeads(self.head(z[:, 0]), self.head_dist(z[:, 1]))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def no_weight_decay(self) -> set[str]:
        """Parameter names that AdamW should not decay: position embeddings (absolute and relative) and the
        class token."""
        names = {n for n, _ in self.named_parameters() if n.startswith("pos_embed") or n.endswith("rel.table")}
        tokens = {n for n in ("cls_token", "dist_token", "reg_token") if getattr(self, n) is not None}
        return names | tokens
