"""Learning-rate sweep: one run per lr of the recipe's [sweep] lrs (or --lrs), picked on the dev split.

The test split is never looked at while choosing; `--test` evaluates only the chosen run on it.
"""

from __future__ import annotations

import argparse

from vitkit.commands._run_args import add_run_arguments, prepare

HELP = "sweep the learning rate and pick on the hold-out dev split (never on test)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p, None, "sweep")
    p.add_argument("--lrs", default=None, help="comma-separated learning rates (default: the recipe's sweep.lrs)")
    p.add_argument("--test", action="store_true", help="after choosing, report the chosen run's test accuracy")


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 done, 1 done with unreadable images skipped (named, in each run's metrics.jsonl and here)."""
    import sys

    from vitkit.train.run import run_sweep, test_accuracy

    cfg = prepare(args)
    lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else None
    res = run_sweep(cfg, args.out, lrs, progress=not args.no_progress, overwrite=args.overwrite)
    print(f"{'lr':>10}  dev top-1")
    for r in res["runs"]:
        mark = "  <- chosen" if r["lr"] == res["best_lr"] else ""
        print(f"{r['lr']:>10g}  {100 * r['dev_top1']:8.2f}%{mark}")
    print(f"chosen on dev: lr {res['best_lr']:g} ({res['best_out']}); summary in {args.out}/sweep.json")
    for r in res["runs"]:
        if r["skipped_images"]:
            print(f"skipped {r['skipped_images']} unreadable images in the lr {r['lr']:g} run (named in "
                  f"{r['out']}/metrics.jsonl)", file=sys.stderr)
    skipped: list[str] = []
    if args.test:
        r = test_accuracy(res["best_out"], cfg, skipped)
        for msg in skipped:
            print(f"skipped: {msg}", file=sys.stderr)
        print(f"test top-1 of the chosen run: {100 * r['top1']:.2f}%")
    return 1 if res["skipped_images"] or skipped else 0
