"""Peak memory and speed of fine-tuning a ViT on this machine: full fine-tuning vs LoRA (Hu et al. 2022), with and
without gradient checkpointing (BENCHMARKS.md "Fine-tuning on a laptop").

Each configuration runs in its own process (so its peak resident memory, ru_maxrss, is its own), under
`flock /tmp/vitkit_bench.lock` (one heavy job on the machine at a time), which the script takes itself per
configuration: do not wrap the script in `flock` too (the child then waits for its own parent's lock forever, which
is what cut two earlier ViT-L attempts at their timeouts): the model (random weights: memory and
speed do not depend on their values) with a new 10-way head at 224 px, AdamW on what trains, one batch of random
images; `--warmup` untimed steps, then `--steps` timed ones (forward, backward, optimizer step). One line of JSON
per configuration; the parent prints the table and the ratios to full fine-tuning.

Each process first fixes glibc's mmap threshold (`vitkit.utils.memory.mmap_large_blocks`, as `vitkit train` /
`finetune` do with gradient checkpointing), so freed activations go back to the OS; a configuration ending in `+glibc` leaves glibc's default
(its threshold rises to 32 MiB as blocks are freed, and a checkpointed step's peak RSS then holds ~1.8 GiB of freed,
fragmented heap: the "before" rows of BENCHMARKS.md). Each row also gives the peak RSS after the forward pass
(`peak_fwd_mb`) and after backward (`peak_bwd_mb`), the optimizer step being the rest.

Step times taken in separate processes one after another move with the machine's load; `--interleave` measures
speed side by side in one process instead (every configuration built, then rounds of one step each, in turn; the
median step per configuration, its ratio to full fine-tuning's): the ratios quoted come from there.

    python benchmarks/lora_memory.py --model vit_b16 --configs full full+ckpt lora8 lora8+ckpt lora16 lora16+ckpt \\
        lora16+ckpt+bf16 lora16+ckpt+glibc full+glibc
    python benchmarks/lora_memory.py --model vit_l16 --configs full+ckpt lora16+ckpt --steps 1
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from vitkit.bench.machine import machine_info
from vitkit.models.lora import LoraConfig, apply_lora
from vitkit.models.registry import create_model
from vitkit.utils.memory import DEFAULT_MMAP_THRESHOLD, mmap_large_blocks, peak_rss_mb
from vitkit.utils.precision import autocast

LOCK = "/tmp/vitkit_bench.lock"
CONFIG = re.compile(r"^(full|lora(\d+))(\+ckpt)?(\+bf16)?(\+glibc)?$")
GLIBC_MAX_THRESHOLD = 32 << 20  # where glibc's own raising of the threshold stops (64-bit): the +glibc state


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def build(model_name: str, config: str, img: int, targets: tuple[str, ...]) -> tuple:
    """(model in train mode, its optimizer, autocast precision) of one configuration (`CONFIG`)."""
    m = CONFIG.match(config)
    if m is None:
        raise SystemExit(f"unknown configuration {config!r}: full | loraR, then optionally +ckpt, +bf16, +glibc")
    torch.manual_seed(0)
    model = create_model(model_name, num_classes=10, img_size=img)
    rank = int(m.group(2) or 0)
    if rank:
        apply_lora(model, LoraConfig(rank=rank, alpha=2.0 * rank, targets=targets))
    model.set_grad_checkpointing(bool(m.group(3)))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model, opt, "bf16-autocast" if m.group(4) else "fp32"


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, precision: str, x: torch.Tensor,
               y: torch.Tensor, phases: dict | None = None) -> tuple[float, float]:
    """(seconds, loss) of one step: forward, backward, optimizer step; `phases` receives the peak RSS after the
    forward pass and after backward."""
    t0 = time.perf_counter()
    with autocast(precision):
        loss = F.cross_entropy(model(x), y)
    if phases is not None:
        phases["peak_fwd_mb"] = round(peak_rss_mb())
    loss.backward()
    if phases is not None:
        phases["peak_bwd_mb"] = round(peak_rss_mb())
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, float(loss)


def interleaved(model_name: str, configs: list[str], batch: int, img: int, rounds: int, targets: tuple[str, ...],
                threads: int) -> dict:
    """Median step time of each configuration, measured in turn in one process (see the module docstring)."""
    torch.set_num_threads(threads)
    built = {c: build(model_name, c, img, targets) for c in configs}
    x, y = torch.randn(batch, 3, img, img), torch.randint(0, 10, (batch,))
    times: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(rounds + 1):  # round 0 warms up (oneDNN primitives, the optimizer state)
        for c, (model, opt, precision) in built.items():
            mmap_large_blocks(GLIBC_MAX_THRESHOLD if c.endswith("+glibc") else DEFAULT_MMAP_THRESHOLD)
            s, _ = train_step(model, opt, precision, x, y)
            print(f"  round {r} {c}: {s:.1f}s", file=sys.stderr, flush=True)
            if r:
                times[c].append(s)
    med = {c: statistics.median(t) for c, t in times.items()}
    ref = med.get("full")
    return {"model": model_name, "batch": batch, "img_size": img, "threads": threads, "rounds": rounds,
            "targets": list(targets), "step_times_s": {c: [round(t, 3) for t in ts] for c, ts in times.items()},
            "median_step_s": {c: round(t, 3) for c, t in med.items()},
            "ratio_to_full": {c: round(t / ref, 3) for c, t in med.items()} if ref else {}}


def one(model_name: str, config: str, batch: int, img: int, warmup: int, steps: int, targets: tuple[str, ...],
        threads: int) -> dict:
    """Train `warmup + steps` steps of one configuration in this process; its figures."""
    torch.set_num_threads(threads)
    malloc = "glibc's default" if config.endswith("+glibc") else mmap_large_blocks()
    start = rss_mb()
    model, opt, precision = build(model_name, config, img, targets)
    params = [p for p in model.parameters() if p.requires_grad]
    x = torch.randn(batch, 3, img, img)
    y = torch.randint(0, 10, (batch,))
    built = rss_mb()
    times, phases = [], {}
    for i in range(warmup + steps):
        s, loss = train_step(model, opt, precision, x, y, phases if i == 0 else None)
        if i >= warmup:
            times.append(s)
        print(f"  {config}: step {i} {s:.1f}s", file=sys.stderr, flush=True)
    step = sum(times) / len(times)
    return {"model": model_name, "config": config, "batch": batch, "img_size": img, "threads": threads,
            "trainable_params": sum(p.numel() for p in params), "params": sum(p.numel() for p in model.parameters()),
            "rss_start_mb": round(start), "rss_built_mb": round(built),
            "peak_rss_mb": round(peak_rss_mb()), **phases, "malloc": malloc,
            "step_s": round(step, 3), "step_times_s": [round(t, 3) for t in times], "img_per_s": round(batch / step, 2),
            "targets": list(targets) if "lora" in config else [], "loss": loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="vit_b16")
    ap.add_argument("--configs", nargs="+", default=["full", "full+ckpt", "lora8", "lora8+ckpt", "lora16",
                                                     "lora16+ckpt"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--targets", default="q,v", help="LoRA targets (vitkit.models.lora.TARGETS)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                    help="measure speed side by side in this process (under the lock), ROUNDS rounds")
    ap.add_argument("--one", action="store_true", help="(internal) run the single configuration --configs X here")
    ap.add_argument("--out", default="benchmarks/results/lora_memory.json", help="results, appended by model")
    a = ap.parse_args()
    targets = tuple(t for t in a.targets.split(",") if t)
    if a.one:
        print(json.dumps(one(a.model, a.configs[0], a.batch, a.img_size, a.warmup, a.steps, targets, a.threads)))
        return
    if a.interleave:
        res = interleaved(a.model, a.configs, a.batch, a.img_size, a.interleave, targets, a.threads)
        print(json.dumps(res))
        _save(Path(a.out), f"{a.model}_speed", res)
        return
    rows = []
    for config in a.configs:  # one process each, one at a time on the machine
        cmd = ["flock", LOCK, sys.executable, __file__, "--one", "--model", a.model, "--configs", config,
               "--batch", str(a.batch), "--img-size", str(a.img_size), "--warmup", str(a.warmup), "--steps",
               str(a.steps), "--targets", a.targets, "--threads", str(a.threads)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            rows.append({"model": a.model, "config": config, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    ok = [r for r in rows if "error" not in r]
    ref = next((r for r in ok if r["config"] == "full"), None)
    print(f"\n| {a.model} b{a.batch} {a.img_size}px | trainable | peak RSS (GiB) | x full | step (s) | x full | img/s |")
    print("|---|---|---|---|---|---|---|")
    for r in ok:
        mem = f"{r['peak_rss_mb'] / ref['peak_rss_mb']:.2f}" if ref else "-"
        spd = f"{r['step_s'] / ref['step_s']:.2f}" if ref else "-"
        print(f"| {r['config']} | {r['trainable_params'] / 1e6:.2f}M | {r['peak_rss_mb'] / 1024:.2f} | {mem} | "
              f"{r['step_s']:.2f} | {spd} | {r['img_per_s']:.2f} |")
    _save(Path(a.out), a.model, {"rows": rows})


def _save(out: Path, name: str, res: dict) -> None:
    saved = json.loads(out.read_text()) if out.is_file() else {}
    saved[name] = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **res}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
