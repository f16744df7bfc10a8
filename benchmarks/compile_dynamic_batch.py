"""The torch.compile predictor's batch dimension (issue 55): a graph compiled with the batch marked dynamic from the
first call (`vitkit.inference.runtime.batch_dynamic`, what `build_predictor(..., compile=True)` does) against the
static graph dynamo compiles for the first batch's size when nothing is marked; both `inference_model(compile=True)`
(inductor, frozen weights), timed interleaved (medians) at one fixed batch; then a short batch through each (the
static one recompiles): the graphs and one-off CPU seconds of each compile. Writes benchmarks/results/compile_dynamic_batch.json.

    flock /tmp/vitkit_bench.lock python benchmarks/compile_dynamic_batch.py [--model vit_ti16] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
from torch import nn

from vitkit.bench.machine import machine_info
from vitkit.bench.timing import time_interleaved
from vitkit.inference.runtime import batch_dynamic, inference_model
from vitkit.models import create_model


def cpu_s() -> float:
    """User + sys CPU seconds of this process and of the compiler processes it waited for."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class Static(nn.Module):
    """The model behind a forward of its own: dynamo keeps compiled graphs per code object and shares them between
    instances of a class (the weights are graph inputs), so the two compiles below each wrap the model in their own
    class, or the second would find, and time, the first one's graph."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class DynamicBatch(Static):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the same, as another code object
        return self.model(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_ti16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_dynamic_batch.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create_model(args.model).eval()
    x = torch.randn(args.batch, model.config.in_chans, *model.config.img_size)
    short = x[: max(1, args.batch // 2 - 1)]  # a short last batch: a second size
    counters = torch._dynamo.utils.counters
    prepare = {"static": lambda t: t, "dynamic_batch": batch_dynamic}
    nets, compiles = {}, {}
    with torch.inference_mode():
        want = model(x)
    torch._inductor.cpu_vec_isa.valid_vec_isa_list()  # inductor's one-off check of the CPU (a C++ build), not timed
    for name, prep in prepare.items():
        nets[name] = inference_model({"static": Static, "dynamic_batch": DynamicBatch}[name](model), compile=True)
        graphs, c0 = counters["stats"]["unique_graphs"], cpu_s()
        with torch.inference_mode():
            torch.testing.assert_close(nets[name](prep(x)), want, atol=1e-4, rtol=1e-4)
        compiles[name] = {"graphs": counters["stats"]["unique_graphs"] - graphs, "cpu_s": round(cpu_s() - c0, 1)}

    def call(name: str):  # noqa: ANN202
        def run() -> None:
            with torch.inference_mode():
                nets[name](prepare[name](x))
        return run

    times = time_interleaved({k: call(k) for k in nets}, warmup=2, repeats=args.repeats)
    med = {k: t.median for k, t in times.items()}
    for name, prep in prepare.items():  # after the timing, so that the static net was timed on its static graph
        graphs, c0 = counters["stats"]["unique_graphs"], cpu_s()
        with torch.inference_mode():
            torch.testing.assert_close(nets[name](prep(short)), want[: len(short)], atol=1e-4, rtol=1e-4)
        compiles[name].update(short_batch_graphs=counters["stats"]["unique_graphs"] - graphs,
                              short_batch_cpu_s=round(cpu_s() - c0, 1))
    out = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d"), "model": args.model, "batch": args.batch,
           "threads": args.threads, "load_average": [round(v, 1) for v in os.getloadavg()],
           "compiles": compiles,
           "median_s": {k: round(v, 4) for k, v in med.items()},
           "samples_s": {k: [round(s, 4) for s in t.samples] for k, t in times.items()},
           "dynamic_over_static": round(med["dynamic_batch"] / med["static"], 3)}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("machine", "samples_s")}, indent=2))


if __name__ == "__main__":
    main()
