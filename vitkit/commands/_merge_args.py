"""`--merge R`: token merging (ToMe, Bolya et al. 2023; vitkit/models/tome.py) for the commands that run a model for
inference (predict, eval, fewshot, export, embed): R tokens merged in every block, or one value per block."""

from __future__ import annotations

import argparse
import sys

from torch import nn


def merge_value(text: str) -> int | list[int]:
    """`R` (every block) or `R1,R2,...` (one per block), each a count >= 0."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected R or R1,R2,... (tokens merged per block, >= 0), got {text!r}")
    return values[0] if len(values) == 1 else values


def add_merge_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--merge", type=merge_value, default=0, metavar="R|R1,R2,...",
                   help="token merging (ToMe): merge R patch tokens in every block (or R_i in block i), by bipartite "
                   "matching of the attention keys, with proportional attention; fewer tokens, faster, at a small "
                   "accuracy cost (README 'Token merging and int8'); 0: off (default)")


def apply_merge(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """`model` with `--merge` set (a ViT; refused with the reason for another model or a ViT that cannot merge)."""
    r = getattr(args, "merge", 0)
    if r == 0:
        return model
    if not hasattr(model, "set_token_merging"):
        raise ValueError(f"--merge: token merging applies to ViTs, not a {type(model).__name__}")
    model.set_token_merging(r)
    print(f"token merging: {r} tokens per block", file=sys.stderr)
    return model
