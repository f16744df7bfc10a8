"""Per-test CPU seconds of the test suite (issue 55; benchmarks/results/suite_durations.md): a pytest plugin, and
a summary of what it wrote.

On a loaded machine wall seconds say little; the CPU seconds a test spends (user + sys of its process and of the
subprocesses it waited for: `getrusage` SELF + CHILDREN around each setup / call / teardown phase) are what a quiet
core spends on it, so they add up to the worker-seconds of a quiet `make test` (one torch thread per process).
A subprocess that is reaped late (a loader worker, inductor's compile pool) is counted in the phase that reaps it.

    PYTHONPATH=benchmarks CPUTIME_OUT=/tmp/cpu python -m pytest -p suite_cputime -n 2 ...   # one JSON line per phase
    python benchmarks/suite_cputime.py /tmp/cpu [--top 40]      # totals, per file, the costliest tests

Each xdist worker writes its own file (`gw0.jsonl`, ...; `main.jsonl` without xdist); `-p` and the environment reach
the workers. A line: {"id": node id, "phase": setup|call|teardown|collect, "self": s, "child": s, "wall": s, "t": s}.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Any

import pytest

OUT = os.environ.get("CPUTIME_OUT", "/tmp/suite_cputime")
_file: IO[str] | None = None


def _cpu() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def _write(record: dict[str, Any]) -> None:
    global _file
    if _file is None:
        os.makedirs(OUT, exist_ok=True)
        _file = open(os.path.join(OUT, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"), "a")  # noqa: SIM115
    _file.write(json.dumps(record) + "\n")
    _file.flush()


def _phase(phase: str) -> Callable[..., Generator[None, None, None]]:
    @pytest.hookimpl(hookwrapper=True)
    def hook(item: pytest.Item, *args: Any, **kwargs: Any) -> Generator[None, None, None]:
        s0, c0 = _cpu()
        w0 = time.perf_counter()
        yield
        s1, c1 = _cpu()
        w1 = time.perf_counter()
        _write({"id": item.nodeid, "phase": phase, "self": round(s1 - s0, 3), "child": round(c1 - c0, 3),
                "wall": round(w1 - w0, 3), "t": round(w1, 3)})

    return hook


pytest_runtest_setup = _phase("setup")
pytest_runtest_call = _phase("call")
pytest_runtest_teardown = _phase("teardown")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The process's CPU seconds up to the end of collection (interpreter start-up, imports, collection)."""
    s, c = _cpu()
    _write({"id": "<collection>", "phase": "collect", "self": round(s, 3), "child": round(c, 3), "wall": 0,
            "t": time.perf_counter()})


def per_test(folder: Path) -> tuple[dict[str, list[float]], list[float]]:
    """({node id: [self, child, wall] summed over its phases}, [each worker's collection CPU s])."""
    tests: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    collect = []
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r["phase"] == "collect":
                collect.append(r["self"] + r["child"])
                continue
            t = tests[r["id"]]
            t[0] += r["self"]
            t[1] += r["child"]
            t[2] += r["wall"]
    return dict(tests), collect


def main() -> None:
    p = argparse.ArgumentParser(description="Summarise the plugin's JSON lines: totals, per file, the costliest.")
    p.add_argument("folder", type=Path)
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args()
    tests, collect = per_test(a.folder)
    cpu = {k: v[0] + v[1] for k, v in tests.items()}
    print(f"{len(tests)} tests, {sum(cpu.values()):.1f} CPU s (of which subprocesses "
          f"{sum(v[1] for v in tests.values()):.1f}); collection {' + '.join(f'{c:.1f}' for c in collect)} CPU s")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for k, v in cpu.items():
        files[k.split("::")[0]][0] += v
        files[k.split("::")[0]][1] += 1
    print("\n| file | tests | CPU s |\n|---|---:|---:|")
    for f, (v, n) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        print(f"| `{f}` | {n} | {v:.1f} |")
    print("\n| # | test | CPU s | of which subprocesses | wall s |\n|---:|---|---:|---:|---:|")
    for i, (k, v) in enumerate(sorted(tests.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:a.top], 1):
        print(f"| {i} | `{k.removeprefix('tests/')}` | {v[0] + v[1]:.1f} | {v[1]:.1f} | {v[2]:.1f} |")


if __name__ == "__main__":
    main()
