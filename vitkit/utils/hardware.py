"""What this machine's processor can do, for choices made on the user's behalf (and stated when made)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> set[str]:
    """The CPU feature flags from /proc/cpuinfo (empty where that file does not exist)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_native_bf16(flags: set[str] | None = None) -> bool:
    """True when the CPU has bf16 matrix instructions (AVX512_BF16 or AMX-BF16).

    Without them oneDNN emulates bf16 GEMMs by converting to fp32, which is slower than fp32.
    """
    return bool((cpu_flags() if flags is None else flags) & NATIVE_BF16_FLAGS)


#: the CPU kinds the runtime speed table (vitkit/inference/runtime_speeds.json) has rows for, fastest units first
ISA_KINDS = (("amx", frozenset({"amx_int8", "amx_bf16"})), ("avx512_bf16", frozenset({"avx512_bf16"})),
             ("avx512_vnni", frozenset({"avx512_vnni"})), ("avx2", frozenset({"avx2"})))


def isa_kind(flags: set[str] | None = None) -> str:
    """This CPU's kind for the runtime speed table: its best matrix units (amx, avx512_bf16, avx512_vnni, avx2), or
    "other"."""
    have = cpu_flags() if flags is None else flags
    return next((name for name, need in ISA_KINDS if have & need), "other")


def set_threads(n: int | None, flag: str = "--threads") -> None:
    """torch's intra-op thread count, `n` between 1 and this machine's cores (a huge count makes OpenMP crash);
    None keeps torch's choice. A ValueError names `flag` and the bound."""
    if n is None:
        return
    import torch

    cores = os.cpu_count() or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cores:
        raise ValueError(f"{flag} must be a whole number from 1 to {cores} (this machine's cores), got {n!r}")
    torch.set_num_threads(n)


def fused_adam_ok(params: Iterable) -> bool:
    """Whether torch's fused Adam(W) can update `params` (tensors, or param groups {"params": [...]}): every one a
    plain tensor (not an FSDP DTensor shard) on a CUDA device, of a floating dtype the fused kernel updates."""
    import torch  # as set_threads: this module is read before torch is needed

    dtypes = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    return bool(flat) and all(type(p.data) is torch.Tensor and p.is_cuda and p.dtype in dtypes for p in flat)


def manual_seed(seed: int) -> None:
    """`torch.manual_seed(seed)` where an accelerator's generator can be in use (its backend already initialised in
    this process, or MPS); elsewhere the CPU generator's seed alone: there torch.manual_seed also queues CUDA's, XPU's
    and MTIA's seeds for an initialisation that may never come, each with the caller's stack formatted as text (~1 ms
    a call from a deep stack, once per training step). Read without initialising anything: asking
    `torch.cuda.is_available()` starts CUDA's driver in this process (which then cannot fork)."""
    import torch  # as set_threads

    if _accelerator_initialised():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(int(seed))


def _accelerator_initialised() -> bool:
    import torch  # as set_threads

    lazy = (getattr(torch, name, None) for name in ("cuda", "xpu", "mtia"))
    return any(m is not None and hasattr(m, "is_initialized") and m.is_initialized() for m in lazy) or \
        torch.backends.mps.is_available()
