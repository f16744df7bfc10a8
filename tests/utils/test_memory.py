"""vitkit.utils.memory: with glibc's mmap threshold fixed, freed activation-sized tensors go back to the OS (the
process's RSS falls), where glibc's own rising threshold keeps them resident (BENCHMARKS.md, "Fine-tuning on a
laptop"). Each case runs in a process of its own: the allocator's state is per process (forked from the suite's
preloaded interpreter, tests.helpers.Preloaded: an interpreter's allocator state after importing torch)."""

from __future__ import annotations

import json
import sys

import pytest

from vitkit.utils.memory import mmap_large_blocks

SCRIPT = """
import json, os, sys, traceback, torch
from vitkit.utils.memory import mmap_large_blocks
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
for mode in sys.argv[1:]:
    # each mode in a process of its own, forked from this one: the allocator's state of an interpreter after these
    # imports
    if os.fork() == 0:
        try:
            said = mmap_large_blocks() if mode == "fixed" else ""
            big = torch.ones(4 << 20)  # a 16 MiB block, mmapped, then freed: glibc's own threshold rises to its size
            del big
            before = rss()
            keep = [torch.ones(2 << 20) for _ in range(32)]  # 32 activation-sized (8 MiB) tensors, all but one freed
            last = keep.pop()
            del keep
            print(json.dumps({"mode": mode, "said": said, "retained_mb": rss() - before}), flush=True)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    if os.wait()[1] != 0:
        sys.exit(f"the {mode} run failed")
"""


def _retained(preloaded, *modes: str) -> list[dict]:  # noqa: ANN001
    out = preloaded.run(SCRIPT, *modes, preload=["torch", "vitkit.utils.memory"])
    assert out.returncode == 0, out.stderr[-2000:]
    runs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in runs] == list(modes), out.stdout + out.stderr
    return runs


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_tensors_return_to_the_os_once_the_threshold_is_fixed(preloaded) -> None:  # noqa: ANN001
    default, fixed = _retained(preloaded, "default", "fixed")
    if "not glibc" in fixed["said"]:
        pytest.skip(fixed["said"])
    assert "blocks >= 4096 KiB are mmapped" in fixed["said"]
    assert default["retained_mb"] > 200, default  # glibc's default keeps the freed 31 x 8 MiB resident
    assert fixed["retained_mb"] < 16, fixed  # only the tensor still alive


def test_a_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number of bytes >= 4096, got 100"):
        mmap_large_blocks(100)
