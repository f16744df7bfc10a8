"""The machine a benchmark ran on, and its measured matrix-multiply peak (the roofline)."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

import torch

from vitkit.bench.timing import time_interleaved
from vitkit.utils.hardware import cpu_flags, cpu_has_native_bf16

__all__ = ["cpu_flags", "cpu_has_native_bf16", "machine_info", "matmul_peak", "resolve_device"]

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
