"""A stopped `vitkit reproduce --jobs 2` leaves no worker training: SIGTERM stops the workers and exits 143, and a
SIGKILLed parent's workers end themselves (an orphan would go on training a unit that the resumed run trains again
in the same folder, and hold the cores); the workers' fork server and the resource tracker end with them."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import descendants, parent_of, process_state
from vitkit.train.engine import HOLD_ENV

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads child processes from /proc")

# fig4 at the smoke scale, its runs made a million steps long: no unit of the sweep's first round ends before the
# test stops it
CHILD = """
import dataclasses, sys
from vitkit.reproduce import plan
plan.SCALES["smoke"] = dataclasses.replace(plan.SMOKE, steps=1_000_000, eval_every=1_000_000)
from vitkit.cli import main
sys.exit(main(["reproduce", "fig4", "--smoke", "--jobs", "2", "--no-progress", "--out", sys.argv[1]]))
"""


def _workers(pid: int) -> list[int]:
    """The multiprocessing workers among `pid`'s descendants: spawned ones, or those its fork server forked (not the
    server itself, nor its resource tracker)."""
    family = descendants(pid)
    servers = [k for k in family if b"forkserver" in _read(f"/proc/{k}/cmdline") and parent_of(k) == pid]
    return [k for k in family if b"spawn_main" in _read(f"/proc/{k}/cmdline")] + [
        k for s in servers for k in descendants(s)]


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    return process_state(pid) not in ("", "Z")  # a zombie (state Z) has ended; nobody may reap it in a container


def _until(cond, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_reproduction_leaves_no_worker(tmp_path: Path, sig: signal.Signals, preloaded) -> None:  # noqa: ANN001
    out = tmp_path / "r"
    # each worker trains one step of its unit, then holds inside its training loop (engine.HOLD_ENV) until it is
    # stopped: the signal lands mid-training, not after a guessed sleep, and the wait costs no CPU. The reproduction
    # is `python -c CHILD` forked from the suite's preloaded interpreter (torch and the CLI imported once:
    # tests.helpers.Preloaded); its stderr goes to a file, not a pipe (an orphan holding a pipe would block reading
    # it); its workers' fork server is its own, started as a user's run starts it.
    proc = preloaded.start(CHILD, str(out), preload=["vitkit.cli", "vitkit.reproduce.plan"],
                           env={**os.environ, HOLD_ENV: "1"})
    workers: list[int] = []
    family: list[int] = []
    try:
        _until(lambda: len(list(out.glob("pretrain/*/.held-at-1.rank0"))) >= 2 or proc.poll() is not None, 120,
               "two units training in workers")
        assert proc.poll() is None, f"the reproduction ended before it was stopped: {proc.output()[-2000:]}"
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        held = {int(p.read_text()) for p in out.glob("pretrain/*/.held-at-1.rank0")}
        assert held == set(workers), (held, workers)  # both inside their training loops, one unit each
        assert all(_alive(w) for w in workers)
        family = descendants(proc.pid)  # the workers, their fork server and the resource tracker
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        err = proc.output()
        if sig == signal.SIGTERM:
            assert code == 143, err[-2000:]
            assert "vitkit reproduce: terminated" in err
            assert "Traceback" not in err, err[-2000:]  # the workers ignore the interrupt; their parent stops them
        else:
            assert code == -signal.SIGKILL
        _until(lambda: not any(_alive(w) for w in workers), 10, f"workers {workers} ended")
        _until(lambda: not any(_alive(k) for k in family), 10, f"all of {family} ended")
    finally:
        workers += descendants(proc.pid) if proc.poll() is None else []
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in {*workers, *family}:  # a failed test must not leave orphans training beside the suite
            if _alive(w):
                os.kill(w, signal.SIGKILL)
