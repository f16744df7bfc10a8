"""The Vision Transformer of Dosovitskiy et al. (ICLR 2021), §3.1, eq. 1-4.

    z_0  = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (eq. 1)  -> PatchEmbed, VisionTransformer.embed
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                          (eq. 2)  -> Block.forward (models/layers.py)
    z_l  = MLP(LN(z'_l)) + z'_l                                (eq. 3)  -> Block.forward (models/layers.py)
    y    = LN(z_L^0)                                           (eq. 4)  -> VisionTransformer.encode / pool

`encode` runs eq. 2-3 L times through `Block.forward(x, state)`, the one block computation, and returns the token
record (`Tokens`: tokens, merged tokens' sizes, grid, prefix count, recorded attention) that pooling, the heads,
the features (models/features.py), `intermediates` and timm's `forward_intermediates` read. The config and its
checks are in models/config.py, the layers in models/layers.py. Numerics follow the original JAX code
(google-research/vision_transformer): LayerNorm eps 1e-6, GELU with the tanh approximation by default, xavier-uniform
kernels with N(0, 1e-6) biases, N(0, 0.02) position embeddings, a zero class token and a zero-initialised head.
Appendix D's variants and later work's options (MAP, registers, DeiT's distillation token, LayerScale, fc_norm,
CLIP's pre-LN, QuickGELU) are carried by the config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from vitkit.models.axial import AxialBlock
from vitkit.models.base import PreprocessDeclared, random_init_skipped
from vitkit.models.config import GELU_APPROXIMATE, SINCOS, ViTConfig
from vitkit.models.features import feature
from vitkit.models.hub_api import HubApi
from vitkit.models.layers import (  # noqa: F401 - re-exported
    Attention,
    Block,
    EncodeState,
    LayerScale,
    MAPHead,
    Mlp,
    PatchEmbed,
    Tokens,
    TwoHeads,
    init_original,
    resample_patch_kernel,
)
from vitkit.models.packing import Layout, PackedBatch
from vitkit.models.posemb import resample_axis, resample_posemb, sincos_2d
from vitkit.models.timm_api import TimmApi
from vitkit.models.tome import check_merging, merge_schedule, weighted_mean
from vitkit.utils import to_pair

# the names other modules import from here
__all__ = ["GELU_APPROXIMATE", "Attention", "Block", "EncodeState", "LayerScale", "Mlp", "Tokens", "TwoHeads",
           "ViTConfig", "VisionTransformer"]


class VisionTransformer(PreprocessDeclared, HubApi, TimmApi, nn.Module):
    """ViT (§3.1). `forward` = `forward_head(tokens(x))`; see the module docstring."""

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
            th, tw = cfg.table_grid  # a checkpoint's own grid where the model keeps its table (posemb_grid)
            self.pos_embed = nn.Parameter(torch.zeros(n, cfg.num_class_tokens + th * tw, D))
        elif cfg.posemb in ("learn2d", "factorized"):
            # appendix D.4's learn2d: X- and Y-embeddings of size D/2, concatenated; NaViT's "factorized":
            # X- and Y-embeddings of size D, summed
            d = D // 2 if cfg.posemb == "learn2d" else D
            self.pos_embed_row = nn.Parameter(torch.zeros(n, gh, d))
            self.pos_embed_col = nn.Parameter(torch.zeros(n, gw, d))
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
    def reset_parameters(self) -> None:
        """Initialise as the original code (`layers.init_original`), then the zero head (§3.2); under
        `base.no_random_init` (weights loaded next) the head only (it decides whether pre_logits stays)."""
        if not random_init_skipped():
            init_original(self, [p for n, p in self.named_parameters(recurse=False) if n.startswith("pos_embed")])
        if isinstance(self.head, nn.Linear):
            self.reset_head(self.config.num_classes, bias=self.config.head_bias_init)

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
        """Permanently move the model to another resolution, resampling E_pos in 2D (§3.2). A model that keeps a
        checkpoint's own table (`config.posemb_grid`) keeps it: E_pos is resampled from it, once, for the new size
        (never from an earlier resampling)."""
        self._move_positions(self.config.replace(img_size=to_pair(img_size, "img_size")), mode)

    def set_patch_size(self, patch: int, img_size: int | tuple[int, int] | None = None, mode: str = "bicubic") -> None:
        """Permanently change the patch size (FlexiViT, Beyer et al. 2023): the patch embedding's kernel resampled by
        its pseudo-inverse resize (`resample_patch_kernel`: a patch resized up with the image keeps its token), E_pos
        resampled in 2D (§3.2) to the new grid of `img_size` (default: the present size). The hybrid's ResNet stem is
        refused (its patches are cells of a feature map, not pixels)."""
        cfg = self.config
        if cfg.resnet_layers is not None:
            raise ValueError("set_patch_size: the hybrid's patches are cells of its ResNet stem's feature map, not "
                             "pixels; its patch size is part of the architecture")
        if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1:
            raise ValueError(f"set_patch_size: the patch size must be a positive integer, got {patch!r}")
        new_cfg = cfg.replace(patch_size=patch, img_size=cfg.img_size if img_size is None else to_pair(img_size,
                                                                                                     "img_size"))
        proj = self.patch_embed.proj
        conv = nn.Conv2d(proj.in_channels, proj.out_channels, patch, stride=patch, bias=proj.bias is not None)
        conv = conv.to(device=proj.weight.device, dtype=proj.weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(resample_patch_kernel(proj.weight, patch, mode))
            if proj.bias is not None:
                conv.bias.copy_(proj.bias)
        self.patch_embed.proj = conv
        self._move_positions(new_cfg, mode)

    def _move_positions(self, new_cfg: ViTConfig, mode: str) -> None:
        """E_pos (and relative tables) resampled from the present grid to `new_cfg`'s, then `new_cfg` taken."""
        old_grid = self.config.grid_size
        prefix = self.config.num_class_tokens
        if self.config.posemb == "learn1d" and self.config.posemb_grid is None:  # a kept table stays as it came
            self.pos_embed = nn.Parameter(torch.cat(
                [resample_posemb(t[None], new_cfg.grid_size, old_grid, prefix, mode, **self._resample_kwargs())
                 for t in self.pos_embed.data]))
        elif self.config.posemb in ("learn2d", "factorized"):
            gh, gw = new_cfg.grid_size
            self.pos_embed_row = nn.Parameter(torch.cat([resample_axis(t[None], gh, mode) for t in self.pos_embed_row.data]))
            self.pos_embed_col = nn.Parameter(torch.cat([resample_axis(t[None], gw, mode) for t in self.pos_embed_col.data]))
        elif self.config.posemb == "relative":  # the offset tables follow the new sequence length
            for blk in self.blocks:
                blk.attn.rel.resize(self.config.num_prefix_tokens + new_cfg.num_patches)
        self.config = new_cfg

    def keep_position_table(self) -> None:
        """Keep the learned 1D table at its present grid whatever input size the model later runs at (`posemb_grid`):
        each other input grid resamples E_pos from it once, as a checkpoint's own library does (transformers'
        Dinov2Model on every forward), and savers write the table as it is. Other position embeddings: no change."""
        if self.config.posemb == "learn1d" and self.config.posemb_grid is None:
            self.config = self.config.replace(posemb_grid=self.config.grid_size)

    def fix_position_table(self) -> None:
        """The inverse of `keep_position_table`, for a fixed graph (an export): the table resampled once to the
        input grid and made the model's own (`posemb_grid` None)."""
        cfg = self.config
        if cfg.posemb_grid is None:
            return
        if cfg.posemb_grid != cfg.grid_size:
            self.pos_embed = nn.Parameter(torch.cat(
                [resample_posemb(t[None], cfg.grid_size, cfg.posemb_grid, cfg.num_class_tokens,
                                 **self._resample_kwargs()) for t in self.pos_embed.data]))
        self.config = cfg.replace(posemb_grid=None)

    def _resample_kwargs(self) -> dict[str, Any]:
        """`resample_posemb`'s antialias and offset for the config's `posemb_resample`."""
        how = self.config.posemb_resample
        return {"antialias": how == "bicubic_antialias", "offset": 0.1 if how == "bicubic_dino" else 0.0}

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
            if grid != cfg.table_grid:  # from the table as it is held (a checkpoint's own: posemb_grid), once
                pe = resample_posemb(pe, grid, cfg.table_grid, cfg.num_class_tokens, **self._resample_kwargs())
            return pe
        gh, gw = grid
        row, col = self.pos_embed_row[i : i + 1], self.pos_embed_col[i : i + 1]
        if grid != cfg.grid_size:
            row, col = resample_axis(row, gh), resample_axis(col, gw)
        if cfg.posemb == "factorized":  # NaViT: E_pos(r, c) = row_r + col_c
            grid_pe = (row[:, :, None, :] + col[:, None, :, :]).reshape(1, gh * gw, -1)
        else:
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
        """`embed`, and the patch grid of `x` (the input checked once; packed images refused by name: the per-block
        record of `intermediates`, timm's `forward_intermediates` / `forward_features` and `vitkit inspect` read
        one batch of equal images)."""
        if isinstance(x, PackedBatch):
            raise ValueError("packed images (a PackedBatch, native resolution) run through forward, forward_packed "
                             "and tokens_packed only; intermediates (per-block outputs, attention maps: vitkit "
                             "inspect), forward_intermediates, forward_features and tokens take a batch of equal "
                             "images (B, C, H, W): run an image alone for its own, "
                             "model.intermediates(image[None])")
        grid = self.config.grid_of_images(x)
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

    def _grid_of(self, z: torch.Tensor, needed: bool) -> tuple[int, int] | None:
        """The patch grid of a token sequence at the model's own size; None where it does not fit and is not
        `needed` (a dynamic size must be passed where it is)."""
        if z.shape[1] - self.config.num_prefix_tokens == self.config.num_patches:
            return self.config.grid_size
        if not needed:
            return None
        raise ValueError(f"{z.shape[1]} tokens do not fit the model's {self.config.grid_size} grid; pass grid=")

    # ----------------------------------------------------------------------------- token merging
    def set_token_merging(self, r: int | list[int] | tuple[int, ...] = 0) -> None:
        """Merge `r` patch tokens in every block (ToMe, Bolya et al. 2023; models/tome.py), or `r[i]` in block i;
        0 turns merging off. An inference-time option, not part of the config: it changes no weight, applies to any
        checkpoint, and an export records it in the file's metadata; each `encode` reads it into its state once.
        Class, distillation and register tokens are never merged. Refused where positions must stay a full grid
        after the first block (relative or per-layer position embeddings, Axial-ViT)."""
        self.merge_r = check_merging(self.config, r)

    @property
    def merging(self) -> bool:
        """Whether token merging is on (`set_token_merging`)."""
        return any(v > 0 for v in ([self.merge_r] if isinstance(self.merge_r, int) else self.merge_r))

    def encode(self, z: torch.Tensor, grid: tuple[int, int] | None = None, keep: list[torch.Tensor] | None = None,
               last: int | None = None, attention: bool = False, mask: torch.Tensor | None = None) -> Tokens:
        """eq. 2-3 applied L times to z_0, then the LN of eq. 4 on every token: the token record. With appendix
        D.4's per-layer placements E_pos is added before each block; Axial-ViT's blocks see the 2-D grid. `keep`
        (a list) receives each block's output z_l; `last` stops after that block (no final LN); `attention`
        records each layer's weights. Token merging (`set_token_merging`) shortens the sequence block by block.
        `mask` (B, 1, T, T) bool: which keys each query may attend to (packed images, `tokens_packed`)."""
        cfg = self.config
        p = cfg.num_prefix_tokens
        per_layer = cfg.posemb_placement != "input" and cfg.posemb in ("learn1d", "learn2d")
        if mask is not None:
            self.check_packable()
        else:
            grid = grid or self._grid_of(z, per_layer or cfg.block == "axial")
        schedule = merge_schedule(self.merge_r, cfg.depth, z.shape[1], p) if self.merging else ()
        state = EncodeState(grid, p, schedule, attention=[] if attention else None, mask=mask)
        for i, blk in enumerate(self.blocks):
            state.layer = i
            if per_layer:
                z = z + self.position_embedding(grid, i).to(z.dtype)
            if self.grad_checkpointing and self.training and state.plain:  # a replay must not merge or record twice
                z = torch.utils.checkpoint.checkpoint(blk, z, state, use_reentrant=False)
            else:
                z = blk(z, state)
            if keep is not None:
                keep.append(z)
            if i == last:
                return Tokens(z, state.sizes, grid, p, state.attention)
        return Tokens(self.norm(z), state.sizes, grid, p, state.attention)

    def tokens(self, x: torch.Tensor) -> Tokens:
        """The token record of images `x` (eq. 1-3 and eq. 4's LN): what every consumer inside vitkit reads."""
        return self.encode(*self._embed(x))

    # ----------------------------------------------------------------------------- packed images (NaViT)
    def check_packable(self) -> None:
        """A ValueError naming what keeps this model from running packed images of their own sizes (NaViT,
        models/packing.py): token merging (it would merge tokens of different images), Axial-ViT's row / column
        blocks, relative or per-layer position embeddings (each needs one grid for the whole row), the hybrid's
        ResNet stem (it convolves whole images, not patches)."""
        cfg = self.config
        why = []
        if self.merging:
            why.append("token merging (set_token_merging) would merge tokens of different images; set_token_merging(0)")
        if cfg.block == "axial":
            why.append("Axial-ViT's row / column blocks need one patch grid per row")
        if cfg.posemb == "relative" or cfg.posemb_placement != "input":
            why.append(f"posemb={cfg.posemb!r}, posemb_placement={cfg.posemb_placement!r} need one patch grid per "
                       "row")
        if cfg.resnet_layers is not None:
            why.append("the hybrid's ResNet stem convolves whole images, not patches")
        if why:
            raise ValueError("packed images of their own sizes (native resolution) cannot run on this model: "
                             + "; ".join(why))

    def embed_packed(self, batch: PackedBatch) -> tuple[torch.Tensor, Layout]:
        """eq. 1 for packed images (NaViT): each patch x_p E (the patch embedding's kernel as one matrix), plus its
        image's E_pos at its (row, col), the learned table resampled to that image's grid in 2-D (§3.2,
        `position_embedding`, once per distinct grid); each image's class (and distillation) token with its E_pos,
        then its registers, before its patches. Returns the rows (R, T, D) and their `Layout`."""
        self.check_packable()
        cfg = self.config
        lay = batch.layout(cfg.num_prefix_tokens)
        proj = self.patch_embed.proj
        kernel = proj.weight.flatten(1)  # (D, C * P * P), as `patchify` flattens a patch
        if batch.patches.shape[-1] != kernel.shape[1]:
            raise ValueError(f"packed patches of {batch.patches.shape[-1]} values; this model's patches are "
                             f"{cfg.in_chans} x {cfg.patch_size} x {cfg.patch_size} = {kernel.shape[1]}")
        valid = batch.image_ids >= 0
        x = F.linear(batch.patches[valid].to(kernel.dtype), kernel, proj.bias)  # (n_patches, D), row-major
        n, c = batch.num_images, cfg.num_class_tokens
        heads = [t for t in (self.cls_token, self.dist_token) if t is not None]
        cls = torch.cat(heads, 1).expand(n, -1, -1).to(x.dtype) if heads else x.new_zeros(n, 0, cfg.width)
        grids, which = batch.grids.unique(dim=0, return_inverse=True)  # each distinct grid's E_pos made once
        pes = [self.position_embedding((int(gh), int(gw))) for gh, gw in grids.tolist()]
        if pes[0] is not None:
            starts = torch.tensor([0] + [int(gh * gw) for gh, gw in grids.tolist()], device=x.device).cumsum(0)
            img, rc = batch.image_ids[valid], batch.coords[valid]
            at = starts[which[img]] + rc[:, 0] * batch.grids[img, 1] + rc[:, 1]
            x = x + torch.cat([pe[0, c:] for pe in pes])[at].to(x.dtype)
            cls = cls + torch.stack([pe[0, :c] for pe in pes])[which].to(x.dtype)
        if self.reg_token is not None:  # registers after the class token, without a position embedding
            cls = torch.cat([cls, self.reg_token.expand(n, -1, -1).to(x.dtype)], 1)
        return self.norm_pre(self.pos_drop(lay.place(cls, x))), lay

    def tokens_packed(self, batch: PackedBatch, attention: bool = False) -> Tokens:
        """The token record of packed images (NaViT): the rows encoded with the attention mask that keeps images
        apart, then each image's tokens gathered into its own row (`Tokens.packed`: padding counted 0), so that
        pooling, the heads and the features read one image per row as they read a batch of equal images."""
        z, lay = self.embed_packed(batch)
        t = self.encode(z, attention=attention, mask=lay.mask())
        per_image, counts = lay.unpack(t.z)
        return Tokens(per_image, counts, None, t.num_prefix, t.attention, packed=True)

    def pack(self, images: Sequence[torch.Tensor], rows: Sequence[Sequence[int]] | None = None) -> PackedBatch:
        """Normalised images (C, H_i, W_i), each a whole number of patches, checked and packed (`PackedBatch.
        from_images`; `rows`: the images of each row, default all in one)."""
        if isinstance(images, torch.Tensor) and images.ndim == 4:
            images = list(images)
        if not images:
            raise ValueError("no images to pack")
        cfg = self.config
        for i, im in enumerate(images):
            if not isinstance(im, torch.Tensor) or im.ndim != 3:
                raise ValueError(f"image {i}: expected a tensor (C, H, W), got "
                                 f"{tuple(im.shape) if isinstance(im, torch.Tensor) else type(im).__name__}")
            C, H, W = im.shape
            if C != cfg.in_chans or not im.is_floating_point() or H % cfg.patch_size or W % cfg.patch_size:
                raise ValueError(f"image {i}: expected normalised float images ({cfg.in_chans}, H, W) with H and W "
                                 f"multiples of the {cfg.patch_size} px patch, got a {im.dtype} tensor of shape "
                                 f"{tuple(im.shape)}")
        return PackedBatch.from_images(images, self.config.patch_size, rows)

    def forward_packed(self, x: PackedBatch | Sequence[torch.Tensor]) -> Any:
        """Logits (n_images, K) of images at their own sizes (NaViT): a `PackedBatch`, or a list of normalised
        images (C, H_i, W_i), each a whole number of patches, packed into one row. Each image's output is the one it
        gets alone (`model(image[None])`)."""
        batch = x if isinstance(x, PackedBatch) else self.pack(x)
        return self.forward_head(self.tokens_packed(batch))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder output LN(z_L) for all tokens, (B, T, D) (timm's habit: a tensor; under token merging the merged
        tokens, whose sizes `tokens(x)` keeps)."""
        return self.tokens(x).z

    def intermediates(self, x: torch.Tensor, attention: bool = False, last_block: int | None = None,
                      patch_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
                      blocks: bool = True) -> dict[str, Any]:
        """Every intermediate of one forward pass by name (big_vision's dict), the one API that `inspect`,
        `fewshot`, masked patch prediction and timm's `forward_intermediates` read:

        - "embedded": z_0 of eq. 1 (B, T, D); "blocks": [z_1 .. z_L], each block's output before the final LN;
        - "attention" (with `attention=True`): each layer's weights (B, heads, T, T), computed explicitly
          (Axial-ViT: the row step's and the column step's per block, each a (B, heads, N, N) map; under token
          merging each layer's shorter sequence);
        - "tokens": the token record (`Tokens`) of the last block run; "encoded": LN(z_L); "pooled", "pre_logits",
          "logits": the features of those names (models/features.py: eq. 4's y, the head's input, the output of
          `forward` in eval mode).

        `last_block` stops after that block (then only "embedded", "blocks", "attention" and "tokens"); `patch_fn`
        rewrites the patch embeddings as in `embed` (masked patch prediction, §4.6); `blocks=False` keeps no block
        outputs (a caller that reads only the pooled features need not hold L copies of the tokens)."""
        z, grid = self._embed(x, patch_fn)
        out: dict[str, Any] = {"embedded": z, "blocks": []}
        t = out["tokens"] = self.encode(z, grid, out["blocks"] if blocks else None, last_block, attention)
        if attention:
            out["attention"] = t.attention if self.config.block != "axial" else [
                AxialBlock.full_map(a, x.shape[0], grid, i % 2 == 0) for i, a in enumerate(t.attention)]
        if last_block is not None:
            return out
        out["encoded"] = t.z
        out.update({name: feature(self, t, name) for name in ("pooled", "pre_logits", "logits")})
        return out

    def _as_tokens(self, x: torch.Tensor | Tokens) -> Tokens:
        """`x` as a token record: a bare tensor of tokens is refused where merged tokens' sizes would be needed."""
        if isinstance(x, Tokens):
            return x
        if self.merging and self.config.pooling != "token":
            raise ValueError(f"this model merges tokens (set_token_merging) and pools them ({self.config.pooling}) "
                             "weighted by their sizes, which a bare tensor of tokens does not carry: pass the token "
                             "record, model.forward_head(model.tokens(x))")
        return Tokens(x, None, None, self.config.num_prefix_tokens)

    def pool(self, x: torch.Tensor | Tokens) -> torch.Tensor:
        """eq. 4's y: the class token z_L^0, the mean over patch tokens (GAP), or their attention pooling
        (MAP); prefix tokens (class token, registers) are not pooled by GAP and MAP. With fc_norm, eq. 4's LN
        comes here, after pooling. Merged tokens (token merging) weight GAP's mean and MAP's keys by their sizes."""
        t = self._as_tokens(x)
        if self.config.pooling == "token":
            return self.fc_norm(t.z[:, 0])
        patches, size = t.patches, t.patch_sizes
        return self.fc_norm(weighted_mean(patches, size) if self.map_head is None else self.map_head(patches, size))

    def forward_head(self, x: torch.Tensor | Tokens, pre_logits: bool = False) -> Any:
        """Classification head on the encoder output (a token record, or timm's tensor of tokens); `pre_logits=True`
        returns the head's input. A distilled DeiT follows timm: its pre-logits are the mean of the class and
        distillation tokens (its pooler's output where it has one: transformers' DeiTModel), its logits both heads'
        as `TwoHeads` in training (the engine supervises the second by the teacher), their mean in eval mode."""
        t = self._as_tokens(x)
        if self.head_dist is not None and not (pre_logits and self.pre_logits is not None):
            if pre_logits:
                return (t.z[:, 0] + t.z[:, 1]) / 2
            heads = TwoHeads(self.head(t.z[:, 0]), self.head_dist(t.z[:, 1]))
            return heads if self.training else heads.mean()
        y = self.pool(t)
        if self.pre_logits is not None:
            y = self.pre_logits(y)
        return y if pre_logits else self.head(y)

    def forward(self, x: torch.Tensor | PackedBatch) -> Any:
        """Logits (B, K) (a distilled ViT: `forward_head`'s two heads); of a `PackedBatch`, each packed image's
        (`forward_packed`), so that a trainer, DDP or an evaluation loop runs packed batches as they run images."""
        if isinstance(x, PackedBatch):
            return self.forward_packed(x)
        return self.forward_head(self.tokens(x))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def no_weight_decay(self) -> set[str]:
        """Parameter names that AdamW should not decay: position embeddings (absolute and relative) and the
        class token."""
        names = {n for n, _ in self.named_parameters() if n.startswith("pos_embed") or n.endswith("rel.table")}
        tokens = {n for n in ("cls_token", "dist_token", "reg_token") if getattr(self, n) is not None}
        return names | tokens
