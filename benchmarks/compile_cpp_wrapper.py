"""The compiled predictor's host code (issues 53, 55): `build_predictor(..., compile=True)` (`FrozenCompiled`,
weights frozen) with inductor's Python wrapper (the graph's host code in Python, each C++ kernel a shared library of
its own: what vitkit serves) against its C++ wrapper (`torch._inductor.config.cpp_wrapper`, patched around the
compiling calls: host code and kernels one shared library, no Python per call; `cpp_separate`: its kernels built
as an object apart). In one process: each wrapper's cold compile (a fresh inductor cache folder) of the dynamic-batch
graph (first batch 8) and of batch 1's own graph, then each one's warm recompile (a new predictor, inductor's
in-memory caches cleared, its cache folder kept: what the next process serving the same model pays): CPU seconds
of the process and its compiler children, wall seconds, C++ builds (shared libraries written), the FX graph
cache's hits / misses / bypasses; then eager and every wrapper served interleaved at each batch (medians, spreads)
and each one's agreement with the eager fp32 model. Appends to benchmarks/results/compile_cpp_wrapper.json.

    TORCHINDUCTOR_COMPILE_THREADS=1 nice -n 5 python benchmarks/compile_cpp_wrapper.py --model vit_s16
    ... compile_cpp_wrapper.py --model tiny --variant lora_tome --threads 1 --calls 50
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from compile_dynamic_batch import cpu_s  # the script beside this one
from compile_freezing import agreement, record
from torch._inductor import config as inductor_config
from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

from vitkit.bench.timing import time_interleaved
from vitkit.inference.runtime import Predictor, build_predictor
from vitkit.models import create_model
from vitkit.models.lora import LoraConfig, apply_lora
from vitkit.utils.files import scratch_dir

TINY = dict(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5)  # the tests' ViT
#: inductor's host code around the compiled kernels, as config each compile runs under (patched around the first
#: calls, inside which FrozenCompiled patches `freezing`): Python calling one shared library per kernel; C++ with
#: the kernels in its own library; C++ with the kernels built as an object of their own, linked into it
WRAPPERS = {"python": {"cpp_wrapper": False},
            "cpp": {"cpp_wrapper": True, "cpp_wrapper_build_separate": False},
            "cpp_separate": {"cpp_wrapper": True, "cpp_wrapper_build_separate": True}}
CACHE_COUNTERS = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")


def make_model(name: str, variant: str) -> torch.nn.Module:
    """`name` ("tiny": the tests' 32 px ViT) with random weights (head N(0, 0.02²): the zero head would make every
    logit 0), with LoRA on every projection and token merging for "lora_tome" (the composition matrix's compile
    cell)."""
    torch.manual_seed(0)
    model = create_model("vit", **TINY) if name == "tiny" else create_model(name)
    torch.nn.init.normal_(model.head.weight, std=0.02)
    if variant == "lora_tome":
        apply_lora(model, LoraConfig(rank=4, alpha=8.0, targets=("q", "k", "v", "proj", "fc1", "fc2")))
        for name, p in model.named_parameters():  # LoRA's B starts at zero: random, so that the adapters count
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
        model.set_token_merging(max(1, model.config.num_patches // 8))
    return model.eval()


def compile_cost(pred: Predictor, xs: dict[int, torch.Tensor], wrapper: str, cache: Path) -> dict[str, float | int]:
    """The first call of `pred` at every batch of `xs` (each compiles a graph) with inductor's `wrapper` and its
    cache in `cache`: CPU and wall seconds, C++ builds (shared libraries written), the FX graph cache's counters."""
    inductor = torch._dynamo.utils.counters["inductor"]
    before = {k: inductor[k] for k in CACHE_COUNTERS}
    libs = set(cache.rglob("*.so"))
    t0, c0 = time.perf_counter(), cpu_s()
    with temporary_cache_dir(str(cache)), inductor_config.patch(WRAPPERS[wrapper]):
        for x in xs.values():
            pred(x)
    return {"cpu_s": round(cpu_s() - c0, 1), "wall_s": round(time.perf_counter() - t0, 1),
            "cxx_builds": len(set(cache.rglob("*.so")) - libs),
            **{k: torch._dynamo.utils.counters["inductor"][k] - before[k] for k in CACHE_COUNTERS}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_s16", help="a create_model name, or tiny (32 px, width 32, depth 2)")
    ap.add_argument("--variant", default="plain", choices=["plain", "lora_tome"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-autocast", "bf16"])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 1], help="the first compiles the dynamic graph")
    ap.add_argument("--wrappers", nargs="+", default=list(WRAPPERS), choices=list(WRAPPERS), help="compile order")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1, help="predictor calls per timed sample (many for a tiny model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_cpp_wrapper.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = make_model(args.model, args.variant)
    xs = {b: torch.randn(b, model.config.in_chans, *model.config.img_size) for b in args.batches}
    with torch.inference_mode():
        want = {b: model(x) for b, x in xs.items()}
    torch._inductor.cpu_vec_isa.valid_vec_isa_list()  # inductor's one-off check of the CPU (a C++ build), not timed
    load = [round(v, 1) for v in os.getloadavg()]
    root = scratch_dir("vitkit-cpp-wrapper-")  # the cache folders, removed at exit
    nets = {"eager": build_predictor(model, args.precision, "torch")}
    compiles: dict[str, dict[str, object]] = {}
    for phase in ("cold", "warm"):  # each wrapper's cold compile, then each one's warm recompile
        for name in args.wrappers:
            pred = build_predictor(model, args.precision, "torch", compile=True)
            compiles.setdefault(name, {})[phase] = compile_cost(pred, xs, name, root / name)
            nets.setdefault(name, pred)  # the cold one serves
    agree = {f"{name} b{b}": agreement(net(x), want[b]) for name, net in nets.items() for b, x in xs.items()}

    def call(net: Predictor, x: torch.Tensor):  # noqa: ANN202
        def run() -> None:
            for _ in range(args.calls):
                net(x)
        return run

    rows, graphs = [], torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for b, x in xs.items():
        times = time_interleaved({k: call(v, x) for k, v in nets.items()}, warmup=1, repeats=args.repeats)
        for name, t in times.items():
            rows.append({"path": name, "batch": b, "median_s_per_call": float(f"{t.median / args.calls:.3g}"),
                         "spread": round(t.spread, 2), "img_per_s": round(b * args.calls / t.median, 1),
                         "vs_eager": round(times["eager"].median / t.median, 3),
                         "vs_python": round(times["python"].median / t.median, 3) if "python" in times else None})
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs, "a graph was compiled while timing"
    record(args.out, load, {"model": args.model, "variant": args.variant, "precision": args.precision,
                            "threads": args.threads, "repeats": args.repeats, "calls": args.calls,
                            "compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"),
                            "compiles": compiles, "agreement_with_eager_model": agree, "rows": rows})


if __name__ == "__main__":
    main()
