"""Writers remove only what they wrote and never follow a link onto a user's file: `data pack --overwrite` keeps a
user's other `.tar` files, a lock file that is a symlink is refused (the file it points to is untouched)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.inputs import noise_folder
from vitkit.cli import main


def test_pack_overwrite_removes_only_the_packs_own_shards(tmp_path: Path) -> None:
    src = noise_folder(tmp_path / "src", n=12, classes=3)
    out = tmp_path / "out"
    assert main(["data", "pack", str(src), str(out), "--shard-size", "2", "--no-progress"]) == 0
    first = sorted(p.name for p in out.glob("*.tar"))
    assert len(first) > 2
    (out / "backup.tar").write_bytes(b"the user's own archive")
    (out / "train-9.tar").write_bytes(b"not named as a pack names its shards")
    assert main(["data", "pack", str(src), str(out), "--shard-size", "100", "--overwrite", "--no-progress"]) == 0
    assert (out / "backup.tar").read_bytes() == b"the user's own archive"
    assert (out / "train-9.tar").exists()
    assert sorted(p.name for p in out.glob("*-0*.tar")) == ["test-000000.tar", "train-000000.tar"]


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from vitkit.utils.files import FolderLock

    precious = tmp_path / "precious.txt"
    precious.write_text("my notes")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(precious, out / ".vitkit.lock")
    with pytest.raises(ValueError, match=r"\.vitkit\.lock is not a regular file"):
        with FolderLock(out, "pack destination"):
            pass
    assert precious.read_text() == "my notes"
    src = noise_folder(tmp_path / "src", n=4, classes=2)
    assert main(["data", "pack", str(src), str(out), "--no-progress"]) == 2
    assert "is not a regular file" in capsys.readouterr().err
    assert precious.read_text() == "my notes"
    (out / ".vitkit.lock").unlink()
    os.mkfifo(out / ".vitkit.lock")  # a FIFO: refused at once, never opened for writing (which would block)
    with pytest.raises(ValueError, match="is not a regular file"):
        with FolderLock(out, "pack destination"):
            pass


@pytest.mark.usefixtures("figures_not_encoded")  # its run's curves.png: drawn, not encoded (not read)
def test_a_resume_with_a_fifo_as_its_log_is_refused_at_once(tmp_path: Path) -> None:
    from tests.inputs import TINY_LOGGED
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    cfg = load_config("digits_pretrain", TINY_LOGGED + ["schedule.steps=4", "train.ckpt_every=2"])
    run = tmp_path / "run"
    run_experiment(cfg, run, progress=False)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    more = load_config("digits_pretrain", TINY_LOGGED + ["schedule.steps=6", "train.ckpt_every=2"])
    import signal

    def hung(*_: object) -> None:
        raise TimeoutError("the resume hung on the FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(ValueError, match=r"metrics.jsonl: it is a FIFO, not a regular file"):
            run_experiment(more, run, resume=True, force=True, progress=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
