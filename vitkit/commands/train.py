"""Pre-train or fine-tune from a run config (TOML recipe + --set overrides); resumable exactly.

Examples: `vitkit train --config recipes/digits_pretrain.toml`, `vitkit train --config
pretrain_i1k_b16 --set data.path=/data/imagenet --set train.grad_accum=16`, `vitkit train --config
pretrain_jft_b16 --dry-run 2` (a few steps on synthetic data). Under `torchrun` each process trains
its shard of the global batch (DDP, gloo on CPU, NCCL on GPU); `--set train.parallel=fsdp` shards
weights, gradients and optimizer state instead (ViT-L/H), `--set model.grad_checkpointing=true`
recomputes block activations in the backward pass, `--set train.compile=true` uses torch.compile.
`--native --max-patches N` trains at native resolution (NaViT): each image at its own aspect ratio, at most N patches,
no crop, images packed into rows (`data.max_patches`; `data.min_patches`, `data.token_drop`, `data.pack_budget`).
"""

from __future__ import annotations

import argparse

from vitkit.commands._run_args import add_run_arguments, native_values, prepare, report
from vitkit.utils.options import add_native_arguments

HELP = "train (pre-train or fine-tune) from a TOML recipe, with exact --resume"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p, None, "train")
    p.add_argument("--resume", action="store_true", help="continue from OUT/train_state.pt (bitwise exact)")
    p.add_argument("--force", action="store_true", help="with --resume: accept a recipe that differs from the saved one")
    p.add_argument("--dry-run", type=int, default=0, metavar="STEPS",
                   help="run STEPS steps of batch 8 on synthetic data (checks a recipe without its data; "
                   "saves no checkpoint or model unless --save)")
    p.add_argument("--save", action="store_true", help="with --dry-run: also save the checkpoint and the model")
    add_native_arguments(p, training=True)


def run(args: argparse.Namespace) -> int:
    from vitkit import distributed as dist
    from vitkit.train.run import run_experiment

    cfg = prepare(args, native_values(args))
    code = 0
    try:
        res = run_experiment(cfg, args.out, resume=args.resume, dry_run=args.dry_run, progress=not args.no_progress,
                             force=args.force, overwrite=args.overwrite, save=True if args.save else None,
                             header=True)
        if dist.rank() == 0:
            code = report(res)
    finally:
        dist.shutdown()
    return code
