"""Arguments shared by `train`, `finetune` and `sweep` (a config, overrides, output, resume)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vitkit.train.config import RunConfig


def add_run_arguments(p: argparse.ArgumentParser, default_config: str | None, kind: str) -> None:
    p.add_argument("--config", default=default_config, required=default_config is None,
                   help="a TOML file or the name of a shipped recipe (vitkit/recipes/*.toml)"
                   + (f" (default: {default_config})" if default_config else ""))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value, e.g. --set optim.lr=0.003 (repeatable)")
    p.add_argument("--out", default=None,
                   help=f"run folder, new or empty (default: runs/<recipe>-<date>-<time>, or runs/{kind}-<date>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out (its run files only)")
    p.add_argument("--from-scratch", action="store_true",
                   help="allow a fine-tuning recipe to start from a random init (it refuses without model.pretrained)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def native_values(args: argparse.Namespace) -> dict[str, object]:
    """The recipe values --native --max-patches N stand for (an explicit --set still wins)."""
    from vitkit.utils import check_int
    from vitkit.utils.options import native_asked

    if not native_asked(args):
        return {}
    if args.max_patches is None:
        raise ValueError("--native needs --max-patches N: the most patches an image may have")
    return {"data.max_patches": check_int("--max-patches", args.max_patches), "data.augment": "none"}


def prepare(args: argparse.Namespace, values: dict[str, Any] | None = None) -> RunConfig:
    """The RunConfig of --config, the command's typed `values` ({"section.key": value}) and --set (last wins)."""
    import os

    from vitkit.train.config import load_config
    from vitkit.train.run import default_run_dir
    from vitkit.utils.hardware import set_threads

    set_threads(args.threads)
    values = dict(values or {})
    if args.from_scratch:
        values["model.require_pretrained"] = False
    cfg = load_config(args.config, args.overrides, values=values)  # an explicit --set wins over the command's values
    if args.out is None:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("under torchrun give --out: every process must name the same run folder")
        args.out = str(default_run_dir(args.config, args.command))
    return cfg


def report(res: dict[str, Any]) -> int:
    """Print a finished run's scores; the exit code: 1 when unreadable images were skipped in training or in its
    final evaluation (the run finished without them, named in metrics.jsonl), else 0."""
    for split in ("dev", "test"):
        if split in res:
            r = res[split]
            top5 = f", top-5 {100 * r['top5']:.2f}%" if "top5" in r else ""
            what = f", colour of {int(r['patches'])} masked patches" if "patches" in r else ""
            print(f"{split} ({int(r['n'])} images{what}): top-1 {100 * r['top1']:.2f}%{top5}")
    from vitkit.train.run import skipped_images

    skipped = skipped_images(res)
    if skipped:
        print(f"skipped {skipped} unreadable images (named in metrics.jsonl)")
    if "model_dir" in res:
        print(f"trained {res['steps']} steps in {res['train_s']:.1f}s; model: {res['model_dir']}, curves: {res['curves']}")
    return 1 if skipped else 0
