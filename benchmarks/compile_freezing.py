"""The compiled predictor with its weights frozen (issue 53): `build_predictor(..., compile=True)`, whose graph has
the weights as constants (inductor's freezing: folded, prepacked for oneDNN, bias / activation fused), against the
same compile with the weights as graph inputs (what `--compile` ran before: `torch.compile(options={"freezing":
True})` froze nothing on torch 2.13) and against the eager predictor (`build_predictor(...)`; fp32: the fused CPU
blocks), one precision per run, the three paths interleaved in one process at each batch size (medians, spreads), with each
compile's wall and CPU seconds (run with a fresh TORCHINDUCTOR_CACHE_DIR for cold ones) and each path's agreement
with eager fp32. Appends to benchmarks/results/compile_freezing.json. `--lora R`: the model carries unmerged LoRA
adapters of rank R on q and v (B drawn, so the update is not zero), which the frozen compiled predictor merges for
its graph; `--paths` picks the paths (eager is kept as the reference of `vs_eager`).

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) nice -n 5 python benchmarks/compile_freezing.py --precision fp32
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from compile_dynamic_batch import cpu_s  # the script beside this one

from vitkit.bench.machine import machine_info
from vitkit.bench.timing import time_interleaved
from vitkit.inference.runtime import Predictor, batch_dynamic, build_predictor, inference_model
from vitkit.models import create_model
from vitkit.models.lora import LoraConfig, apply_lora, lora_modules
from vitkit.utils import precision as precision_mod


def agreement(got: torch.Tensor, want: torch.Tensor) -> dict[str, float]:
    """`got` against the reference logits `want`: max |Δlogit| / max |logit| and the top-1 agreement."""
    err = (got - want).abs().max().item() / want.abs().max().item()
    same = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    return {"max_rel_err_vs_eager_fp32": float(f"{err:.2e}"), "top1_agreement": same}


def record(out: str, load: list[float], run: dict[str, object]) -> None:
    """Append `run`, with the machine, the time and the load average (`load` at its start, and now), to the runs of
    the JSON file `out`; print it."""
    run = {"machine": machine_info(), "time_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **run,
           "load_average_start": load, "load_average_end": [round(v, 1) for v in os.getloadavg()]}
    path = Path(out)
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    path.write_text(json.dumps({"runs": [*runs, run]}, indent=2) + "\n")
    print(json.dumps({k: v for k, v in run.items() if k != "machine"}, indent=2))


def unfrozen_predictor(model: torch.nn.Module, precision: str) -> Predictor:
    """The compiled predictor as it was before freezing took effect: the weights are inputs of the graph."""
    prec = precision_mod.get(precision)
    net = torch.compile(inference_model(model, prec, fused=False))

    def run(x: torch.Tensor) -> torch.Tensor:
        with prec.context("cpu"):
            return net(batch_dynamic(x.to(prec.input_dtype))).float()

    return Predictor(run, "torch", precision, f"torch.compile, weights as graph inputs, {precision}", module=net)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_s16")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-autocast", "bf16"])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 1])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lora", type=int, default=0, metavar="R", help="LoRA adapters of rank R on q and v (0: none)")
    ap.add_argument("--paths", nargs="+", default=["compiled_unfrozen", "compiled_frozen"],
                    choices=["compiled_unfrozen", "compiled_frozen"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_freezing.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create_model(args.model).eval()
    torch.nn.init.normal_(model.head.weight, std=0.02)  # the zero-initialised head would make every logit 0
    if args.lora:
        apply_lora(model, LoraConfig(rank=args.lora, alpha=2.0 * args.lora))
        for m in lora_modules(model).values():
            for b in m.lora_B.values():
                torch.nn.init.normal_(b, std=0.02)  # B = 0 at init: an update of zero
    xs = {b: torch.randn(b, model.config.in_chans, *model.config.img_size) for b in args.batches}
    with torch.inference_mode():
        want = {b: model(x) for b, x in xs.items()}
    torch._inductor.cpu_vec_isa.valid_vec_isa_list()  # inductor's one-off check of the CPU (a C++ build), not timed
    load = [round(v, 1) for v in os.getloadavg()]
    paths = {"compiled_unfrozen": lambda: unfrozen_predictor(model, args.precision),
             "compiled_frozen": lambda: build_predictor(model, args.precision, "torch", compile=True)}
    nets = {"eager": build_predictor(model, args.precision, "torch"), **{k: paths[k]() for k in args.paths}}
    compiles, agree = {}, {}
    for name, net in nets.items():
        for b, x in xs.items():  # the first batch compiles the dynamic-batch graph; a batch of 1 compiles its own
            t0, c0 = time.perf_counter(), cpu_s()
            got = net(x)
            if name != "eager":
                compiles[f"{name} b{b}"] = {"wall_s": round(time.perf_counter() - t0, 1),
                                            "cpu_s": round(cpu_s() - c0, 1)}
            agree[f"{name} b{b}"] = agreement(got, want[b])

    def call(net: Predictor, x: torch.Tensor):  # noqa: ANN202
        return lambda: net(x)

    rows = []
    for b, x in xs.items():
        times = time_interleaved({k: call(v, x) for k, v in nets.items()}, warmup=1, repeats=args.repeats)
        for name, t in times.items():
            rows.append({"path": name, "batch": b, "median_s": round(t.median, 4), "spread": round(t.spread, 2),
                         "img_per_s": round(b / t.median, 2), "samples_s": [round(s, 4) for s in t.samples],
                         "vs_eager": round(times["eager"].median / t.median, 3)})
    record(args.out, load, {"model": args.model, "lora_rank": args.lora, "precision": args.precision, "threads": args.threads,
                            "repeats": args.repeats, "descriptions": {k: v.description for k, v in nets.items()},
                            "compiles": compiles, "agreement": agree, "rows": rows})


if __name__ == "__main__":
    main()
