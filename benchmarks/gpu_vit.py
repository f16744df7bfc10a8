"""ViT on one GPU (issue 56): vitkit beside timm and Hugging Face (SDPA) under the same settings, interleaved, medians.

Sections, in order (each one's records are written to `--out`/gpu_vit.json as soon as it ends, so a run stopped by a
time limit keeps what it measured; a section that would not fit in what is left of `--budget-s` is recorded as
skipped, and an error in one implementation is recorded without stopping the others):

  env          GPU, driver, CUDA, torch/timm/transformers versions
  matmul       an 8192^3 bf16 matmul on random data (the measured ceiling beside the 989 TFLOP/s dense peak)
  agreement    fp32 logits of ViT-B/16 on the GPU (TF32 off) against the CPU's, and each against float64
  train        ViT-B/16 training step (bf16 autocast, fp32 master weights, fused AdamW) at batch 128/256/512, eager
  infer        ViT-B/16 inference at batch 256, bf16 autocast and bf16 weights, eager
  latency      batch 1, bf16 weights: eager and one CUDA graph replayed
  large        ViT-L/16 and ViT-H/14 training at batch 32 with gradient checkpointing (L/16 also without): img/s and
               torch.cuda.max_memory_allocated, one implementation resident at a time
  compiled     regional torch.compile (each block; `vitkit.bench.gpu.compile_blocks`), default mode, beside eager
               vitkit: inference at batch 256 (bf16 weights), then training at vitkit's best eager batch
  pipeline     the input pipeline (JPEG decode + Inception crop + flip) with 1..all workers on generated JPEGs
  autotune     inference compiled with mode max-autotune-no-cudagraphs (only with budget left)

    python benchmarks/gpu_vit.py --out benchmarks/results/gpu          # a CUDA machine, ~5 minutes
    python benchmarks/gpu_vit.py --smoke --out /tmp/gpu_smoke          # every section at tiny sizes on the CPU
    python benchmarks/gpu_vit.py --tables benchmarks/results/gpu/gpu_vit.json   # the Markdown tables of a run
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from vitkit.bench.gpu import (
    block_list,
    compile_blocks,
    dense_bf16_peak,
    graphed_call,
    logits_agreement,
    mfu,
    time_throughput,
)
from vitkit.bench.machine import machine_info, matmul_peak
from vitkit.bench.peers import PEERS, PeerUnavailable, build_vitkit, enable_grad_checkpointing
from vitkit.bench.suite import Case, config_for, make_step
from vitkit.bench.timing import peak_memory, time_interleaved
from vitkit.models.flops import vit_flops
from vitkit.models.vit import ViTConfig
from vitkit.utils.precision import input_dtype

IMPLS = ("vitkit", "timm", "hf-sdpa")
TINY = dict(patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=10)  # --smoke: every model


class Run:
    """The run's settings, clock and records (rewritten to disk after every record)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.smoke = args.smoke
        self.dev = torch.device("cpu" if args.smoke else "cuda")
        self.img = 32 if args.smoke else 224
        self.overrides = TINY if args.smoke else {}
        self.backend = "aot_eager" if args.smoke else "inductor"  # --smoke exercises dynamo without a C compiler
        self.iters, self.samples, self.warmup = (1, 1, 1) if args.smoke else (3, 5, 3)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_s
        self.out = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.doc: dict[str, Any] = {"started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                                    "smoke": args.smoke, "budget_s": args.budget_s, "records": []}
        self.peak: dict[str, float | None] = {"dense": None, "matmul": None}

    def add(self, section: str, **fields: Any) -> dict[str, Any]:
        rec = {"section": section, "t_s": round(time.monotonic() - self.t0, 1), **fields}
        self.doc["records"].append(rec)
        (self.out / "gpu_vit.json").write_text(json.dumps(self.doc, indent=1, default=str))
        short = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items() if k != "traceback"}
        print(json.dumps(short, default=str), flush=True)
        return rec

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def cfg(self, model: str) -> ViTConfig:
        cfg = config_for(Case(model, 224, 1, "infer"))
        return cfg.replace(img_size=(self.img, self.img), **self.overrides) if self.smoke else cfg

    def mfus(self, img_per_s: float, flops_per_img: float) -> dict[str, float | None]:
        return {"mfu_dense_peak": mfu(img_per_s, flops_per_img, self.peak["dense"]),
                "mfu_measured_matmul": mfu(img_per_s, flops_per_img, self.peak["matmul"])}

    def free(self) -> None:
        gc.collect()
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()


