"""`--merge R`: token merging (ToMe, Bolya et al. 2023; vitkit/models/tome.py) for the commands that run a model for
inference (predict, eval, fewshot, export, embed): R tokens merged in every block, or one value per block."""

from __future__ import annotations

import argparse
import sys

from torch import nn

from vitkit.models.tome import merge_schedule
from vitkit.utils.options import MERGE_HELP, MERGE_METAVAR, merge_arg


def add_merge_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--merge", type=merge_arg, default=0, metavar=MERGE_METAVAR, help=MERGE_HELP)


def apply_merge(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """`model` with `--merge` set (a ViT; refused with the reason for another model or a ViT that cannot merge)."""
    r = getattr(args, "merge", 0)
    if r == 0:
        return model
    if not hasattr(model, "set_token_merging"):
        raise ValueError(f"--merge: token merging applies to ViTs, not a {type(model).__name__}")
    model.set_token_merging(r)  # checks r against the model first (refusals name the reason)
    cfg = model.config
    rs = merge_schedule(r, cfg.depth, cfg.num_prefix_tokens + cfg.num_patches, cfg.num_prefix_tokens)
    given = [r] * cfg.depth if isinstance(r, int) else list(r)
    if list(rs) != given:  # each block merges at most half of the patch tokens it gets (ToMe): the real schedule
        model.set_token_merging(list(rs))  # is what the model runs, logs and an export records
        print(f"token merging: {r} per block is more than the {cfg.num_patches} patches allow; merging "
              f"{list(rs)} tokens in blocks 1-{cfg.depth}", file=sys.stderr)
    else:
        print(f"token merging: {r} tokens per block", file=sys.stderr)
    return model
