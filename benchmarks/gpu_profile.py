"""Where a ViT-B/16 training step's GPU time goes: torch.profiler over a few steps of vitkit and timm, eager and with
regional torch.compile (bf16 autocast, fused AdamW, the settings of gpu_vit.py), kernels grouped into matmul,
attention, optimizer and the rest (LayerNorm, GELU, casts, adds, copies), beside the step's wall time, so the gap
between the step and the matmul ceiling has a breakdown (BENCHMARKS.md, "On a GPU").

    python benchmarks/gpu_profile.py --out benchmarks/results/gpu          # a CUDA machine, ~1 minute
    python benchmarks/gpu_profile.py --smoke --out /tmp/gpu_profile        # tiny, on the CPU (CPU ops grouped)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from vitkit.bench.gpu import compile_blocks
from vitkit.bench.peers import PEERS, build_vitkit
from vitkit.bench.suite import Case, config_for, make_step
from vitkit.bench.timing import time_interleaved

GROUPS = (  # first match wins (cuDNN's SDPA kernels also name sm90 and wgmma: attention is tested before matmul);
    # names of cuDNN/cuBLAS/CUTLASS/Triton kernels and of the CPU ops of --smoke
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|xmma|cublas|triton_mm|addmm|aten::mm|aten::bmm|conv", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach|fused_adam", re.I)),
)


def group_of(name: str) -> str:
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return "other"


def breakdown(prof: Any, steps: int, device: str) -> dict[str, Any]:
    """Kernel time per step by group (ms), the top kernels, from the profiler's events."""
    per: dict[str, float] = {}
    names: dict[str, float] = {}
    for e in prof.events():
        if device == "cuda":
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = e.time_range.elapsed_us()
        else:  # --smoke: CPU ops' self time
            if e.cpu_parent is not None and not e.name.startswith("aten::"):
                continue
            us = e.self_cpu_time_total
        per[group_of(e.name)] = per.get(group_of(e.name), 0.0) + us / 1e3 / steps
        names[e.name] = names.get(e.name, 0.0) + us / 1e3 / steps
    ranked = sorted(names.items(), key=lambda kv: -kv[1])
    return {"ms_per_step_by_group": per, "kernel_ms_per_step": sum(per.values()),
            "top_kernels": [{"name": n[:160], "group": group_of(n), "ms_per_step": t} for n, t in ranked[:12]],
            "all_kernels_ms_per_step": {n[:160]: t for n, t in ranked}}  # to regroup later


def table(prof: Any, device: str) -> str:
    """torch's own profiler table (top 25 by self device time), a cross-check of `breakdown`."""
    for key in (("self_device_time_total", "self_cuda_time_total") if device == "cuda" else ("self_cpu_time_total",)):
        try:
            return prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=90)
        except (AttributeError, KeyError, ValueError) as e:
            err = f"{type(e).__name__}: {e}"
    return err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    dev = "cpu" if args.smoke else "cuda"
    img, batch = (32, 2) if args.smoke else (224, args.batch)
    cfg = config_for(Case("vit_b16", 224, 1, "infer"))
    if args.smoke:
        cfg = cfg.replace(img_size=(img, img), patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=10)
    case = Case("vit_b16", img, batch, "train", "bf16-autocast")
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"batch": batch, "steps": args.steps, "torch": torch.__version__, "rows": []}
    for impl in ("vitkit", "timm"):
        for compiled in (False, True):
            row: dict[str, Any] = {"impl": impl, "compiled": compiled}
            try:
                torch.manual_seed(0)
                model = (build_vitkit(cfg) if impl == "vitkit" else PEERS[impl](cfg)).to(dev)
                if compiled:
                    compile_blocks(model, backend="aot_eager" if args.smoke else "inductor")
                step = make_step(model, case, "bf16-autocast", torch.device(dev), cfg.num_classes)[0]
                for _ in range(3):
                    step()
                wall = time_interleaved({"s": step}, warmup=1, repeats=args.steps, device=dev)["s"].median
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
                with profile(activities=acts) as prof:
                    for _ in range(args.steps):
                        step()
                    if dev == "cuda":
                        torch.cuda.synchronize()
                row.update(wall_ms_per_step=wall * 1e3, img_per_s=batch / wall, **breakdown(prof, args.steps, dev))
                row["gpu_idle_ms_per_step"] = row["wall_ms_per_step"] - row["kernel_ms_per_step"]
                row["table"] = table(prof, dev)
                del model, step, prof
            except Exception as e:  # noqa: BLE001 - a peer that does not import, or any failure, is recorded
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                row["traceback"] = traceback.format_exc()[-2000:]
            doc["rows"].append(row)
            (args.out / "gpu_profile.json").write_text(json.dumps(doc, indent=1))
            short = {k: v for k, v in row.items() if k not in ("top_kernels", "traceback", "table",
                                                                "all_kernels_ms_per_step")}
            print(json.dumps(short, default=lambda v: round(v, 2)), flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
