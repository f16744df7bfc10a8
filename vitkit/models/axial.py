"""Axial-ViT (paper appendix D.7): the patch grid stays 2-D, and each Transformer block's
"self-attention + MLP" becomes a row self-attention + MLP followed by a column self-attention + MLP.

"We have modified ViT to process inputs in the 2-dimensional shape, instead of a 1-dimensional sequence of
patches, and incorporate Axial Transformer blocks, in which instead of a self-attention followed by an MLP,
we have a row-self-attention plus an MLP followed by a column-self-attention plus an MLP." Each half is an
ordinary pre-norm encoder block (eq. 2-3) run on every row (then every column) as its own sequence, so a
query attends exactly to the patches of its row (then of its column). There is no class token: the
representation is the average of the patch tokens (GAP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class AxialBlock(nn.Module):
    """A row block then a column block, each built by `make_block()` (an eq. 2-3 encoder block)."""

    def __init__(self, make_block: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.row = make_block()
        self.col = make_block()

    @staticmethod
    def full_map(attn: torch.Tensor, B: int, grid: tuple[int, int], along_rows: bool) -> torch.Tensor:
        """Per-row (or per-column) attention as the (B, heads, N, N) map over all patches (zeros elsewhere)."""
        gh, gw = grid
        h = attn.shape[1]
        full = attn.new_zeros(B, h, gh, gw, gh, gw)
        if along_rows:  # attn: (B*gh, h, gw, gw)
            a = attn.view(B, gh, h, gw, gw).permute(0, 2, 1, 3, 4)  # (B, h, gh, gw_q, gw_k)
            idx = torch.arange(gh)
            full[:, :, idx, :, idx, :] = a.permute(2, 0, 1, 3, 4)
        else:  # attn: (B*gw, h, gh, gh)
            a = attn.view(B, gw, h, gh, gh).permute(0, 2, 1, 3, 4)  # (B, h, gw, gh_q, gh_k)
            idx = torch.arange(gw)
            full[:, :, :, idx, :, idx] = a.permute(2, 0, 1, 3, 4)
        return full.view(B, h, gh * gw, gh * gw)

    def forward(self, x: torch.Tensor, state: Any) -> torch.Tensor:
        """x: (B, N, D) patch tokens in raster order; the row step, then the column step, each an encoder block
        called with `state` (an `EncodeState`: its grid, and the list that records attention, row maps then column
        maps)."""
        B, N, D = x.shape
        gh, gw = state.grid
        rows = self.row(x.reshape(B * gh, gw, D), state)  # every row is a sequence of gw patches
        cols = rows.reshape(B, gh, gw, D).transpose(1, 2).reshape(B * gw, gh, D)  # every column: gh patches
        cols = self.col(cols, state)
        return cols.reshape(B, gw, gh, D).transpose(1, 2).reshape(B, N, D)
