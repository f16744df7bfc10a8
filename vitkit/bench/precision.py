"""bf16 paths' accuracy against fp32 (the names are vitkit's one precision vocabulary, `vitkit.utils.precision`).

Two ways to run a model in bf16 (both work on CPU and CUDA):

* `"bf16"`: weights and inputs cast to bfloat16 (`model.to(torch.bfloat16)`): no per-call casts,
  half the weight memory. For inference.
* `"bf16-autocast"`: fp32 weights, matmuls in bf16 under `torch.autocast`; LayerNorm, softmax and
  the loss stay fp32. The training path (fp32 master weights, the optimizer updates fp32).

bf16 is only faster where the hardware multiplies bf16 natively (CUDA GPUs from Ampere on; CPUs with
AVX512_BF16 or AMX). On a CPU without those, oneDNN emulates bf16 and it is slower than fp32 —
see `vitkit.bench.machine.cpu_has_native_bf16`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from vitkit.utils.options import TORCH_PRECISIONS
from vitkit.utils.precision import autocast, get, input_dtype

BENCH_PRECISIONS = TORCH_PRECISIONS  # the torch precisions `vitkit bench` times


@torch.inference_mode()
def predict_logits(
    model: nn.Module, batches: Iterable[torch.Tensor], precision: str = "fp32", device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Logits (fp32) of `model` on every batch, run under `precision`."""
    dtype = input_dtype(precision)
    outs = []
    with autocast(precision, device):
        for x in batches:
            outs.append(model(x.to(device=device, dtype=dtype)).float().cpu())
    return torch.cat(outs)


@dataclass
class Agreement:
    """How a reduced-precision model's predictions compare with the fp32 reference."""

    precision: str
    n: int
    max_abs_logit_diff: float
    mean_abs_logit_diff: float
    top1_agreement: float  # fraction of samples with the same argmax as fp32
    accuracy: float | None = None  # top-1 accuracy against labels, when given
    reference_accuracy: float | None = None


def compare_precisions(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    precisions: Iterable[str] = ("bf16", "bf16-autocast"),
    batch_size: int = 256,
    device: torch.device | str = "cpu",
) -> list[Agreement]:
    """Run `model` on `images` in fp32 and in each of `precisions`; report logit and top-1 agreement.

    `model` is not modified (bf16 weights go to a copy).
    """
    model = model.eval()
    batches = list(images.split(batch_size))
    ref = predict_logits(model, batches, "fp32", device)
    ref_acc = (ref.argmax(-1) == labels).float().mean().item() if labels is not None else None
    out = []
    for p in precisions:
        m = get(p).cast(model)
        logits = predict_logits(m, batches, p, device)
        diff = (logits - ref).abs()
        out.append(
            Agreement(
                precision=p,
                n=len(images),
                max_abs_logit_diff=diff.max().item(),
                mean_abs_logit_diff=diff.mean().item(),
                top1_agreement=(logits.argmax(-1) == ref.argmax(-1)).float().mean().item(),
                accuracy=(logits.argmax(-1) == labels).float().mean().item() if labels is not None else None,
                reference_accuracy=ref_acc,
            )
        )
    return out


#: the serving paths `runtime_runners` builds, as "<runtime> <precision>[ <how>]" (the fp32 torch path first: the
#: reference every ratio is to)
RUNTIME_PATHS = ("torch fp32", "onnxruntime fp32", "onnxruntime int8 dynamic", "onnxruntime int8 static",
                 "openvino fp32", "openvino int8")


def runtime_runners(model: nn.Module, calibration: torch.Tensor, folder: str | Path,
                    paths: Iterable[str] = RUNTIME_PATHS, threads: int | None = None
                    ) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """fp32 images -> fp32 logits for each serving path of `paths` (`RUNTIME_PATHS`), built as `build_predictor`
    builds them: one ONNX export of `model` in `folder`, its OpenVINO conversion, onnxruntime's dynamic and static
    int8 and NNCF's OpenVINO int8 (both static ones calibrated on `calibration`, normalised images)."""
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import (
        export_onnx,
        export_openvino,
        quantize_int8,
        quantize_openvino_int8,
        quantize_static_int8,
    )
    from vitkit.inference.runtime import build_predictor

    folder, paths = Path(folder), list(paths)
    unknown = [p for p in paths if p not in RUNTIME_PATHS]
    if unknown:
        raise ValueError(f"serving path {unknown[0]!r}: one of {', '.join(RUNTIME_PATHS)}")
    threads = threads or torch.get_num_threads()
    onnx = export_onnx(model, folder / "m.onnx")
    files: dict[str, Callable[[], Path]] = {
        "onnxruntime fp32": lambda: onnx,
        "onnxruntime int8 dynamic": lambda: quantize_int8(onnx, folder / "m.dyn.onnx"),
        "onnxruntime int8 static": lambda: quantize_static_int8(onnx, folder / "m.static.onnx", calibration),
        "openvino fp32": lambda: export_openvino(onnx, folder / "m.xml"),
        "openvino int8": lambda: quantize_openvino_int8(onnx, folder / "m.int8.xml", calibration),
    }
    out: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
    for name in paths:
        if name == "torch fp32":
            out[name] = build_predictor(model, "fp32", "torch")
        else:
            out[name] = exported_runner(files[name](), "fp32", threads)
    return out


def runtime_speeds(runners: dict[str, Callable[[torch.Tensor], torch.Tensor]], x: torch.Tensor,
                   repeats: int = 5) -> dict[str, dict[str, float]]:
    """Each runner timed on batch `x`, interleaved (`time_interleaved`): {path: {img_s, spread, vs_torch_fp32}},
    the ratio to the first runner (the fp32 torch reference)."""
    from vitkit.bench.timing import time_interleaved

    t = time_interleaved({n: functools.partial(r, x) for n, r in runners.items()}, warmup=1, repeats=repeats)
    base = next(iter(t.values())).median
    return {n: {"img_s": len(x) / tm.median, "spread": tm.spread, "vs_torch_fp32": base / tm.median}
            for n, tm in t.items()}


def runtime_agreement(runners: dict[str, Callable[[torch.Tensor], torch.Tensor]], images: torch.Tensor,
                      labels: torch.Tensor | None = None, batch_size: int = 64) -> dict[str, dict[str, float]]:
    """Each runner's top-1 agreement with the first (the fp32 torch reference) on `images`, and its accuracy where
    `labels` are given."""
    logits = {n: torch.cat([r(b) for b in images.split(batch_size)]) for n, r in runners.items()}
    ref = next(iter(logits.values())).argmax(-1)
    return {n: {"agreement": (g.argmax(-1) == ref).float().mean().item(),
                **({"accuracy": (g.argmax(-1) == labels).float().mean().item()} if labels is not None else {})}
            for n, g in logits.items()}


def speed_table_rows(speeds: dict[str, dict[str, float]], isa: str, **where: object) -> list[dict[str, object]]:
    """Rows of the runtime speed table (vitkit/inference/runtime_speeds.json, read by `--runtime auto`) from
    `runtime_speeds`' result: one per serving path, keyed by CPU kind (`vitkit.utils.hardware.isa_kind`), runtime,
    precision and whether it is calibrated; `where` (model, batch, machine, date) is recorded with each."""
    rows = []
    for name, s in speeds.items():
        runtime, precision, *how = name.split()
        rows.append({"isa": isa, "runtime": runtime, "precision": precision,
                     "calibrated": bool(how and how[0] == "static") or (runtime == "openvino" and precision == "int8"),
                     "vs_torch_fp32": round(s["vs_torch_fp32"], 3), **where})
    return rows
