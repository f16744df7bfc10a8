"""What LoRA costs in accuracy: full fine-tuning vs LoRA (Hu et al. 2022) on a small transfer task, with seeds
(BENCHMARKS.md "Fine-tuning on a laptop").

A small ViT is pre-trained on the procedural glyphs (vitkit.data.glyphs: 16 px, grey) and fine-tuned on the digits
at 24 px (a new zero head, E_pos resampled in 2D, §3.2) with the paper's fine-tuning recipe (digits_finetune: SGD
0.9, cosine, clipping 1). Each method's learning rate is picked on the dev split (seed 0, grid `--lrs`), never on
test; that run and `--seeds` - 1 more at that rate give the test top-1 as mean ± 95% t-interval. Every run goes through
`run_experiment` (the `vitkit finetune` path), one stage per invocation, each under `flock /tmp/vitkit_bench.lock`:

    flock /tmp/vitkit_bench.lock python benchmarks/lora_transfer.py pretrain
    flock /tmp/vitkit_bench.lock python benchmarks/lora_transfer.py finetune --methods full lora8 lora16
    python benchmarks/lora_transfer.py report
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
from scipy import stats

from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

QUIET = {"train.tensorboard": False, "train.eval_every": 0, "train.ckpt_every": 0, "data.num_workers": 0}
ARCH = {"model.name": "vit", "model.img_size": 16, "model.patch_size": 4, "model.in_chans": 1, "model.width": 96,
        "model.depth": 4, "model.num_heads": 4, "model.mlp_dim": 192}
# method -> [lora] keys; LoRA adapts every projection (q, k, v, proj, fc1, fc2) with alpha = 2 r
ALL = ["q", "k", "v", "proj", "fc1", "fc2"]
METHODS = {"full": {}, "lora8": {"lora.rank": 8, "lora.alpha": 16.0, "lora.targets": ALL},
           "lora16": {"lora.rank": 16, "lora.alpha": 32.0, "lora.targets": ALL}}


def pretrain(root: Path, steps: int) -> dict:
    cfg = load_config("digits_pretrain", values={
        **ARCH, **QUIET, "data.name": "glyphs", "data.glyph_images": 30000, "data.glyph_classes": 300,
        "data.glyph_size": 16, "data.dev_fraction": 0.0, "schedule.steps": steps,
        "schedule.warmup_steps": steps // 10, "optim.lr": 2e-3})
    res = run_experiment(cfg, root / "pretrain", progress=True, overwrite=True)
    print(f"pre-trained: glyphs test top-1 {100 * res['test']['top1']:.2f}% in {res['train_s']:.0f}s")
    return res


def finetune(root: Path, method: str, lr: float, seed: int, steps: int) -> dict:
    cfg = load_config("digits_finetune", values={
        **QUIET, **METHODS[method], "model.pretrained": str(root / "pretrain" / "model"), "model.img_size": 24,
        "optim.lr": lr, "train.seed": seed, "schedule.steps": steps, "schedule.warmup_steps": steps // 10,
        "train.precision": "fp32"})
    out = root / f"{method}_lr{lr:g}_s{seed}"
    return run_experiment(cfg, out, progress=False, overwrite=True, save=False)


def t_interval(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval."""
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, math.nan
    return m, stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("pretrain", "finetune", "report"))
    ap.add_argument("--root", default="/tmp/vitkit_lora_transfer", help="run folders")
    ap.add_argument("--out", default="benchmarks/results/lora_transfer.json")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--lrs", nargs="+", type=float, default=[0.03, 0.1])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--pretrain-steps", type=int, default=600)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    root, out = Path(a.root), Path(a.out)
    saved = json.loads(out.read_text()) if out.is_file() else {"methods": {}}
    if a.stage == "pretrain":
        res = pretrain(root, a.pretrain_steps)
        saved["pretrain"] = {"glyphs_test_top1": res["test"]["top1"], "steps": res["steps"], "train_s": res["train_s"]}
    elif a.stage == "finetune":
        for method in a.methods:
            t0 = time.perf_counter()
            grid = {lr: finetune(root, method, lr, 0, a.steps) for lr in a.lrs}  # seed 0 at every lr
            dev = {lr: r["dev"]["top1"] for lr, r in grid.items()}
            best = max(dev, key=lambda lr: (dev[lr], -lr))  # chosen on dev; its test figure is seed 0's
            tests = [grid[best]["test"]["top1"]] + [finetune(root, method, best, s, a.steps)["test"]["top1"]
                                                    for s in range(1, a.seeds)]
            saved["methods"][method] = {"keys": METHODS[method], "dev_top1_by_lr": dev, "lr": best,
                                        "test_top1_by_seed": tests, "minutes": (time.perf_counter() - t0) / 60}
            print(method, json.dumps(saved["methods"][method]), flush=True)
    saved["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    saved["setup"] = {"arch": ARCH, "pretrain": "glyphs 16 px, 30k images, 300 classes", "finetune":
                      f"digits 24 px, {a.steps} steps of digits_finetune, lr picked on dev (seed 0) from the grid in each method's dev_top1_by_lr"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(saved, indent=2) + "\n")
    full = saved["methods"].get("full")
    print("\n| method | lr (dev) | test top-1 (mean ± 95% t, n seeds) | - full (points) |\n|---|---|---|---|")
    for method, r in saved["methods"].items():
        m, h = t_interval(r["test_top1_by_seed"])
        diff = ""
        if full and method != "full":
            d = [x - y for x, y in zip(r["test_top1_by_seed"], full["test_top1_by_seed"])]  # paired by seed
            dm, dh = t_interval(d)
            diff = f"{100 * dm:+.2f} ± {100 * dh:.2f}"
        print(f"| {method} | {r['lr']:g} | {100 * m:.2f} ± {100 * h:.2f} (n={len(r['test_top1_by_seed'])}) | {diff} |")


if __name__ == "__main__":
    main()
