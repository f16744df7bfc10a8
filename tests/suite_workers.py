"""What each pytest-xdist worker does for the run as a whole, not for a test (registered by tests/conftest.py in the
workers only, before tests/suite_fixtures.py imports torch): the workers share the bytecode each would compile, and
a worker's process ends without the interpreter's teardown once pytest is done with it.

Measured (benchmarks/results/suite_durations.md, session 25; loaded 2-core machine): pytest's assertion rewriting of
the test modules costs ~4 CPU s per process on a fresh clone (plain compilation of the same files 0.3 s), and both
workers rewrote every module at the same moment, neither finding the other's cache; and a worker that has imported
torch, transformers, OpenVINO, NNCF and onnxruntime spends ~3-4 s after its last atexit handler in the interpreter's
teardown (freeing every module's objects), which the controller waits for before it reports.
"""

from __future__ import annotations

import atexit
import compileall
import fnmatch
import importlib.util
import logging
import os
import sys
import weakref
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "vitkit"


def my_share(files: list[Path], worker: int, workers: int) -> list[Path]:
    """Worker `worker`'s share of `files` (every `workers`-th, from its index on): the shares are disjoint and cover
    `files`."""
    return sorted(files)[worker::workers]


def rewritten_test_modules(config: pytest.Config, tests: Path = TESTS, roots: list[Path] | None = None) -> list[Path]:
    """The files pytest rewrites the asserts of, under `tests`: conftest.py files, and those `python_files` matches
    under `roots` (default: the paths this run collects, `config.args`: a run of one file rewrites that file)."""
    patterns = config.getini("python_files")
    if roots is None:
        roots = [Path(config.invocation_params.dir, a.split("::")[0]).resolve() for a in config.args]
    return [p for p in tests.rglob("*.py")
            if p.name == "conftest.py" or (any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
                                           and any(p == r or r in p.parents for r in roots))]


def prewrite_bytecode(config: pytest.Config, worker: int, workers: int, tests: Path = TESTS,
                      package: Path = PACKAGE, roots: list[Path] | None = None) -> int:
    """Write this worker's share of the bytecode caches that collection reads: the test modules' assertion-rewritten
    code (pytest's own functions and file names, written atomically as pytest writes them) and vitkit's compiled
    modules (`tests`, `package`, `roots`: `rewritten_test_modules`). A worker then finds the other workers' shares already written when it collects. Nothing is written
    where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), nor where this pytest lacks those functions (then
    each worker rewrites every module as before). Returns how many caches it wrote."""
    if sys.dont_write_bytecode:
        return 0
    from _pytest.assertion import rewrite  # pytest's rewriting, as its import hook runs it

    try:
        state = config.stash[rewrite.assertstate_key]
        pyc_tail, read, rewrite_test, write = rewrite.PYC_TAIL, rewrite._read_pyc, rewrite._rewrite_test, \
            rewrite._write_pyc
    except (AttributeError, KeyError):  # another pytest's internals, or no rewriting (--assert=plain: no state)
        return 0
    written = 0
    for fn in my_share(rewritten_test_modules(config, tests, roots), worker, workers):
        cache = rewrite.get_cache_dir(fn)
        pyc = cache / (fn.name[:-3] + pyc_tail)
        if read(fn, pyc) is None and rewrite.try_makedirs(cache):
            source_hash, co = rewrite_test(fn, config)
            written += bool(write(state, co, source_hash, pyc))
    for fn in my_share(list(package.rglob("*.py")), worker, workers):
        pyc = Path(importlib.util.cache_from_source(str(fn)))
        before = pyc.stat().st_mtime_ns if pyc.exists() else None
        compileall.compile_file(str(fn), quiet=2)  # (skips a file whose bytecode is fresh)
        written += pyc.exists() and pyc.stat().st_mtime_ns != before
    return written


def _exit_without_teardown() -> None:
    """The last atexit handler of a worker (registered before torch and the rest registered theirs, so it runs after
    them): what the skipped handlers of before it would do (weakref finalizers marked for exit, such as a
    TemporaryDirectory's removal; logging's flush), then the process ends without the interpreter's teardown."""
    if getattr(weakref.finalize, "_registered_with_atexit", False):
        weakref.finalize._exitfunc()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    atexit.register(_exit_without_teardown)
    wid = str(workerinput["workerid"]).removeprefix("gw")  # xdist names its workers gw0, gw1, ...
    if wid.isdigit():
        prewrite_bytecode(config, int(wid), int(workerinput["workercount"]))