def build(run: Run, impl: str, cfg: ViTConfig, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """vitkit or a peer with `cfg`'s architecture on the run's device (the same seed for each)."""
    torch.manual_seed(0)
    model = build_vitkit(cfg) if impl == "vitkit" else PEERS[impl](cfg)
    if impl == "vitkit":  # vitkit's head starts at zero (paper); random here, like the peers', so logits compare
        torch.nn.init.normal_(model.head.weight, std=0.02)
    return model.to(run.dev, dtype)


def build_all(run: Run, section: str, impls: tuple[str, ...], make: Callable[[str], Any]) -> dict[str, Any]:
    """`make(impl)` for each implementation; a peer that does not import, or any error, is recorded and left out."""
    out = {}
    for impl in impls:
        try:
            out[impl] = make(impl)
        except PeerUnavailable as e:
            run.add(section, impl=impl, skipped=str(e))
        except Exception as e:  # noqa: BLE001 - one implementation's failure must not stop the others
            run.add(section, impl=impl, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
    return out


def timed_rows(run: Run, section: str, steps: dict[str, Callable[[], Any]], batch: int, flops_per_img: float,
               **fields: Any) -> dict[str, float]:
    """Time `steps` interleaved; one record per implementation with img/s, MFU and ratios; returns img/s by name."""
    t = time_throughput(steps, run.iters, run.samples, run.warmup, run.dev)
    rates = {k: batch / v.median for k, v in t.items()}
    for k, v in t.items():
        run.add(section, impl=k, batch=batch, img_per_s=rates[k], median_ms=v.median * 1e3, spread=v.spread,
                samples=len(v.samples), iters_per_sample=run.iters, **run.mfus(rates[k], flops_per_img),
                over={o: rates[k] / rates[o] for o in rates if o != k}, **fields)
    return rates


def s_env(run: Run) -> None:
    versions = {}
    for pkg in ("torch", "timm", "transformers", "torchvision", "triton", "numpy", "pillow"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    info: dict[str, Any] = {"machine": machine_info(run.dev), "versions": versions, "python": platform.python_version()}
    if run.dev.type == "cuda":
        p = torch.cuda.get_device_properties(run.dev)
        info.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), sms=p.multi_processor_count,
                    gpu_mem_gib=p.total_memory / 2**30, capability=f"{p.major}.{p.minor}")
        try:
            q = "name,driver_version,memory.total,clocks.max.sm,power.limit,clocks.sm"
            info["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True,
                                                text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            info["nvidia_smi"] = f"failed: {e}"
        run.peak["dense"] = dense_bf16_peak(torch.cuda.get_device_name(run.dev))
    info["dense_bf16_peak_flops"] = run.peak["dense"]
    run.doc["env"] = info
    run.add("env", **info)


def s_matmul(run: Run) -> None:
    n = 256 if run.smoke else 8192
    best = matmul_peak(torch.bfloat16, run.dev, sizes=(n,), repeats=10)
    run.peak["matmul"] = best
    run.add("matmul", n=n, dtype="bf16", data="random normal", tflops=best / 1e12, best_of=10)


def s_agreement(run: Run) -> None:
    cfg = run.cfg("vit_b16")
    torch.manual_seed(0)
    model = build_vitkit(cfg)
    torch.nn.init.normal_(model.head.weight, std=0.02)  # the head starts at zero: logits would all be 0
    x = torch.randn(4, 3, run.img, run.img)
    run.add("agreement", model="vit_b16", precision="fp32 (TF32 off)", **logits_agreement(model, x, run.dev))


def s_train(run: Run) -> int:
    """ViT-B/16 eager training; returns vitkit's best batch."""
    cfg = run.cfg("vit_b16")
    flops = vit_flops(cfg).train_step
    best: dict[str, tuple[float, int]] = {}
    for batch in ((2, 4) if run.smoke else (128, 256, 512)):
        case = Case("vit_b16", run.img, batch, "train", "bf16-autocast")
        steps = build_all(run, "train", IMPLS, lambda i, c=case: make_step(build(run, i, cfg), c, "bf16-autocast",
                                                                           run.dev, cfg.num_classes)[0])
        if "vitkit" not in steps:
            continue
        try:
            rates = timed_rows(run, "train", steps, batch, flops, precision="bf16-autocast", optimizer="AdamW fused",
                               compiled=False)
            for k, r in rates.items():
                if r > best.get(k, (0.0, 0))[0]:
                    best[k] = (r, batch)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory at the largest batch
            run.add("train", batch=batch, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
        del steps
        run.free()
    run.add("train_best", best={k: {"img_per_s": r, "batch": b} for k, (r, b) in best.items()},
            vitkit_over_timm=best["vitkit"][0] / best["timm"][0] if "timm" in best and "vitkit" in best else None)
    return best["vitkit"][1] if "vitkit" in best else (4 if run.smoke else 256)


def _infer_steps(run: Run, section: str, cfg: ViTConfig, batch: int, precision: str,
                 impls: tuple[str, ...]) -> dict[str, Callable[[], Any]]:
    case = Case("vit_b16", run.img, batch, "infer", precision)
    return build_all(run, section, impls, lambda i: make_step(build(run, i, cfg, input_dtype(precision)), case,
                                                              precision, run.dev, cfg.num_classes)[0])


def s_infer(run: Run) -> None:
    cfg = run.cfg("vit_b16")
    batch = 4 if run.smoke else 256
    for precision in ("bf16-autocast", "bf16"):
        steps = _infer_steps(run, "infer", cfg, batch, precision, IMPLS)
        if "vitkit" in steps:
            timed_rows(run, "infer", steps, batch, vit_flops(cfg).forward, precision=precision, compiled=False)
        del steps
        run.free()


def s_latency(run: Run) -> None:
    """Batch 1, bf16 weights: a synchronised call's wall time, eager and as one CUDA graph replayed."""
    cfg = run.cfg("vit_b16")
    fns: dict[str, Callable[[], Any]] = {}
    models = build_all(run, "latency", IMPLS, lambda i: build(run, i, cfg, torch.bfloat16).eval())
    x = torch.randn(1, 3, run.img, run.img, device=run.dev, dtype=torch.bfloat16)
    for impl, model in models.items():
        fns[f"{impl} eager"] = lambda m=model: m(x)
        if run.dev.type == "cuda":
            try:
                fns[f"{impl} cuda-graph"] = graphed_call(model, x)
            except Exception as e:  # noqa: BLE001
                run.add("latency", impl=impl, mode="cuda-graph", error=f"{type(e).__name__}: {e}")
        else:
            run.add("latency", impl=impl, mode="cuda-graph", skipped="CUDA graphs need a CUDA device")
    with torch.inference_mode():
        t = time_interleaved(fns, warmup=run.warmup, repeats=10 if run.smoke else 100, device=run.dev)
        outs = {k: fn().float().cpu() for k, fn in fns.items()}  # the graph's logits against eager's
    for k, v in t.items():
        impl, mode = k.split(" ")
        ref = outs[f"{impl} eager"]
        run.add("latency", impl=impl, mode=mode, batch=1, precision="bf16", median_ms=v.median * 1e3,
                p90_ms=sorted(v.samples)[int(0.9 * len(v.samples))] * 1e3, samples=len(v.samples),
                finite=bool(torch.isfinite(outs[k]).all()),
                max_abs_diff_vs_eager=float((outs[k] - ref).abs().max()), max_abs_eager=float(ref.abs().max()))
    del models, fns
    run.free()


def s_large(run: Run) -> None:
    """ViT-L/16 and H/14 training at batch 32: one implementation resident at a time, so that the allocator's peak
    is that model's (weights, fp32 grads, AdamW state, activations)."""
    batch = 2 if run.smoke else 32
    plan = [("vit_l16", True), ("vit_l16", False), ("vit_h14", True)]
    for name, ckpt in plan:
        cfg = run.cfg(name)
        for impl in ("vitkit", "timm") if ckpt else ("vitkit",):
            need = 5 if run.smoke else (60 if name == "vit_h14" else 30)
            if run.left() < need:
                run.add("large", model=name, impl=impl, grad_checkpoint=ckpt, skipped=f"budget: {run.left():.0f}s left")
                continue
            try:
                _large_one(run, name, cfg, impl, batch, ckpt)
            except PeerUnavailable as e:
                run.add("large", model=name, impl=impl, skipped=str(e))
            except Exception as e:  # noqa: BLE001
                run.add("large", model=name, impl=impl, grad_checkpoint=ckpt, error=f"{type(e).__name__}: {e}",
                        traceback=traceback.format_exc()[-3000:])
            run.free()


def _large_one(run: Run, name: str, cfg: ViTConfig, impl: str, batch: int, ckpt: bool) -> None:
    """One implementation's training rate and allocator peak (its model is freed when this returns)."""
    model = build(run, impl, cfg)
    if ckpt:
        enable_grad_checkpointing(model)
    step = make_step(model, Case(name, run.img, batch, "train", "bf16-autocast"), "bf16-autocast", run.dev,
                     cfg.num_classes)[0]
    step()  # AdamW allocates its state
    peak = peak_memory(step, [], run.dev)
    t = time_throughput({impl: step}, run.iters, run.samples, 1, run.dev)[impl]
    rate = batch / t.median
    flops = vit_flops(cfg).train_step  # recomputation under checkpointing is not useful work: not counted
    run.add("large", model=name, impl=impl, batch=batch, grad_checkpoint=ckpt, img_per_s=rate,
            median_ms=t.median * 1e3, spread=t.spread, peak_gib=peak / 2**30, params_m=cfg_params(cfg),
            **run.mfus(rate, flops), precision="bf16-autocast", optimizer="AdamW fused")


def cfg_params(cfg: ViTConfig) -> float:
    """Parameters of vitkit's model of `cfg`, millions (from a meta-device build: no memory, no init)."""
    with torch.device("meta"):
        return sum(p.numel() for p in build_vitkit(cfg).parameters()) / 1e6


def _compiled(run: Run, section: str, mode: str, impls: tuple[str, ...], make: Callable[[str], Any],
              warm: Callable[[Any], Any]) -> dict[str, Any]:
    """Build each implementation with `make`, compile its blocks in `mode` and run it once (`warm`); the compile
    (first call) time is recorded."""
    out = {}
    for impl in impls:
        def one(i: str) -> Any:
            step, model = make(i)
            compile_blocks(model, mode, backend=run.backend)
            t0 = time.monotonic()
            warm(step)
            run.add(section, impl=i, mode=mode, compile_s=time.monotonic() - t0, blocks=len(block_list(model)))
            return step
        out.update({f"{impl}+compile": s for s in build_all(run, section, (impl,), one).values()})
    return out


def s_compiled(run: Run, train_batch: int, mode: str = "default", train: bool = True, section: str = "compiled",
               hf: bool = True) -> None:
    cfg = run.cfg("vit_b16")
    impls = ("vitkit", "timm", "hf-sdpa") if hf else ("vitkit", "timm")
    batch = 4 if run.smoke else 256
    case = Case("vit_b16", run.img, batch, "infer", "bf16")

    def make_infer(i: str) -> tuple[Callable[[], Any], torch.nn.Module]:
        model = build(run, i, cfg, torch.bfloat16)
        return make_step(model, case, "bf16", run.dev, cfg.num_classes)[0], model

    steps = _compiled(run, section, mode, impls, make_infer, lambda s: s())
    steps.update(_infer_steps(run, section, cfg, batch, "bf16", ("vitkit",)))
    if "vitkit" in steps:
        timed_rows(run, section, steps, batch, vit_flops(cfg).forward, precision="bf16", mode=mode, kind="infer")
    del steps
    run.free()
    if not train:
        return
    est = 15 if run.smoke else 120
    if run.left() < est:
        run.add(section, kind="train", skipped=f"budget: {run.left():.0f}s left, needs ~{est}s")
        return
    tcase = Case("vit_b16", run.img, train_batch, "train", "bf16-autocast")

    def make_train(i: str) -> tuple[Callable[[], Any], torch.nn.Module]:
        model = build(run, i, cfg)
        return make_step(model, tcase, "bf16-autocast", run.dev, cfg.num_classes)[0], model

    steps = _compiled(run, section, mode, ("vitkit", "timm"), make_train, lambda s: (s(), s()))
    steps["vitkit"] = make_step(build(run, "vitkit", cfg), tcase, "bf16-autocast", run.dev, cfg.num_classes)[0]
    timed_rows(run, section, steps, train_batch, vit_flops(cfg).train_step, precision="bf16-autocast", mode=mode,
               kind="train", optimizer="AdamW fused")
    del steps
    run.free()


def s_pipeline(run: Run, model_rate: float | None) -> None:
    """JPEG decode + Inception crop + flip through vitkit's loader, on generated 500x375 JPEGs (smooth colour fields
    with noise: entropy nearer a photograph's than pure noise)."""
    import numpy as np
    from PIL import Image

    from vitkit.bench.loader import measure_pipeline
    from vitkit.data.config import DataConfig
    from vitkit.data.datasets import open_splits

    n, batch = (48, 8) if run.smoke else (1600, 128)
    cores = os.cpu_count() or 1
    workers = (0, 1) if run.smoke else sorted({1, 4, 8, cores})
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="vitkit-gpu-jpeg-") as tmp:
        d = Path(tmp)
        for i in range(n):
            base = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((500, 375), Image.BILINEAR)
            arr = np.asarray(base).astype(np.int16) + rng.integers(-12, 13, (375, 500, 3))
            folder = d / f"c{i % 4}"
            folder.mkdir(exist_ok=True)
            Image.fromarray(arr.clip(0, 255).astype(np.uint8)).save(folder / f"{i}.jpg", quality=90)
        ds = open_splits(DataConfig.from_flag(str(d), 3))["train"]
        rows = measure_pipeline(ds, run.img, batch, workers, randaugment=((0, 0.0),))
    for r in rows:
        run.add("pipeline", images=len(ds), batch=batch, source="500x375 JPEG q90", model_train_img_per_s=model_rate,
                bound=("loader" if model_rate and r["img_per_s"] < model_rate else "model"), **r)


def tables(doc: dict[str, Any]) -> str:
    """Markdown tables of a run's records (for BENCHMARKS.md)."""
    recs = doc["records"]

    def f(v: Any, spec: str = ".0f") -> str:
        return "-" if v is None else format(v, spec)

    out = []
    rows = [r for r in recs if r["section"] in ("train", "infer", "compiled", "autotune") and "img_per_s" in r]
    if rows:
        out += ["| section | impl | batch | precision | img/s | ms/step | MFU (dense peak) | MFU (measured matmul) "
                "| vitkit / timm | vitkit / HF |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            sec = r["section"] + (f" {r['kind']}" if "kind" in r else "")
            over = r.get("over", {}) if r["impl"].startswith("vitkit") else {}
            vs_timm, vs_hf = (over.get(r["impl"].replace("vitkit", p)) for p in ("timm", "hf-sdpa"))
            out.append(f"| {sec} | {r['impl']} | {r['batch']} | {r.get('precision', '')} | {f(r['img_per_s'])} | "
                       f"{f(r['median_ms'], '.1f')} | {f(r['mfu_dense_peak'], '.1%')} | "
                       f"{f(r['mfu_measured_matmul'], '.1%')} | {f(vs_timm, '.2f')} | {f(vs_hf, '.2f')} |")
    lat = [r for r in recs if r["section"] == "latency" and "median_ms" in r]
    if lat:
        out += ["", "| impl | mode | batch-1 median ms | p90 ms |", "|---|---|---|---|"]
        out += [f"| {r['impl']} | {r['mode']} | {r['median_ms']:.2f} | {r['p90_ms']:.2f} |" for r in lat]
    big = [r for r in recs if r["section"] == "large" and "img_per_s" in r]
    if big:
        out += ["", "| model | impl | batch | grad ckpt | img/s | MFU (dense peak) | max_memory_allocated GiB |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['model']} | {r['impl']} | {r['batch']} | {r['grad_checkpoint']} | {r['img_per_s']:.0f} | "
                f"{f(r['mfu_dense_peak'], '.1%')} | {r['peak_gib']:.1f} |" for r in big]
    pipe = [r for r in recs if r["section"] == "pipeline" and "img_per_s" in r]
    if pipe:
        out += ["", "| loader workers | img/s | per worker | bound (vs vitkit's training img/s) |", "|---|---|---|---|"]
        out += [f"| {r['workers']} | {r['img_per_s']:.0f} | {r['img_per_s_per_worker']:.0f} | {r['bound']} |"
                for r in pipe]
    other = [r for r in recs if "skipped" in r or "error" in r]
    if other:
        out += ["", "Skipped or failed:"]
        out += [f"- {r['section']} {r.get('impl', '')} {r.get('model', '')}: {r.get('skipped') or r.get('error')}"
                for r in other]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu"))
    ap.add_argument("--smoke", action="store_true", help="tiny models, a few steps, on the CPU")
    ap.add_argument("--budget-s", type=float, default=330.0, help="sections that would end past this are skipped")
    ap.add_argument("--sections", default="env,matmul,agreement,train,infer,latency,large,compiled,pipeline,autotune")
    ap.add_argument("--tables", type=Path, default=None, help="print the Markdown tables of this run's JSON and exit")
    args = ap.parse_args(argv)
    if args.tables:
        print(tables(json.loads(args.tables.read_text())))
        return 0
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("gpu_vit.py: torch.cuda.is_available() is False (use --smoke on a CPU)")
    run = Run(args)
    wanted = args.sections.split(",")
    state: dict[str, Any] = {"train_batch": 4 if args.smoke else 256, "rate": None}

    def train() -> None:
        state["train_batch"] = s_train(run)
        best = [r for r in run.doc["records"] if r["section"] == "train_best"]
        state["rate"] = best[-1]["best"].get("vitkit", {}).get("img_per_s") if best else None

    # (name, seconds it needs at least, what it does)
    plan: list[tuple[str, float, Callable[[], Any]]] = [
        ("env", 0, lambda: s_env(run)),
        ("matmul", 5, lambda: s_matmul(run)),
        ("agreement", 10, lambda: s_agreement(run)),
        ("train", 40, train),
        ("infer", 15, lambda: s_infer(run)),
        ("latency", 10, lambda: s_latency(run)),
        ("large", 40, lambda: s_large(run)),
        ("compiled", 60, lambda: s_compiled(run, state["train_batch"], hf=run.left() > 200)),
        ("pipeline", 25, lambda: s_pipeline(run, state["rate"])),
        ("autotune", 150, lambda: s_compiled(run, state["train_batch"], "max-autotune-no-cudagraphs", train=False,
                                             section="autotune", hf=False)),
    ]
    for name, need, fn in plan:
        if name not in wanted:
            continue
        if run.left() < (0 if args.smoke else need):
            run.add(name, skipped=f"budget: {run.left():.0f}s left of {args.budget_s:.0f}s, needs ~{need:.0f}s")
            continue
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - record it and go on to the next section
            run.add(name, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
        run.free()
        print(f"== {name}: {time.monotonic() - t0:.1f}s", flush=True)
    run.doc["finished_s"] = round(time.monotonic() - run.t0, 1)
    run.add("done", total_s=run.doc["finished_s"])
    (run.out / "gpu_vit.md").write_text(tables(run.doc) + "\n")
    print(tables(run.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
