"""The machine a benchmark ran on, and its measured matrix-multiply peak (the roofline)."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

import torch

from vitkit.bench.timing import time_interleaved
from vitkit.utils.hardware import cpu_flags, cpu_has_native_bf16

__all__ = ["cpu_flags", "cpu_has_native_bf16", "int8_matmul_peak", "machine_info", "matmul_peak", "resolve_device"]

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: str = "auto") -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but torch.cuda.is_available() is False")
    return dev


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device | str = "cpu") -> dict[str, str]:
    """Date, CPU model and cores, threads, GPU, torch version: the header of every result."""
    dev = torch.device(device)
    flags = cpu_flags()
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags]
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "threads": str(torch.get_num_threads()),
        "cpu_isa": " ".join(isa) or "unknown",
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "none",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def matmul_peak(
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    sizes: tuple[int, ...] = (1024, 2048),
    repeats: int = 5,
) -> float:
    """Best FLOP/s of an n x n x n matmul over `sizes` and repeats, in `dtype` on `device`.

    This is the roofline for ViT: nearly all of its work is large matmuls. The fastest repeat is
    taken (not the median): a peak measured low, e.g. while the thread pool or clock is still
    ramping up, would let a model appear to run above its roofline.
    """
    best = 0.0
    gen = torch.Generator(device="cpu").manual_seed(0)
    for n in sizes:
        a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        t = time_interleaved({"mm": lambda a=a, b=b: a @ b}, warmup=3, repeats=repeats, device=device)["mm"]
        best = max(best, 2 * n**3 / min(t.samples))
    return best


INT8_BACKENDS = ("onnxruntime", "torch")


def _ort_matmul_integer(n: int, threads: int) -> tuple[object, object, object]:
    """An onnxruntime session of one n x n x n MatMulInteger (uint8 activations x int8 weights -> int32, the layout
    onnxruntime's own dynamic and static int8 graphs use on x86), its input A and its constant B (numpy). A keeps to
    7 bits (0..127): AVX2's u8 x s8 multiply-add saturates a pair's sum at int16, so full-range bytes would not give
    the exact product (the same speed either way)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    a = rng.integers(0, 128, (n, n), dtype=np.uint8)
    b = rng.integers(-128, 128, (n, n), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "int8_roof",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [n, n])], [helper.make_tensor_value_info(
            "Y", TensorProto.INT32, [n, n])], initializer=[onnx.numpy_helper.from_array(b, "B")])
    opset = [helper.make_opsetid("", 13)]  # the oldest IR version that holds the opset, not onnx's newest: an
    # onnxruntime older than the installed onnx refuses a newer IR ("Unsupported model IR version: 14, max 13")
    model = helper.make_model(graph, opset_imports=opset, ir_version=helper.find_min_ir_version_for(opset))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess, a, b


def int8_matmul_peak(backend: str = "onnxruntime", sizes: tuple[int, ...] = (1024, 2048), repeats: int = 5) -> float:
    """Best int8 op/s (2 per multiply-add, int32 accumulation) of an n x n x n integer matmul over `sizes` and
    repeats, on the CPU, with torch's thread count: the int8 roofline, as `matmul_peak` is fp32's / bf16's.

    `onnxruntime`: its MatMulInteger (u8 x s8, MLAS: VNNI / AMX where the CPU has them, else AVX2's 16-bit
    multiply-adds) — the kernel under onnxruntime's int8 graphs. `torch`: `torch._int_mm` (on the CPU a plain
    loop in the torch builds seen so far: a floor, not a roof). The fastest repeat is taken, as in `matmul_peak`."""
    if backend not in INT8_BACKENDS:
        raise ValueError(f"unknown int8 matmul backend {backend!r}; choose one of {', '.join(INT8_BACKENDS)}")
    best = 0.0
    for n in sizes:
        if backend == "onnxruntime":
            try:
                sess, a, _ = _ort_matmul_integer(n, torch.get_num_threads())
            except ImportError as e:
                raise ValueError(f"the onnxruntime int8 roof needs onnx and onnxruntime (pip install "
                                 f"'vitkit[onnx]'): {e}") from e
            fn = lambda sess=sess, a=a: sess.run(None, {"A": a})  # noqa: E731
        else:
            gen = torch.Generator().manual_seed(0)
            a = torch.randint(-128, 128, (n, n), generator=gen, dtype=torch.int8)
            b = torch.randint(-128, 128, (n, n), generator=gen, dtype=torch.int8)
            fn = lambda a=a, b=b: torch._int_mm(a, b)  # noqa: E731
        t = time_interleaved({"mm": fn}, warmup=2, repeats=repeats)["mm"]
        best = max(best, 2 * n**3 / min(t.samples))
    return best
