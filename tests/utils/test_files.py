"""vitkit/utils/files.py: the bounded readers every user file passes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import process_state
from vitkit.utils.files import FolderLock, OutputFile, read_regular_file


@pytest.mark.parametrize("cap", [10**15, 2**62, 10**30])
def test_a_large_cap_reads_what_the_file_holds_without_allocating_the_cap(tmp_path: Path, cap: int) -> None:
    """`--max-pixels 10^15` (8 PB of file cap) ended in MemoryError, 2^62 in an OverflowError: the reader asked
    for `cap + 1` bytes at once before reading one; now it reads what the file holds."""
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    assert read_regular_file(f, cap) == b"abc" * 1000
    with pytest.raises(ValueError, match=r"x.bin: 3,000 bytes is over the limit of 2,999"):
        read_regular_file(f, 2999)
    assert read_regular_file(tmp_path / "x.bin", 3000) == b"abc" * 1000


def test_a_folder_lock_ends_with_the_process_that_took_it_not_with_its_forked_children(tmp_path: Path) -> None:
    """A run SIGKILLed while the DataLoader worker it forked lives on: its folder (and an output file it claimed) is
    free once the run's process is gone (the flock belongs to the open file, which fork() shares: the orphan kept it
    locked until it exited, and a resume was refused naming the dead pid); the child cannot release its parent's
    locks either."""
    ready_r, ready_w = os.pipe()
    job = os.fork()
    if job == 0:  # the job: lock the folder, fork a worker that outlives it, wait to be killed
        code = 1
        try:
            os.close(ready_r)
            with FolderLock(tmp_path, "run folder") as lock, OutputFile(tmp_path / "out.json") as out:
                released_r, released_w = os.pipe()
                worker = os.fork()
                if worker == 0:
                    lock.release()  # in the worker: no-ops, the job still holds the folder and its output
                    out.release()
                    os.write(released_w, b"x")
                    time.sleep(120)
                    os._exit(0)
                os.read(released_r, 1)
                os.write(ready_w, f"{worker}\n".encode())
                time.sleep(120)
        finally:
            os._exit(code)
    os.close(ready_w)
    with os.fdopen(ready_r) as ready:
        worker = int(ready.readline())
    try:
        with pytest.raises(BlockingIOError, match=f"run folder {tmp_path} is in use by another vitkit job \\(pid {job}\\)"):
            FolderLock(tmp_path, "run folder")  # the worker's release() left the job's locks in place
        with pytest.raises(BlockingIOError, match=f"out.json is in use by another vitkit job \\(pid {job}\\)"):
            OutputFile(tmp_path / "out.json")
        os.kill(job, signal.SIGKILL)
        assert os.waitpid(job, 0)[1] == signal.SIGKILL  # the job is gone (reaped)
        assert process_state(worker) in ("R", "S", "D")  # its worker is not
        FolderLock(tmp_path, "run folder").release()  # and the folder is free, and the output
        OutputFile(tmp_path / "out.json").release()
    finally:
        os.kill(worker, signal.SIGKILL)
