"""The process's resident memory and glibc's malloc: what makes freed activations go back to the OS.

glibc serves a request of at least M_MMAP_THRESHOLD bytes (128 KiB at start) with its own mmap, returned to the OS
on free; but it raises that threshold to the size of each such block freed (up to 32 MiB), after which tensors of a
few MiB to 32 MiB (a ViT-B/16 batch's (B, T, D) activations) come from its heaps, where freed space stays resident
and fragments. Training with gradient checkpointing frees and re-allocates every block's activations, so the
process's peak RSS grows far beyond the tensors alive at any moment. `mmap_large_blocks` fixes the threshold,
which also turns glibc's raising off. Training applies it with gradient checkpointing only, where the memory saved
is worth the time; a full fine-tuning step without checkpointing (its gradients re-allocated every step) pays more
time for a smaller saving. The threshold is 4 MiB: lower, a small model's activations become fresh pages every
step; at 4 MiB they stay on the heap while a ViT-B/16 batch's still go to mmap. The measurements: BENCHMARKS.md,
"Fine-tuning on a laptop".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
# 4 MiB: an fp32 ViT-B/16 block's activations at batch 8 and up are larger (mmapped: 1.23 GiB at batch 32, 1.24 at
# 1 MiB); a digits model's 2 MiB block stream stays on the heap, where at 1 MiB it made a run 1.8x slower
DEFAULT_MMAP_THRESHOLD = 4 << 20


def mmap_large_blocks(threshold: int = DEFAULT_MMAP_THRESHOLD) -> str:
    """Make glibc serve every allocation of at least `threshold` bytes with mmap from now on (freed: back to the
    OS), by mallopt(M_MMAP_THRESHOLD). Returns a line saying what was done, or why nothing was (not glibc)."""
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 4096:
        raise ValueError(f"the mmap threshold must be a whole number of bytes >= 4096, got {threshold!r}")
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no M_MMAP_THRESHOLD)
    except (OSError, AttributeError, TypeError):
        return "malloc: not glibc; its mmap threshold left as it is"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        return f"malloc: glibc refused M_MMAP_THRESHOLD={threshold}; left as it is"
    return (f"malloc: blocks >= {threshold // 1024} KiB are mmapped (glibc M_MMAP_THRESHOLD, fixed), so freed "
            "activations return to the OS")


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (ru_maxrss), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
