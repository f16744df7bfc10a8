"""vitkit.data.loader: what StepLoader refuses before it starts worker processes (its batches' determinism,
sharding and skipping: tests/data/test_data_sources.py)."""

from __future__ import annotations

import multiprocessing.process
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.data.loader import UNIX_PATH_MAX, StepLoader
from vitkit.data.transforms import EvalTransform
from vitkit.models.preprocess import PreprocessConfig


def test_workers_under_a_temporary_folder_too_deep_for_their_socket_are_refused_not_left_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch hands a worker's batch over through a Unix socket under TMPDIR; past the socket path limit Python only
    # prints "AF_UNIX path too long", drops the batch and the run waited for it for ever (seen: a test whose TMPDIR
    # was its own pytest folder hung for 18 minutes)
    for i in range(4):
        (tmp_path / "img" / str(i % 2)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp_path / "img" / str(i % 2) / f"{i}.png")
    ds = open_splits(DataConfig(name="folder", path=str(tmp_path / "img"), holdout=0.25))["train"]
    loader = StepLoader(ds, 2, EvalTransform(PreprocessConfig(img_size=(8, 8))), shuffle=False, num_workers=1)
    deep = tmp_path / ("d" * 40)  # with pymp-XXXXXXXX/listener-XXXXXXXX under it: past the limit
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))  # TMPDIR, as this process read it
    monkeypatch.delitem(multiprocessing.process.current_process()._config, "tempdir", raising=False)
    with pytest.raises(ValueError, match=r"temporary folder .*d{40}.* is too deep for data-loading workers: .*"
                                         rf"at most {UNIX_PATH_MAX}\); set TMPDIR to a shorter folder"):
        next(loader.iterate(0, 1))
    # the same loader under this process's own temporary folder: its worker's batch arrives, the main process's
    monkeypatch.undo()
    got = next(loader.iterate(0, 1))
    assert torch.equal(got.x, loader.load(0).x) and torch.equal(got.y, loader.load(0).y)
