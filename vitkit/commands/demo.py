"""Train a small ViT from scratch on the bundled digits (no download), then report test accuracy.

The demo is the shipped recipe `digits_demo` run by the same runner as `vitkit train --config
recipes/digits_demo.toml`: the same code, the same result for the same seed. The run folder (default
runs/demo) gets the model (model/), metrics.jsonl and curves.png; an existing one is refused unless
--overwrite. The last line printed is `test accuracy: NN.NN%`.
"""

from __future__ import annotations

import argparse
import sys

from vitkit.utils.options import TRAIN_PRECISIONS, precision_help

HELP = "train a ViT on the bundled digits data set and report test accuracy"
RECIPE = "digits_demo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="run folder (default: runs/demo)")
    p.add_argument("--overwrite", action="store_true", help="replace a previous demo run in --out")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights, data order and augmentation")
    p.add_argument("--precision", default=None, choices=TRAIN_PRECISIONS,
                   help=precision_help(TRAIN_PRECISIONS, "the recipe's, fp32"))
    p.add_argument("--bf16", action="store_true", help="deprecated: --precision bf16-autocast")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def demo_values(steps: int | None, seed: int, precision: str | None = None) -> dict[str, object]:
    """The recipe keys that the demo's flags stand for."""
    out: dict[str, object] = {"train.seed": seed}
    if precision is not None:
        out["train.precision"] = precision
    if steps is not None:
        out.update({"schedule.steps": steps, "schedule.warmup_steps": min(100, max(1, steps // 10))})
    return out


def run(args: argparse.Namespace) -> int:
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment
    from vitkit.utils.hardware import set_threads

    set_threads(args.threads)
    precision = args.precision
    if args.bf16:
        if precision not in (None, "bf16-autocast"):
            raise ValueError(f"--bf16 disagrees with --precision {precision}; --bf16 is deprecated: keep --precision")
        print("note: --bf16 is deprecated: write --precision bf16-autocast", file=sys.stderr)
        precision = "bf16-autocast"
    cfg = load_config(RECIPE, values=demo_values(args.steps, args.seed, precision))
    print(f"vitkit demo: recipe {RECIPE} (the same run as `vitkit train --config recipes/{RECIPE}.toml`)")
    try:
        res = run_experiment(cfg, args.out, progress=not args.no_progress, overwrite=args.overwrite, header=True)
    except FileExistsError as e:  # the runner's advice names --resume, which the demo does not take
        if "already holds a run" not in str(e):
            raise
        raise FileExistsError(f"{args.out} already holds a run; replace it with `vitkit demo --overwrite`, or "
                              "choose another --out") from e
    print(f"trained {res['steps']} steps in {res['train_s']:.1f}s; model: {res['model_dir']}, curves: {res['curves']}")
    print(f"test accuracy: {100 * res['test']['top1']:.2f}%")
    return 0
