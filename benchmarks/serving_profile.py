"""Where a ViT's CPU inference time goes: torch.profiler's share of self time per operator for vitkit eager
(ViT-B/16 and ViT-Ti/16, batch 1 and 8, fp32 and bf16 weights). It bounds what any fusion or graph compiler can
gain: everything that is not a matmul (`aten::addmm`) or attention is the most a fused graph can remove.
Writes benchmarks/results/serving_profile.json.

    python benchmarks/serving_profile.py
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from vitkit.bench.machine import machine_info
from vitkit.models import create_model


def shares(name: str, batch: int, precision: str) -> dict:
    model = create_model(name, num_classes=1000, gelu="exact").eval()
    x = torch.randn(batch, 3, 224, 224)
    if precision == "bf16":
        model, x = model.to(torch.bfloat16), x.bfloat16()
    with torch.inference_mode():
        model(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(x)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:6]
    return {"model": name, "batch": batch, "precision": precision, "total_ms": total / 1e3,
            "ops": {e.key: e.self_cpu_time_total / total for e in top}}


def main() -> None:
    warnings.filterwarnings("ignore")
    rows = [shares(n, b, p) for n in ("vit_ti16", "vit_b16") for b in (1, 8) for p in ("fp32", "bf16")]
    for r in rows:
        ops = ", ".join(f"{k.removeprefix('aten::')} {100 * v:.1f}%" for k, v in r["ops"].items())
        print(f"{r['model']} b{r['batch']} {r['precision']}: {r['total_ms']:.1f} ms; {ops}")
    out = Path("benchmarks/results/serving_profile.json")
    out.write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
