"""vitkit's CPU training step against timm's own (issue 53 item 3), interleaved in one process.

    /work/timm-env/bin/python benchmarks/train_vs_timm.py [--model s] [--batch 8] [--repeats 5] [--warmup 2]
                                                          [--precisions fp32,bf16-autocast] [--out FILE.json]

timm is not a dependency of vitkit: this script runs in a side environment that has both (timm, and vitkit
installed from this checkout with --no-deps). Each row is one training step of the same architecture
(ViT-<model>/16, 224 px, 1,000 classes, exact GELU, random weights), the same batch of random images, AdamW
(lr constant, weight decay 0.05 on the matrices), no gradient clipping:

- vitkit eager / compiled: `vitkit.train.engine.Trainer.train_step`, the step `vitkit train` runs (lr schedule,
  per-step seed, forward, loss, backward, AdamW, the step's figures read back once), with `train.compile` off /
  `inductor` (the compiled forward and, on the CPU, torch's fused AdamW update);
- timm eager / compiled: timm's own `train.py` step (`create_optimizer_v2(model, "adamw")`, autocast,
  `CrossEntropyLoss`, zero_grad, backward, step), its model from `timm.create_model`, compiled as `--torchcompile`
  does (`torch.compile(model)`; timm's optimizer stays torch's default for-each AdamW).

bf16 here is autocast on a CPU without bf16 units when the ISA list has no avx512_bf16 / amx_bf16 (oneDNN then
emulates it in fp32 arithmetic): said in the output. Timed round-robin (`time_interleaved`, medians), the load
average recorded before and after; the ratios are the figures. Also the AdamW update alone (for-each vs fused, the
same weights and gradients) and the fp32 / bf16 matmul roofs (`matmul_peak`) for each row's % of its roof.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from vitkit.bench.machine import DTYPES, machine_info, matmul_peak
from vitkit.bench.timing import time_interleaved, unreliable
from vitkit.data.base import synthetic
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import TrainTransform
from vitkit.models.flops import vit_flops
from vitkit.models.registry import vit_config
from vitkit.models.vit import VisionTransformer
from vitkit.train.config import TrainConfig
from vitkit.train.engine import Trainer
from vitkit.utils.precision import autocast

TIMM_NAMES = {"ti": "vit_tiny_patch16_224", "s": "vit_small_patch16_224", "b": "vit_base_patch16_224"}


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def vitkit_step(variant: str, precision: str, compile_: str, x: torch.Tensor, y: torch.Tensor, out: Path):
    """A Trainer on `variant`'s ViT-/16 whose `train_step` is timed on (x, y); returns (step fn, model, trainer)."""
    torch.manual_seed(0)
    model = VisionTransformer(vit_config(variant, 16, img_size=x.shape[-1], num_classes=1000, gelu="exact"))
    cfg = TrainConfig(steps=10**6, batch_size=len(y), lr=1e-4, warmup_steps=0, schedule="constant", weight_decay=0.05,
                      clip_norm=None, precision=precision, compile=compile_, tensorboard=False, log_every=10**6)
    data = synthetic(1000, (8, 8), n=len(y))  # the loader is never iterated: train_step takes (x, y)
    trainer = Trainer(model, cfg, StepLoader(data, len(y), TrainTransform(model.preprocess, "none")), out,
                      progress=False, save_checkpoints=False)
    model.train()
    state = {"step": 0}

    def step() -> float:
        loss, _, _ = trainer.train_step(state["step"], x, y)
        state["step"] += 1
        return loss

    return step, model, trainer


