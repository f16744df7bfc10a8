"""Ablation of today's training ingredients on the bundled digits (BENCHMARKS.md, "AugReg / DeiT ingredients").

The demo's recipe (digits_demo: a 0.7M-parameter ViT at 16 px, affine jitter, label smoothing 0.1), shortened to
--steps, then cumulatively: + RandAugment(2, 10), + random erasing 0.25, + Mixup 0.8 / CutMix 1.0, + hard
distillation from a BiT ResNet teacher through DeiT's distillation token; and distillation alone on the baseline.
Test accuracy, mean +- std over the seeds, and the training throughput of each (img/s of the whole step, input
pipeline included, one process).

    python benchmarks/augreg_ablation.py --steps 600 --seeds 0 1 2 --out runs/ablation
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from vitkit.bench.machine import machine_info
from vitkit.train.config import load_config
from vitkit.train.metrics import read_metrics
from vitkit.train.run import run_experiment

ROWS = [
    ("baseline (digits_demo)", []),
    ("+ RandAugment(2, 10)", ["data.randaugment=[2, 10]"]),
    ("+ random erasing 0.25", ["data.randaugment=[2, 10]", "data.random_erasing=0.25"]),
    ("+ Mixup 0.8 / CutMix 1.0", ["data.randaugment=[2, 10]", "data.random_erasing=0.25", "train.mixup=0.8",
                                  "train.cutmix=1.0"]),
    ("+ hard distillation (BiT teacher, distillation token)", [
        "data.randaugment=[2, 10]", "data.random_erasing=0.25", "train.mixup=0.8", "train.cutmix=1.0",
        "model.distill_token=true", "train.distill=hard", "train.teacher={teacher}"]),
    ("baseline + hard distillation alone (BiT teacher, distillation token)", [
        "model.distill_token=true", "train.distill=hard", "train.teacher={teacher}"]),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/ablation")
    p.add_argument("--json", default="benchmarks/results/augreg_ablation.json")
    p.add_argument("--rows", type=int, nargs="*", default=None, help="run only these rows (0-based; default all)")
    args = p.parse_args()
    out = Path(args.out)
    common = [f"schedule.steps={args.steps}", f"schedule.warmup_steps={args.steps // 10}", "train.eval_every=0",
              "train.ckpt_every=0", "train.tensorboard=false", f"train.log_every={args.steps // 4}"]
    # the teacher: the BiT baseline recipe on the same digits (32 px), trained once
    t0 = time.perf_counter()
    teacher = run_experiment(load_config("digits_bit", ["train.eval_every=0", "train.ckpt_every=0",
                                                        "train.tensorboard=false"]),
                             out / "teacher", progress=False, overwrite=True)
    print(f"teacher (digits_bit): test {100 * teacher['test']['top1']:.2f}% in {time.perf_counter() - t0:.0f} s",
          flush=True)
    rows = []
    for i, (name, sets) in enumerate(ROWS):
        if args.rows is not None and i not in args.rows:
            continue
        accs, speeds = [], []
        for seed in args.seeds:
            over = common + [f"train.seed={seed}"] + [s.format(teacher=teacher["model_dir"]) for s in sets]
            run = out / f"{i}_seed{seed}"
            res = run_experiment(load_config("digits_demo", over), run, progress=False, overwrite=True)
            accs.append(res["test"]["top1"])
            logs = [r["img_per_s"] for r in read_metrics(run / "metrics.jsonl") if "img_per_s" in r][1:]
            speeds.append(float(np.median(logs)))  # the first window includes start-up
        row = {"ingredients": name, "overrides": sets, "test_top1": accs, "mean": float(np.mean(accs)),
               "std": float(np.std(accs)), "img_per_s": float(np.median(speeds))}
        rows.append(row)
        print(f"{name}: {100 * row['mean']:.2f} +- {100 * row['std']:.2f}%  ({row['img_per_s']:.0f} img/s)", flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": machine_info(), "python": platform.python_version(),
           "torch": torch.__version__, "steps": args.steps, "seeds": args.seeds,
           "teacher_test_top1": teacher["test"]["top1"], "rows": rows}
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
