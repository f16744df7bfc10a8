"""Timing and memory harness: warm-up, interleaved repeats, medians; peak memory of one call."""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# the most a timing run may ask for, checked before any work: a batch of 10^7 images reached the allocator, 10^9
# repeats ran for days (`vitkit bench`, `export --bench`)
MAX_BATCH, MAX_REPEATS = 4096, 1000


@dataclass
class Timing:
    """Wall-clock seconds per call over the timed repeats."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.samples) - min(self.samples)) / self.median


MAX_SPREAD = 0.25  # timings whose repeats disagree by more than this are flagged unreliable


def unreliable(t: Timing, max_spread: float = MAX_SPREAD) -> str:
    """Why a timing cannot be trusted ('' when it can): repeats that disagree by more than `max_spread`."""
    return f"repeats spread {100 * t.spread:.0f}% > {100 * max_spread:.0f}%" if t.spread > max_spread else ""


def synchronize(device: torch.device | str) -> None:
    """Wait for queued device work (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    warmup: int = 1,
    repeats: int = 5,
    device: torch.device | str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Timing]:
    """Time each callable `repeats` times, round-robin, after `warmup` untimed calls each.

    Interleaving (a, b, a, b, ...) exposes every candidate to the same drift of a shared machine,
    so their ratio is fairer than timing one after the other.
    """
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        synchronize(device)
        if progress:
            progress(f"warm {name}")
    out = {name: Timing() for name in fns}
    for r in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            out[name].samples.append(time.perf_counter() - t0)
        if progress:
            progress(f"repeat {r + 1}/{repeats}")
    return out


class _LiveTensorBytes(TorchDispatchMode):
    """Track bytes of tensor storages created inside the mode and still alive, and their peak."""

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: set[int] = {t.untyped_storage()._cdata for t in ignore}

    def _free(self, key: int, nbytes: int) -> None:
        self.current -= nbytes
        self._live.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self._live:
                    self._live.add(key)
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(storage, self._free, key, storage.nbytes())
        return out


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s._cdata] = s.nbytes()
    return sum(seen.values())


def peak_memory(fn: Callable[[], Any], resident: Iterable[torch.Tensor], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory during `fn()`: the `resident` tensors (weights, gradients,
    optimizer state, inputs) plus the peak of tensors allocated by the call.

    On CUDA this is the allocator's `max_memory_allocated`; on CPU, where PyTorch keeps no such
    counter, a dispatch mode adds up live storages (eager mode only; excludes allocator slack).
    """
    resident = list(resident)
    dev = torch.device(device)
    if dev.type == "cuda":
        synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        fn()
        synchronize(dev)
        return int(torch.cuda.max_memory_allocated(dev))
    with _LiveTensorBytes(ignore=resident) as tracker:
        fn()
    return storage_bytes(resident) + tracker.peak
