"""Position-embedding resampling for fine-tuning at another resolution (paper §3.2).

"We perform 2D interpolation of the pre-trained position embeddings, according to their
location in the original image." The prefix (class) token's embedding is left untouched.
This is the one implementation used by the model, the checkpoint loaders and fine-tuning. Also here:
the appendix's relative position embeddings (D.4), which live in the attention instead of the input.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def square_side(n: int) -> int | None:
    """g when n = g * g patch positions (a square grid), else None: files store no image size."""
    g = math.isqrt(n)
    return g if g * g == n else None


def resample_posemb(
    posemb: torch.Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
    antialias: bool = False,
    offset: float = 0.0,
) -> torch.Tensor:
    """Resample a (1, prefix + gh*gw, D) position embedding to a (new_gh, new_gw) grid.

    `old_grid` defaults to a square grid; non-square grids in either direction are supported.
    `mode` is any 2-D mode of `torch.nn.functional.interpolate` ("bicubic", "bilinear", "nearest"); `antialias`
    its antialiased form (bicubic / bilinear only; for bicubic also another kernel, a = -0.5, when enlarging);
    `offset` > 0 resamples with the scale factors (new + offset) / old instead of the sizes, as DINO's and DINOv2's
    code does ("interpolate_offset", 0.1): the same grid, sampled at slightly other positions.
    """
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"expected a position embedding of shape (1, tokens, D), got {tuple(posemb.shape)}")
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    n = grid.shape[1]
    if old_grid is None:
        side = square_side(n)
        if side is None:
            raise ValueError(
                f"cannot infer the grid of a position embedding with {n} patch tokens; pass old_grid=(gh, gw)"
            )
        old_grid = (side, side)
    gh, gw = old_grid
    if gh * gw != n:
        raise ValueError(f"old_grid {old_grid} holds {gh * gw} positions but the embedding has {n} patch tokens")
    new_grid = (int(new_grid[0]), int(new_grid[1]))
    if new_grid == (gh, gw):
        return posemb
    D = grid.shape[-1]
    img = grid.reshape(1, gh, gw, D).permute(0, 3, 1, 2).float()
    if antialias and mode not in ("bicubic", "bilinear"):
        raise ValueError(f"an antialiased resampling is bicubic or bilinear, not {mode!r}")
    kwargs = {} if mode == "nearest" else {"align_corners": False, "antialias": antialias}
    if offset:
        scale = ((new_grid[0] + offset) / gh, (new_grid[1] + offset) / gw)
        img = F.interpolate(img, scale_factor=scale, mode=mode, **kwargs)
        if tuple(img.shape[-2:]) != new_grid:
            raise ValueError(f"resampling with offset {offset} gave a {tuple(img.shape[-2:])} grid, not {new_grid}")
    else:
        img = F.interpolate(img, size=new_grid, mode=mode, **kwargs)
    grid = img.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D).to(posemb.dtype)
    return torch.cat([prefix, grid], dim=1)


def resample_axis(table: torch.Tensor, n: int, mode: str = "bicubic") -> torch.Tensor:
    """Resample one axis table (1, n_old, C) of the learned 2D position embedding (appendix D.4) to n
    entries: the same interpolation as `resample_posemb`, on an (n_old x 1) grid."""
    return resample_posemb(table, (n, 1), (table.shape[1], 1), num_prefix_tokens=0, mode=mode)


def init_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """`nn.init.normal_(tensor, std=std)` (the original code's N(0, std^2) position embeddings, tokens and biases);
    a tensor on the meta device (an architecture built only for its shapes, e.g. by a writer's key check) is left
    as it is: it holds no values and torch draws none for it, but torch's meta normal_ imports torch._dynamo
    (~1.3 CPU s in a process that has not imported it, such as `vitkit convert`)."""
    if tensor.is_meta:
        return tensor
    return nn.init.normal_(tensor, std=std)


class RelativePositionBias(nn.Module):
    """Appendix D.4's relative position embeddings: 1-D relative attention over the token sequence.

    Every offset p_q - p_k between two of the T tokens (raster order, prefix tokens first) has a learned
    embedding r of the head size. An extra attention takes the content query q with these embeddings as
    keys; its logits q . r_{p_q - p_k} / sqrt(d) are added as a bias to the content logits before the
    softmax. One table per attention layer, shared by its heads.
    """

    def __init__(self, num_tokens: int, head_dim: int) -> None:
        super().__init__()
        self.num_tokens = num_tokens
        self.table = nn.Parameter(torch.zeros(2 * num_tokens - 1, head_dim))  # offsets -(T-1) .. T-1
        init_normal_(self.table, std=0.02)

    def table_for(self, num_tokens: int) -> torch.Tensor:
        """The table for a sequence of `num_tokens` (resampled along the offset axis when T differs)."""
        if num_tokens == self.num_tokens:
            return self.table
        return resample_axis(self.table[None], 2 * num_tokens - 1, "bilinear")[0]

    def resize(self, num_tokens: int) -> None:
        """Move the table to another sequence length for good (a new resolution, §3.2)."""
        self.table = nn.Parameter(self.table_for(num_tokens).detach().clone())
        self.num_tokens = num_tokens

    def forward(self, q: torch.Tensor, scale: float) -> torch.Tensor:
        """The additive logits (B, heads, T, T) for queries q (B, heads, T, d)."""
        T = q.shape[-2]
        table = self.table_for(T).to(q.dtype)
        pos = torch.arange(T, device=q.device)
        offsets = pos[:, None] - pos[None, :] + T - 1  # (T, T) indices of p_q - p_k
        logits = (q * scale) @ table.T  # (B, heads, T, 2T - 1): every query against every offset
        return logits.gather(-1, offsets.expand(*q.shape[:-2], T, T))


def sincos_2d(grid: tuple[int, int], width: int, temperature: float = 10_000.0, big_vision: bool = False
              ) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embeddings (1, gh * gw, width), row-major ("Better plain ViT baselines",
    Beyer et al. 2022). vitkit's own ("sincos2d"): a quarter of the channels each for sin(y w), cos(y w), sin(x w),
    cos(x w) with w = temperature^(-k / (width / 4)). `big_vision` ("sincos2d_big_vision", its posemb_sincos_2d):
    sin(x w), cos(x w), sin(y w), cos(y w) with w = temperature^(-k / (width / 4 - 1))."""
    if width % 4 or (big_vision and width < 8):
        raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4{' (>= 8)' if big_vision else ''}"
                         f", got {width}")
    gh, gw = grid
    y, x = torch.meshgrid(torch.arange(gh, dtype=torch.float64), torch.arange(gw, dtype=torch.float64), indexing="ij")
    quarter = width // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / (quarter - 1 if big_vision else quarter))
    ty, tx = y.reshape(-1, 1) * omega, x.reshape(-1, 1) * omega
    parts = [tx.sin(), tx.cos(), ty.sin(), ty.cos()] if big_vision else [ty.sin(), ty.cos(), tx.sin(), tx.cos()]
    return torch.cat(parts, dim=1)[None].float()
