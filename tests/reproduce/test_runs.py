"""The worker pool of `Workbench(jobs=...)`: how its workers start (forked from a fork server that loaded the training
code once, or spawned), which thread counts and environment they train with. Their end with a stopped or killed
parent: test_reproduce_interrupt.py; their numbers against sequential runs: test_crossover.py, test_tuning.py."""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from vitkit.reproduce import runs
from vitkit.reproduce.plan import SMOKE
from vitkit.reproduce.runs import Workbench

PROBE_ENV = "VITKIT_TEST_POOL_PROBE"


def _worker_state(_: int) -> dict[str, Any]:
    parent = multiprocessing.parent_process()
    return {"omp": os.environ.get("OMP_NUM_THREADS"), "probe": os.environ.get(PROBE_ENV),
            "threads": torch.get_num_threads(), "cuda": torch.cuda.is_initialized(),
            "ppid": os.getppid(), "parent": parent.pid if parent else None,
            "parent_threads": len(os.listdir(f"/proc/{os.getppid()}/task")),  # the fork server's, at this moment
            "trainer_loaded": "vitkit.train.engine" in sys.modules, "dynamo_loaded": "torch._dynamo" in sys.modules}


def _pool_states(threads: int) -> tuple[str, list[dict[str, Any]]]:
    ctx = runs._pool_context(threads)
    with runs._thread_env(threads), ProcessPoolExecutor(2, mp_context=ctx, initializer=runs._worker_start,
                                                       initargs=(dict(os.environ),)) as pool:
        return ctx.get_start_method(), list(pool.map(_worker_state, range(2)))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or "forkserver" not in multiprocessing.get_all_start_methods(),
                    reason="reads the fork server's threads from /proc")
def test_workers_fork_from_a_server_with_their_pools_threads_and_the_parents_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = Workbench(tmp_path, SMOKE, progress=False, jobs=2).threads  # as the suite's other pools: one server
    method, got = _pool_states(threads)
    assert method == "forkserver"
    server = runs._SERVER["pid"]
    for w in got:
        assert w["ppid"] == server and w["parent"] == os.getpid()  # forked by the server, for this process
        # the server loaded the training code and what an optimizer imports when built: the worker imports neither
        assert w["trainer_loaded"] and w["dynamo_loaded"]
        # the server holds no CUDA context and no OpenMP (or other) threads that a fork could not copy
        assert not w["cuda"] and w["parent_threads"] == 1
        assert w["omp"] == str(threads) and w["threads"] == threads
    # the environment a worker reads is the parent's when it asks for the worker, not the server's from its start
    monkeypatch.setenv(PROBE_ENV, "set after the server started")
    method, got = _pool_states(threads)
    assert method == "forkserver" and runs._SERVER["pid"] == server  # the same server
    assert [w["probe"] for w in got] == ["set after the server started"] * 2
    # a pool with another thread count must not fork from a server whose OpenMP / BLAS read `threads`: its workers
    # are spawned (and read their thread counts from `_thread_env`, as before the fork server)
    assert runs._pool_context(threads + 1).get_start_method() == "spawn"
    assert runs._pool_context(threads).get_start_method() == "forkserver"
    assert runs._SERVER == {"pid": server, "threads": threads}


def test_a_fork_server_that_cannot_start_leaves_the_pool_spawned(monkeypatch) -> None:  # noqa: ANN001
    """Where the fork server's socket cannot be made (a TMPDIR path longer than AF_UNIX allows) the pool spawns its
    workers, as before fork servers, instead of failing with the OSError."""
    def refuse() -> None:
        raise OSError("AF_UNIX path too long")

    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", refuse)
    monkeypatch.setattr(runs, "_SERVER", {})
    assert runs._pool_context(1).get_start_method() == "spawn"
