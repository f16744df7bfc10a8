"""vitkit.utils.memory: with glibc's mmap threshold fixed, freed activation-sized tensors go back to the OS (the
process's RSS falls), where glibc's own rising threshold keeps them resident (BENCHMARKS.md, "Fine-tuning on a
laptop"). Each case runs in a fresh process: the allocator's state is per process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vitkit.utils.memory import mmap_large_blocks

SCRIPT = """
import json, sys, torch
from vitkit.utils.memory import mmap_large_blocks
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
said = mmap_large_blocks() if sys.argv[1] == "fixed" else ""
big = torch.ones(4 << 20)  # a 16 MiB block, mmapped, then freed: glibc's own threshold rises to its size
del big
before = rss()
keep = [torch.ones(2 << 20) for _ in range(32)]  # 32 activation-sized (8 MiB) tensors, then all but the last freed
last = keep.pop()
del keep
print(json.dumps({"said": said, "retained_mb": rss() - before}))
"""


def _retained(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_tensors_return_to_the_os_once_the_threshold_is_fixed() -> None:
    default, fixed = _retained("default"), _retained("fixed")
    if "not glibc" in fixed["said"]:
        pytest.skip(fixed["said"])
    assert "blocks >= 4096 KiB are mmapped" in fixed["said"]
    assert default["retained_mb"] > 200, default  # glibc's default keeps the freed 31 x 8 MiB resident
    assert fixed["retained_mb"] < 16, fixed  # only the tensor still alive


def test_a_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number of bytes >= 4096, got 100"):
        mmap_large_blocks(100)
