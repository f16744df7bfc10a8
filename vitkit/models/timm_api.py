"""The methods a timm user calls on a ViT, with timm's semantics, for vitkit's VisionTransformer (a mixin).

`forward_intermediates` is timm's intermediates API, read from the model's one intermediates dict
(`VisionTransformer.intermediates`): the output of chosen blocks (all, the last n, or a list of
indices), optionally through the final LayerNorm, without the prefix tokens (class, distillation, registers),
as NCHW maps of the patch grid or NLC tokens. `reset_classifier` gives a new head as timm builds it (PyTorch's
default Linear init; `reset_head` is the paper's zero-initialised head, §3.2). `group_matcher` groups parameters
by depth for layer-wise learning-rate decay; the parameter names are timm's own.
Tested against timm's outputs on the same weights (tests/fixtures/timm_preprocess, made by timm).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# timm's global_pool names for vitkit's pooling (the one map: the registry and the timm format use it too)
TIMM_POOL = {"token": "token", "gap": "avg", "map": "map"}
POOL_FROM_TIMM = {timm: ours for ours, timm in TIMM_POOL.items()}  # timm's global_pool -> vitkit's pooling
TIMM_ACTS = {"gelu": "exact", "gelu_tanh": "tanh", "quick_gelu": "quick"}  # timm's act_layer -> vitkit's GELU
GELU_ACTS = {v: k for k, v in TIMM_ACTS.items()}  # vitkit's GELU -> timm's act_layer


def take_indices(depth: int, indices: int | list[int] | tuple[int, ...] | None) -> list[int]:
    """timm's block selection: None = every block, n = the last n, a list = those (negative from the end)."""
    if indices is None:
        indices = depth
    if isinstance(indices, int):
        if not 0 < indices <= depth:
            raise ValueError(f"indices={indices}: take the last n of {depth} blocks, 1 <= n <= {depth}")
        return list(range(depth - indices, depth))
    out = [i + depth if i < 0 else i for i in indices]
    bad = [i for i, j in zip(indices, out) if not 0 <= j < depth]
    if bad:
        raise ValueError(f"block indices {bad} are out of range for {depth} blocks")
    return out


class TimmApi:
    """timm's ViT methods; the host provides `config`, `intermediates`, `merging`, `blocks`, `norm`, `head`, `set_img_size`."""

    @property
    def num_features(self) -> int:
        return self.config.width

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new `num_classes`-way head (0: none, features out), initialised as timm does (nn.Linear's default);
        `global_pool` may name the model's own pooling only (vitkit's pooling is part of the architecture)."""
        if global_pool is not None and global_pool != TIMM_POOL[self.config.pooling]:
            raise ValueError(f"global_pool={global_pool!r}: this model pools with {TIMM_POOL[self.config.pooling]!r}, "
                             "which is part of its architecture in vitkit; build another model to change it")
        if num_classes != self.config.num_classes:
            self.preprocess.labels = []
        self.reset_head(num_classes)
        if isinstance(self.head, nn.Linear):
            self.head.reset_parameters()
        if getattr(self, "head_dist", None) is not None and isinstance(self.head_dist, nn.Linear):
            self.head_dist.reset_parameters()

    def set_input_size(self, img_size: int | tuple[int, int] | None = None, patch_size: Any = None) -> None:
        """timm's name for `set_img_size` (E_pos resampled in 2D, §3.2) and, with `patch_size`, `set_patch_size`
        (FlexiViT's pseudo-inverse resize of the patch embedding, as timm's `resample_patch_embed`)."""
        if patch_size is not None:
            p = tuple(torch.nn.modules.utils._pair(patch_size))
            if p[0] != p[1]:
                raise ValueError(f"patch_size={patch_size!r}: vitkit's patches are square")
            if p[0] != self.config.patch_size:
                self.set_patch_size(int(p[0]), img_size)
                return
        if img_size is not None:
            self.set_img_size(img_size)

    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups by depth, as timm's (the stem, each block, then the final norm and the head)."""
        return {"stem": r"^cls_token|reg_token|pos_embed|patch_embed|norm_pre",
                "blocks": [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))]}

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | tuple[int, ...] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> Any:
        """timm's intermediates: the outputs of the blocks picked by `indices` (None: all; n: the last n; a list),
        through the final LayerNorm if `norm`, prefix tokens removed (returned beside each if
        `return_prefix_tokens`), as (B, D, H, W) maps ("NCHW"; refused under token merging, whose tokens are no grid) or (B, N, D) tokens
        ("NLC"). Returns the list, or
        (LN(z_L), list) unless `intermediates_only` (with `stop_early`, blocks after the last picked one are
        skipped)."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        if output_fmt == "NCHW" and self.merging:
            raise ValueError("forward_intermediates(output_fmt='NCHW'): this model merges tokens (token merging, "
                             "set_token_merging), so its blocks' outputs are no longer a patch grid; use "
                             "output_fmt='NLC', or set_token_merging(0)")
        take = take_indices(len(self.blocks), indices)
        last = max(take) if (stop_early and intermediates_only) else None
        inter = self.intermediates(x, last_block=last)
        out = [self.norm(inter["blocks"][i]) if norm else inter["blocks"][i] for i in take]
        n = self.config.num_prefix_tokens
        prefix = [y[:, :n] for y in out]
        out = [y[:, n:] for y in out]
        if output_fmt == "NCHW":
            grid = inter["tokens"].grid
            out = [y.reshape(y.shape[0], *grid, -1).permute(0, 3, 1, 2).contiguous() for y in out]
        result: list[Any] = list(zip(out, prefix)) if return_prefix_tokens else out
        if intermediates_only:
            return result
        return inter["encoded"], result