def timm_step(variant: str, precision: str, compile_: bool, x: torch.Tensor, y: torch.Tensor):
    """timm's train.py step on timm's own model (its optimizer factory, autocast, CrossEntropyLoss)."""
    import timm
    from timm.optim import create_optimizer_v2

    torch.manual_seed(0)
    model = timm.create_model(TIMM_NAMES[variant], num_classes=1000, img_size=x.shape[-1])
    model.train()
    opt = create_optimizer_v2(model, "adamw", lr=1e-4, weight_decay=0.05)
    fwd = torch.compile(model) if compile_ else model
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> torch.Tensor:
        with autocast(precision, "cpu"):
            output = fwd(x)
            loss = loss_fn(output, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step, model


def adamw_update(model: torch.nn.Module) -> dict[str, object]:
    """The AdamW update alone on `model`'s parameters: for-each vs fused, the same gradients, 3 steps each; the
    worst weight difference after them."""
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) * 1e-3 for p in params]
    copies, opts = {}, {}
    for kind in ("foreach", "fused"):
        copies[kind] = [p.detach().clone().requires_grad_(True) for p in params]
        for c, gr in zip(copies[kind], grads):
            c.grad = gr.clone()
        opts[kind] = torch.optim.AdamW(copies[kind], lr=1e-4, weight_decay=0.05, fused=kind == "fused" or None)
    t = time_interleaved({k: o.step for k, o in opts.items()}, warmup=1, repeats=5)
    diff = max((a - b).abs().max().item() for a, b in zip(copies["foreach"], copies["fused"]))
    return {"ms": {k: 1e3 * v.median for k, v in t.items()}, "fused_speedup": t["foreach"].median / t["fused"].median,
            "max_abs_weight_diff_after_6_steps": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="s", choices=sorted(TIMM_NAMES))
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps each (the first compiles)")
    ap.add_argument("--precisions", default="fp32,bf16-autocast")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: on a CPU shared past its cores, every "
                    "parallel region of a 2-thread pool waits for a descheduled thread, and many-op steps such as the "
                    "for-each AdamW pay it hundreds of times)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import timm

    torch.set_num_threads(args.threads)

    info = machine_info()
    emulated = not ({"avx512_bf16", "amx_bf16"} & set(info["cpu_isa"].split()))
    print(f"{info}\ntimm {timm.__version__}; bf16 {'EMULATED (no bf16 units)' if emulated else 'native'}")
    load_before = load()
    print(f"load before: {load_before}", flush=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.img_size, args.img_size, generator=g)
    y = torch.randint(0, 1000, (args.batch,), generator=g)
    fns, models = {}, {}
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"train_vs_timm_{os.getpid()}"
    compiles = [False] if args.no_compile else [False, True]
    for prec in args.precisions.split(","):
        for comp in compiles:
            tag = f"{prec} {'compiled' if comp else 'eager'}"
            fns[f"vitkit {tag}"], models[f"vitkit {tag}"], _ = vitkit_step(
                args.model, prec, "inductor" if comp else "", x, y, tmp / tag.replace(" ", "_"))
            fns[f"timm {tag}"], models[f"timm {tag}"] = timm_step(args.model, prec, comp, x, y)
    n_vit = sum(p.numel() for p in models[next(iter(models))].parameters())
    n_timm = sum(p.numel() for p in models[next(k for k in models if k.startswith("timm"))].parameters())
    print(f"parameters: vitkit {n_vit:,}, timm {n_timm:,}", flush=True)
    t0 = time.perf_counter()
    times = time_interleaved(fns, warmup=args.warmup, repeats=args.repeats,
                             progress=lambda s: print(f"  {s} ({time.perf_counter() - t0:.0f} s, load {load()})",
                                                      flush=True))
    load_after = load()
    flops = vit_flops(vit_config(args.model, 16, img_size=args.img_size, num_classes=1000)).train_step
    precs = args.precisions.split(",")
    roofs = {p: matmul_peak(DTYPES["fp32" if p == "fp32" else "bf16"]) for p in precs}
    rows = []
    for name, t in times.items():
        prec = name.split()[1]
        peer = name.replace("vitkit", "timm")
        ips = args.batch / t.median
        rows.append({"row": name, "img_per_s": ips, "step_s_median": t.median, "spread": t.spread,
                     "flag": unreliable(t), "x_timm_same": times[peer].median / t.median if name.startswith("vitkit")
                     else None, "pct_roof": 100 * ips * flops / roofs[prec]})
    opt = adamw_update(models[next(iter(models))])
    doc = {"machine": info, "timm": timm.__version__, "bf16_emulated": emulated, "model": f"ViT-{args.model}/16",
           "img_size": args.img_size, "batch": args.batch, "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
           "load_before_after": [load_before, load_after], "train_flops_per_img": flops,
           "matmul_roof_flops": roofs, "rows": rows, "adamw_update": opt}
    print(f"\n{'row':34s} {'img/s':>7s} {'x timm':>7s} {'% roof':>7s} spread")
    for r in rows:
        xt = f"{r['x_timm_same']:.2f}" if r["x_timm_same"] else ""
        print(f"{r['row']:34s} {r['img_per_s']:7.2f} {xt:>7s} {r['pct_roof']:6.1f}% {100 * r['spread']:.0f}% {r['flag']}")
    print(f"AdamW update alone: {opt}\nroofs GFLOP/s: " + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in roofs.items()))
    print(f"load after: {load_after}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
