"""Attention analysis of paper §4.5 / appendix D.7: mean attention distance and attention rollout.

All functions are pure tensor maths on attention weights of shape (..., T, T) as returned by
`VisionTransformer.intermediates(x, attention=True)["attention"]`: T = prefix + gh * gw tokens, prefix
first (the class token for pooling "token", none for "gap"), then the patches in row-major order.

Conventions (documented once, used everywhere):
- Patch (i, j) of a (gh, gw) grid with `stride` s pixels per token has its centre at pixel
  ((i + 0.5) * s, (j + 0.5) * s) (row, column); token index = prefix + i * gw + j.
- Attention distance is measured patch-to-patch only: prefix tokens have no place in the image,
  so their rows and columns are dropped and each query's attention over the patches is
  renormalised to sum to 1 before averaging distances (a weighted mean needs weights that sum to 1).
- "The output token" is the class token for pooling "token"; for "gap" the output is the mean over
  all tokens, so its attention is the mean of all query rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_EPS = 1e-12


def patch_centers(grid: tuple[int, int], stride: float) -> torch.Tensor:
    """Pixel centres (row, column) of the gh * gw patches in row-major order, shape (gh * gw, 2)."""
    gh, gw = grid
    rows = (torch.arange(gh, dtype=torch.float64) + 0.5) * stride
    cols = (torch.arange(gw, dtype=torch.float64) + 0.5) * stride
    r, c = torch.meshgrid(rows, cols, indexing="ij")
    return torch.stack([r.reshape(-1), c.reshape(-1)], dim=-1)


def patch_distances(grid: tuple[int, int], stride: float) -> torch.Tensor:
    """Euclidean pixel distance between every pair of patch centres, shape (N, N), N = gh * gw."""
    c = patch_centers(grid, stride)
    return torch.cdist(c, c)


def uniform_attention_distance(grid: tuple[int, int], stride: float) -> float:
    """Mean attention distance of a head that attends uniformly to all patches (a reference line):
    the mean distance over all ordered pairs of patch centres, self-pairs included."""
    return float(patch_distances(grid, stride).mean())


def mean_attention_distance(
    attn: torch.Tensor, grid: tuple[int, int], stride: float, num_prefix_tokens: int = 0
) -> torch.Tensor:
    """Mean attention distance (paper §4.5, Fig. 7 right; appendix D.7), in pixels.

    For every query patch q, sum_k a(q, k) * ||centre(q) - centre(k)|| over key patches k (weights
    renormalised over the patches, see the module docstring), then averaged over query patches.
    `attn` is (..., T, T); the result has the leading shape (...), e.g. (B, heads) for one layer.
    Averaging over images is left to the caller.
    """
    gh, gw = grid
    n = gh * gw
    p = num_prefix_tokens
    if attn.shape[-1] != p + n or attn.shape[-2] != p + n:
        raise ValueError(
            f"attention of shape {tuple(attn.shape)} does not match {p} prefix tokens + a {gh}x{gw} patch grid"
        )
    a = attn[..., p:, p:].to(torch.float64)
    a = a / a.sum(dim=-1, keepdim=True).clamp_min(_EPS)
    dist = patch_distances(grid, stride).to(a.device)
    per_query = (a * dist).sum(dim=-1)  # (..., N)
    return per_query.mean(dim=-1).to(attn.dtype)


def output_token_attention(attn: torch.Tensor, pooling: str, num_prefix_tokens: int) -> torch.Tensor:
    """Attention of the output token to the patches, (..., T, T) -> (..., N).

    pooling "token": row 0 (the class token as query); "gap": the mean over all query rows, because
    the GAP output is the mean over tokens. Prefix-token columns are dropped.
    """
    if pooling == "token":
        if num_prefix_tokens < 1:
            raise ValueError("pooling 'token' needs a class token (num_prefix_tokens >= 1)")
        row = attn[..., 0, :]
    elif pooling in ("gap", "map"):  # (MAP's own query is outside the encoder: the mean stands for it)
        row = attn.mean(dim=-2)
    else:
        raise ValueError(f"pooling must be 'token', 'gap' or 'map', got {pooling!r}")
    return row[..., num_prefix_tokens:]


def attention_rollout(attns: Sequence[torch.Tensor], add_residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020), as used for the paper's Fig. 6 (appendix D.7).

    Each layer's attention (B, heads, T, T) is averaged over heads; with `add_residual` the identity
    is added for the residual connection of eq. 2 and rows are renormalised, A' = (A + I) / rowsum;
    the layers are then multiplied from the input up: R = A'_L @ ... @ A'_2 @ A'_1, so R[b, q, k] is how
    much output token q draws from input token k. Returns R, (B, T, T), rows summing to 1.
    """
    if not attns:
        raise ValueError("attention rollout needs the attention of at least one layer")
    rollout: torch.Tensor | None = None
    for a in attns:
        if a.ndim != 4:
            raise ValueError(f"expected per-layer attention of shape (B, heads, T, T), got {tuple(a.shape)}")
        m = a.to(torch.float64).mean(dim=1)
        if add_residual:
            m = m + torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
        m = m / m.sum(dim=-1, keepdim=True).clamp_min(_EPS)
        rollout = m if rollout is None else m @ rollout
    assert rollout is not None
    return rollout.to(attns[0].dtype)
