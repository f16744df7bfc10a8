"""Tar shards (WebDataset layout, read with tarfile): pack -> read keeps images and labels, every sample is read
exactly once per epoch across 2 ranks x 2 workers, a corrupt member is skipped and named, and a run on shards
resumes bitwise, also with another number of processes' view of the batch."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import assert_read_once_per_epoch, assert_resumes_bitwise, digits_model
from vitkit.cli import main
from vitkit.data.config import DataConfig
from vitkit.data.datasets import detect_kind, open_splits
from vitkit.data.digits import load_digits_split
from vitkit.data.loader import StepLoader
from vitkit.data.shards import ShardDataset, expand_pattern, pack
from vitkit.data.transforms import EvalTransform


def _digit_folder(root: Path, n: int = 60) -> Path:
    train, _ = load_digits_split()
    for i in range(n):
        d = root / str(int(train.labels[i]))
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray((train.images[i, 0].numpy() * 255).astype(np.uint8)).save(d / f"{i:03d}.png")
    return root


def test_pack_then_read_keeps_every_image_and_label(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    train, _ = load_digits_split()
    shards = pack(train, tmp_path / "s", "train", shard_size=500)
    assert [p.name for p in shards] == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
    ds = ShardDataset(str(tmp_path / "s" / "train-{000000..000002}.tar"), channels=1)
    assert len(ds) == len(train) and ds.classes == train.classes and ds.named
    assert np.array_equal(ds.labels, train.labels)
    for i in (0, 499, 500, 1346):  # lossless PNG: the pixels come back (quantised to 8 bits as stored)
        x, y = ds.get(i)
        want = (train.images[i] * 255).round() / 255
        torch.testing.assert_close(x, want.float(), atol=1e-6, rtol=0)
        assert y == train.labels[i]
    assert expand_pattern(str(tmp_path / "s")) == shards  # a folder: its shards in order
    with pytest.raises(FileNotFoundError, match="1 shard\\(s\\) missing"):
        expand_pattern(str(tmp_path / "s" / "train-{000000..000003}.tar"))
    # the command packs any source; files keep their own bytes
    src = _digit_folder(tmp_path / "folder")
    assert main(["data", "pack", str(src), str(tmp_path / "p"), "--shard-size", "16", "--channels", "1",
                 "--no-progress"]) == 0
    assert "train:" in capsys.readouterr().out
    assert detect_kind(str(tmp_path / "p")) == "shards"
    packed = ShardDataset(str(tmp_path / "p" / "train-000000.tar"), channels=1)
    source = open_splits(DataConfig(**{"name": "folder", "path": str(src), "channels": 1}))["train"]  # a held-out Subset
    for i in range(3):  # its files keep their own bytes (no re-encoding)
        assert packed.raw(i) == (Path(source.describe(i)).read_bytes(), ".png")
    # the packed folder as data.path: train-*.tar to train on, test-*.tar to test on, never mixed
    whole = open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "p"), "channels": 1}))
    assert len(whole["train"]) == 54 and len(whole["test"]) == 6
    assert all(":test_" in whole["test"].describe(i) for i in range(6))
    assert all(":train_" in whole["train"].describe(i) for i in range(54))
    assert detect_kind(str(tmp_path / "p" / ".." / "folder")) == "folder"  # a parent folder's ".." is no shard range
    splits = open_splits(DataConfig(**{"name": "shards", "path": str(tmp_path / "p" / "train-{000000..000003}.tar"),
                          "test_path": str(tmp_path / "p" / "test-000000.tar"), "channels": 1}))
    assert len(splits["train"]) + len(splits["test"]) == 60
    assert json.loads((tmp_path / "p" / "classes.json").read_text()) == splits["train"].classes
    assert main(["data", "pack", str(src), str(tmp_path / "p"), "--no-progress"]) == 2  # never over old shards


def test_every_sample_once_per_epoch_across_two_ranks_and_two_workers(tmp_path: Path) -> None:
    train, _ = load_digits_split()
    pack(train, tmp_path, "train", shard_size=300)
    assert_read_once_per_epoch(ShardDataset(str(tmp_path), channels=1))


def test_corrupt_member_is_skipped_and_named(tmp_path: Path) -> None:
    train, _ = load_digits_split()
    shard = pack(train, tmp_path, "train", shard_size=10_000)[0]
    with tarfile.open(shard, "a") as tar:  # one more sample whose image bytes are garbage
        for name, data in (("bad_1.png", b"\x89PNG\r\n\x1a\n not an image"), ("bad_1.cls", b"3")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = ShardDataset(str(shard), channels=1)
    bad = next(i for i in range(len(ds)) if ds.describe(i).endswith("bad_1.png"))
    with pytest.raises(ValueError, match=f"cannot read image {shard}:bad_1.png"):
        ds.get(bad)
    loader = StepLoader(ds, len(ds), EvalTransform(digits_model().preprocess), shuffle=False)
    b = loader.load(0)
    assert len(b.y) == len(ds) - 1 and len(b.skipped) == 1
    assert b.skipped[0].startswith(f"cannot read image {shard}:bad_1.png")
    (tmp_path / "classes.json").write_text('["zero"]')
    with pytest.raises(ValueError, match="classes.json: 1 class names, but the labels go up to 9"):
        ShardDataset(str(shard), channels=1)
    (tmp_path / "classes.json").unlink()
    with pytest.warns(UserWarning, match="classes are named by their index"):
        assert ShardDataset(str(shard), channels=1).classes[:2] == ["0", "1"]


def test_training_on_shards_resumes_bitwise(tmp_path: Path) -> None:
    train, _ = load_digits_split()
    pack(train, tmp_path / "s", "train", shard_size=400)
    assert_resumes_bitwise(ShardDataset(str(tmp_path / "s"), channels=1), tmp_path)


@pytest.mark.usefixtures("figures_not_encoded")  # its run's curves.png: drawn, not encoded (not read)
def test_i21k_recipe_trains_on_shards(tmp_path: Path) -> None:
    """The sharded pre-training recipe, shrunk, reads real shards (not a dry run's synthetic images)."""
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    train, test = load_digits_split()
    pack(train, tmp_path / "s", "train", shard_size=500)
    pack(test, tmp_path / "s", "test", shard_size=500)
    cfg = load_config("pretrain_i21k_b16")
    assert (cfg.data.name, cfg.model.num_classes, cfg.train.parallel) == ("shards", 21843, "ddp")
    with pytest.raises(ValueError, match="data.name is 'shards' but data.path is not set"):
        run_experiment(cfg, tmp_path / "nopath", progress=False)
    cfg = load_config("pretrain_i21k_b16", [
        "model.img_size=16", "model.patch_size=8", "model.width=16", "model.depth=1", "model.num_heads=2",
        "model.mlp_dim=32", "model.representation_size=16", "model.num_classes=10", "train.tensorboard=false",
        "schedule.steps=2", "schedule.warmup_steps=1", "train.batch_size=8", "train.precision=\"fp32\"", "data.num_workers=1",
        f"data.path={tmp_path}/s/train-{{000000..000002}}.tar", f"data.test_path={tmp_path}/s/test-000000.tar",
    ])
    res = run_experiment(cfg, tmp_path / "run", progress=False)
    assert res["steps"] == 2 and res["test"]["n"] == len(test)


def test_batches_are_pinned_for_a_gpu(monkeypatch) -> None:  # noqa: ANN001
    """`pin_memory=True` (set by the runner for a CUDA device) hands every batch over in page-locked memory; this CPU
    machine cannot pin, so pinning is recorded instead of done."""
    pinned: list[tuple] = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: pinned.append(tuple(t.shape)) or t)
    train, _ = load_digits_split()
    loader = StepLoader(train, 16, EvalTransform(digits_model().preprocess), pin_memory=True)
    batches = list(loader.iterate(0, 3))
    assert len(batches) == 3 and pinned == [(16, 1, 16, 16), (16,)] * 3
    assert not StepLoader(train, 16, EvalTransform(digits_model().preprocess)).pin_memory


def test_a_reader_notices_a_pack_rewritten_under_it(tmp_path: Path) -> None:
    """A shard data set indexed before a re-pack never pairs its old labels with the new file's images: a shard
    already open keeps reading the file it indexed; one opened after the re-pack is refused by name (before: the old
    offsets were read in the new file, (old label, new image) pairs)."""
    train, _ = load_digits_split()
    pack(train, tmp_path / "p", "train", shard_size=100, indices=range(200))
    ds = ShardDataset(str(tmp_path / "p" / "train-{000000..000001}.tar"), channels=1)
    first, label = ds.get(0)  # shard 0 opened now, shard 1 not yet
    pack(train, tmp_path / "p", "train", shard_size=100, indices=range(200, 400))  # the same names, other samples
    again, label_again = ds.get(0)
    assert torch.equal(first, again) and label == label_again  # the open file is the one indexed
    with pytest.raises(ValueError, match=r"train-000001.tar: the shard changed since its samples were indexed"):
        ds.get(150)
