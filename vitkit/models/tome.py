"""Token merging (ToMe: Bolya et al., "Token Merging: Your ViT but Faster", ICLR 2023), an inference option of
every vitkit ViT: in each block, between the attention and the MLP, `r` tokens are merged into others.

- §3 "Bipartite soft matching": the tokens are split alternately into two sets A and B; each token of A is
  matched to its most similar token of B by the cosine similarity of the attention keys (averaged over heads);
  the `r` most similar pairs are merged; the other tokens of A, and all of B, are kept.
- §3 "Tracking token size": a merged token is the size-weighted average of its members, and its size (how many
  patches it stands for) is the sum of theirs.
- §3 "Proportional attention": softmax(q k^T / sqrt(d) + log s) — a key of size s counts s times. The bias is
  made here (`size_bias`) and added inside the model's one attention.

The prefix tokens (class token, DeiT's distillation token, registers) are never merged: the matching sees only
the patch tokens, and the prefix keeps its place at the front, so pooling reads it as before. `r` is a Python
int per layer, so a traced or compiled graph has static shapes in every layer (ONNX, OpenVINO, torch.compile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def merge_schedule(r: int | Sequence[int], depth: int, tokens: int, prefix: int) -> tuple[int, ...]:
    """The tokens merged in each of `depth` layers for `r` (one value for every layer, or one per layer) on a
    sequence of `tokens` tokens of which `prefix` are protected: each layer merges at most half of the patch tokens
    it receives (the size of set A), so a large `r` is clipped layer by layer (the paper's constant schedule)."""
    rs = [int(r)] * depth if isinstance(r, int) else [int(v) for v in r]
    if len(rs) != depth:
        raise ValueError(f"a merge schedule gives one r per layer: {depth} layers, got {len(rs)} values")
    if any(v < 0 for v in rs):
        raise ValueError(f"tokens merged per layer must be >= 0, got {list(rs)}")
    out = []
    n = tokens - prefix
    for v in rs:
        v = min(v, n // 2)
        out.append(v)
        n -= v
    return tuple(out)


def check_merging(cfg: Any, r: int | Sequence[int]) -> int | tuple[int, ...]:
    """`r` (one value for every layer or one per layer) as a ViT with config `cfg` keeps it, or a ValueError: a
    negative r or a schedule of the wrong length; any merging where positions must stay a full grid after the first
    block (Axial-ViT, relative or per-layer position embeddings)."""
    merge_schedule(r, cfg.depth, cfg.num_prefix_tokens + cfg.num_patches, cfg.num_prefix_tokens)  # checks r
    if any(v > 0 for v in ([r] if isinstance(r, int) else r)):
        if cfg.block == "axial":
            raise ValueError("token merging needs the global block: Axial-ViT's row / column attention needs the "
                             "full patch grid in every block")
        if cfg.posemb == "relative" or cfg.posemb_placement != "input":
            raise ValueError(f"token merging needs position embeddings added once at the input; this model has "
                             f"posemb={cfg.posemb!r}, posemb_placement={cfg.posemb_placement!r}, which need the "
                             "full patch grid in every block")
    return r if isinstance(r, int) else tuple(int(v) for v in r)


def size_bias(size: torch.Tensor | None) -> torch.Tensor | None:
    """Proportional attention's log-size bias (B, 1, 1, T) over the keys, for sizes (B, T, 1); None for none."""
    return None if size is None else size.log()[:, None, None, :, 0]


def bipartite_soft_matching(metric: torch.Tensor, r: int, prefix: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   torch.Tensor]:
    """(unmerged A indices (B, Na - r), merged A indices (B, r), their B partners (B, r)), indices within the sets
    A = patch tokens 0, 2, 4, ... and B = patch tokens 1, 3, 5, ... (after `prefix`), for `metric` (B, T, C), the
    keys averaged over heads. A's tokens are ranked by their best cosine similarity to B; the top `r` merge."""
    metric = metric / metric.norm(dim=-1, keepdim=True)
    a, b = metric[:, prefix::2], metric[:, prefix + 1::2]
    scores = a @ b.transpose(-1, -2)
    best, partner = scores.max(dim=-1)  # (B, Na)
    order = best.argsort(dim=-1, descending=True)
    src = order[:, :r]
    return order[:, r:], src, partner.gather(1, src)


def merge_tokens(x: torch.Tensor, metric: torch.Tensor, size: torch.Tensor | None, r: int,
                 prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge `r` of the patch tokens of `x` (B, T, D) by bipartite soft matching on `metric` (B, T, C), each result
    the size-weighted mean of its members; returns (x, size) with T - r tokens, ordered [prefix, unmerged A, B].
    `size` (B, T, 1) is each token's patch count (None: all ones, before the first merge)."""
    if size is None:
        size = x.new_ones(x.shape[0], x.shape[1], 1)
    unm, src, dst = bipartite_soft_matching(metric, r, prefix)
    xs = torch.cat([x * size, size], dim=-1)  # weights and their sum, merged by one gather / scatter
    head, a, b = xs[:, :prefix], xs[:, prefix::2], xs[:, prefix + 1::2]
    C = xs.shape[-1]
    kept = a.gather(1, unm[..., None].expand(-1, -1, C))
    moved = a.gather(1, src[..., None].expand(-1, -1, C))
    b = b.scatter_add(1, dst[..., None].expand(-1, -1, C), moved)
    out = torch.cat([head, kept, b], dim=1)
    size = out[..., -1:]
    return out[..., :-1] / size, size


def weighted_mean(x: torch.Tensor, size: torch.Tensor | None) -> torch.Tensor:
    """The mean over tokens (dim 1) of `x`, each token counted `size` times (GAP over merged tokens)."""
    if size is None:
        return x.mean(dim=1)
    return (x * size).sum(dim=1) / size.sum(dim=1)
