"""Options shared by the commands that run a model for inference (`predict`, `eval`): precision, runtime,
compilation, threads; and the `Predictor` they describe, with each automatic choice printed."""

from __future__ import annotations

import argparse
import sys

from torch import nn

from vitkit.runtime import (
    PRECISIONS,
    RUNTIMES,
    SUPPORTED,
    Predictor,
    build_predictor,
    resolve_precision,
    resolve_runtime,
)


def add_runtime_arguments(p: argparse.ArgumentParser, default_runtime: str | None, default_precision: str) -> None:
    """`default_runtime=None`: torch (the reference numbers), except for int8, which only onnxruntime runs."""
    p.add_argument("--precision", default=default_precision, choices=PRECISIONS,
                   help=f"auto: bf16 where the CPU has AVX512_BF16 / AMX or the GPU supports it, else fp32; int8: "
                   f"dynamic quantisation on onnxruntime (default: {default_precision})")
    p.add_argument("--runtime", default=default_runtime, choices=RUNTIMES,
                   help="torch, onnxruntime or openvino; auto: the fastest installed CPU runtime for the precision "
                   "(BENCHMARKS.md), torch for small jobs and on a GPU (default: "
                   f"{default_runtime or 'torch; onnxruntime for int8'})")
    p.add_argument("--compile", action="store_true",
                   help="torch runtime: torch.compile with inductor, weights frozen (seconds to compile)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's, all cores)")


def predictor_for(model: nn.Module, args: argparse.Namespace, n_images: int | None = None) -> Predictor:
    """`model` as the Predictor the options ask for; what `auto` chose, and why, goes to stderr."""
    device = getattr(args, "device", "cpu")
    precision, why = resolve_precision(args.precision, device)
    asked = args.runtime or ("auto" if precision == "int8" else "torch")
    runtime, rwhy = resolve_runtime(asked, precision, device, n_images=n_images)
    if asked == "auto" and args.compile and runtime != "torch":
        runtime, rwhy = "torch", "--compile asks for torch.compile"
    from vitkit.utils.hardware import set_threads

    set_threads(args.threads)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        net = build_predictor(model, precision, runtime, args.compile, device, args.threads, log=log)
    except Exception as e:  # noqa: BLE001 - an export or graph compiler refusing this model, reported below
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if asked != "auto" or runtime == "torch" or precision not in SUPPORTED["torch"]:
            raise ValueError(f"the {runtime} runtime could not run this model ({type(e).__name__}: {reason})") from e
        print(f"note: {runtime} could not run this model ({reason}); running it in torch", file=sys.stderr)
        runtime, rwhy = "torch", f"{runtime} failed on this model"
        net = build_predictor(model, precision, runtime, args.compile, device, args.threads, log=log)
    print(f"precision: {precision} ({why}); runtime: {net.description} ({rwhy})", file=sys.stderr)
    return net
