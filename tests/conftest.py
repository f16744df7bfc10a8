"""The suite's settings for every pytest process and the CLI processes the tests start, and its shared fixtures
(tests/suite_fixtures.py) in each process that runs tests."""

import os

import pytest

# One intra-op thread, in the processes that run tests (tests/suite_fixtures.py) and in the CLI processes the tests
# start (they inherit the environment): the suite's models take microseconds per op, so a second thread only waits for
# a scheduler slice (on a busy 2-core machine the demo's 120 steps took 400 s on two threads, about 80 s on one), and
# `make test` runs one pytest-xdist worker per core.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"
# torch.compile / AOTInductor compile in this process, not in a pool of compile-worker processes: inductor starts one
# per core for each compile (each imports torch), ~28 CPU s per compiled test with a warm kernel cache, and on 2
# cores beside a second pytest-xdist worker they only compete with the tests (read by torch._inductor.config, which
# the first compile imports; the CLI processes the tests start inherit it too).
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
# The CPU's vector extensions (AVX2 / AVX-512, read from the CPU's flags) taken as buildable: inductor would otherwise
# prove it once per cache folder by a C++ build of a test kernel (~4 CPU s on a fresh machine, as CI's) and once per
# compiling process by a Python subprocess that loads it; the kernels and their flags are the same either way.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's fixtures (tests/suite_fixtures.py, which imports torch and vitkit) where tests run: a run
    without pytest-xdist, or one of its workers; not in its controller, which only hands tests out (importing them there
    cost ~2.5 CPU s on one core before the workers were started, each of which imports them again). The controller
    is where xdist hands tests out: a distribution mode with workers to start (`-n`, `--tx`), not `--collect-only`."""
    distributes = config.getoption("dist", "no") != "no" and config.getoption("tx", None) \
        and not config.getoption("collectonly")
    if distributes and not hasattr(config, "workerinput"):
        return
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: tests/suite_workers.py, before torch is imported
        config.pluginmanager.import_plugin("tests.suite_workers")
    config.pluginmanager.import_plugin("tests.suite_fixtures")
