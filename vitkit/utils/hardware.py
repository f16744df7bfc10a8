"""What this machine's processor can do, for choices made on the user's behalf (and stated when made)."""

from __future__ import annotations

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
