"""The torch fp32 CPU path after issue 49's refactor: ViT-B/16, batch 8, fp32, timed interleaved (medians) as
plain eager torch, eager with the fused blocks (inference/cpu_fused.py, the fp32 predictor's default),
`torch.compile` with frozen weights (`build_predictor(..., compile=True)`), and transformers' ViTForImageClassification
(sdpa) on the same input, all on random weights. The compile's one-off cost is reported apart. Writes
benchmarks/results/one_path_speed.json.

    flock /tmp/vitkit_bench.lock python benchmarks/one_path_speed.py [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from vitkit.bench.machine import machine_info
from vitkit.bench.peers import build_hf
from vitkit.bench.timing import time_interleaved
from vitkit.inference.runtime import inference_model
from vitkit.models import create_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "one_path_speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create_model("vit_b16").eval()
    x = torch.randn(args.batch, 3, 224, 224)
    nets = {"eager": inference_model(model, "fp32", fused=False), "fused": inference_model(model, "fp32")}
    t0 = time.perf_counter()
    nets["compile"] = inference_model(model, "fp32", compile=True)
    with torch.inference_mode():
        nets["compile"](x)  # the graph compiles at its first call
    compile_s = time.perf_counter() - t0
    nets["transformers"] = build_hf(model.config).eval()

    def call(net: torch.nn.Module):  # noqa: ANN202
        def run() -> None:
            with torch.inference_mode():
                net(x)
        return run

    times = time_interleaved({k: call(v) for k, v in nets.items()}, warmup=1, repeats=args.repeats)
    med = {k: t.median for k, t in times.items()}
    out = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d"), "batch": args.batch,
           "threads": args.threads, "compile_first_call_s": round(compile_s, 1),
           "median_s": {k: round(v, 3) for k, v in med.items()},
           "samples_s": {k: [round(s, 3) for s in t.samples] for k, t in times.items()},
           "speedup_vs_eager": {k: round(med["eager"] / v, 2) for k, v in med.items()}}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("median_s", "speedup_vs_eager", "compile_first_call_s")}, indent=2))


if __name__ == "__main__":
    main()
