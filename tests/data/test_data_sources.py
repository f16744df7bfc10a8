"""Data readers (image folders, list files, CIFAR pickles, LFW, digits), the Inception crop, and the
step-indexed loader: deterministic batches independent of workers, rank shards that add up to the
one-process batch, and unreadable images skipped and named."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data.augment import inception_crop
from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import EvalTransform, TrainTransform
from vitkit.models.preprocess import PreprocessConfig


def _png(path: Path, value: int, size=(10, 14)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), value, np.uint8)).save(path)


def test_image_folder_with_and_without_split(tmp_path: Path) -> None:
    for split in ("train", "val"):
        for c, v in (("cat", 10), ("dog", 200)):
            for i in range(3):
                _png(tmp_path / "a" / split / c / f"{i}.png", v)
    s = open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "a")}))
    assert s["train"].classes == ["cat", "dog"] and len(s["train"]) == 6 and len(s["test"]) == 6
    img, label = s["test"].get(4)
    assert img.shape == (3, 10, 14) and label == 1 and abs(img.mean().item() - 200 / 255) < 1e-6
    for c in ("x", "y"):
        for i in range(10):
            _png(tmp_path / "b" / c / f"{i}.jpg", 50)
    s = open_splits(DataConfig(**{"name": "folder", "path": str(tmp_path / "b"), "holdout": 0.2, "dev_fraction": 0.25}))
    assert len(s["test"]) == 4 and len(s["dev"]) == 4 and len(s["train"]) == 12
    assert np.bincount(s["test"].labels).tolist() == [2, 2]
    with pytest.raises(ValueError, match="no class folders"):
        open_splits(DataConfig(**{"name": "folder", "path": str(tmp_path / "a" / "train" / "cat")}))


def test_list_file(tmp_path: Path) -> None:
    _png(tmp_path / "im" / "a.png", 0)
    _png(tmp_path / "im" / "b.png", 255)
    (tmp_path / "train.txt").write_text("# path label\nim/a.png cat\nim/b.png dog\n\n")
    (tmp_path / "test.txt").write_text(f"{tmp_path}/im/b.png dog\n")
    s = open_splits(DataConfig(**{"name": "list", "path": str(tmp_path / "train.txt"), "test_path": str(tmp_path / "test.txt")}))
    assert s["train"].classes == ["cat", "dog"] and s["test"].labels.tolist() == [1]
    (tmp_path / "bad.txt").write_text("im/a.png\n")
    with pytest.raises(ValueError, match=r"bad.txt:1: expected 'path label'"):
        open_splits(DataConfig(**{"name": "list", "path": str(tmp_path / "bad.txt")}))


@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_cifar_python_batches(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(0)
    k, key = (10, b"labels") if kind == "cifar10" else (100, b"fine_labels")
    sub = tmp_path / ("cifar-10-batches-py" if kind == "cifar10" else "cifar-100-python")
    sub.mkdir()
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if kind == "cifar10" else ["train", "test"]
    data = {}
    for f in files:
        data[f] = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        with open(sub / f, "wb") as fh:
            pickle.dump({b"data": data[f], key: list(rng.integers(0, k, 4))}, fh)
    meta, names = ("batches.meta", b"label_names") if kind == "cifar10" else ("meta", b"fine_label_names")
    with open(sub / meta, "wb") as fh:
        pickle.dump({names: [f"c{i}".encode() for i in range(k)]}, fh)
    s = open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path)}))
    assert len(s["train"]) == (20 if kind == "cifar10" else 4) and len(s["test"]) == 4
    assert s["train"].classes[3] == "c3"
    img, _ = s["test"].get(1)  # channel-major rows of 1024 pixels, as published
    assert torch.equal((img * 255).round().to(torch.uint8), torch.from_numpy(data["test" if kind == "cifar100" else "test_batch"][1].reshape(3, 32, 32)))
    (sub / files[0]).write_bytes(b"garbage")
    with pytest.raises(ValueError, match=files[0]):
        open_splits(DataConfig(**{"name": kind, "path": str(tmp_path)}))


def test_bundled_sources() -> None:
    s = open_splits(DataConfig(**{"name": "lfw"}))
    assert s["train"].classes == ["non-face", "face"] and len(s["train"]) + len(s["test"]) == 200
    d = open_splits(DataConfig(**{"name": "digits", "dev_fraction": 0.1}))
    assert (len(d["train"]), len(d["dev"]), len(d["test"])) == (1212, 135, 450)
    with pytest.raises(ValueError, match="data.path is not set"):
        open_splits(DataConfig(**{"name": "cifar10"}))


def test_inception_crop() -> None:
    img = torch.rand(3, 40, 60)
    a = inception_crop(img, torch.Generator().manual_seed(1), (16, 16))
    b = inception_crop(img, torch.Generator().manual_seed(1), (16, 16))
    assert a.shape == (3, 16, 16) and torch.equal(a, b)
    # a full-area, aspect-preserving crop is the whole image resized
    full = inception_crop(img, torch.Generator().manual_seed(0), (40, 60), area=(1.0, 1.0), ratio=(1.5, 1.5))
    assert torch.allclose(full, img, atol=1e-6)
    outs = {inception_crop(img, torch.Generator().manual_seed(s), (8, 8)).sum().item() for s in range(5)}
    assert len(outs) == 5


def test_loader_is_deterministic_sharded_and_skips_bad_files(tmp_path: Path) -> None:
    for i in range(12):
        _png(tmp_path / str(i % 2) / f"{i:02d}.png", 20 * i)
    (tmp_path / "1" / "zz_bad.png").write_bytes(b"not a png")
    ds = open_splits(DataConfig(**{"name": "folder", "path": str(tmp_path), "holdout": 0.1}))["train"]
    pp = PreprocessConfig(img_size=(8, 8))
    tf = TrainTransform(pp, "inception", flip=True)
    one = StepLoader(ds, 6, tf, seed=3)
    batches = list(one.iterate(0, 5))
    again = list(StepLoader(ds, 6, tf, seed=3, num_workers=2).iterate(0, 5))
    for a, b in zip(batches, again):
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.skipped == b.skipped
    assert one.load(3).x.equal(batches[3].x)  # a batch is a function of the step alone
    bad = [m for b in batches for m in b.skipped]
    assert bad and all("zz_bad.png" in m for m in bad)
    # rank shards are the interleaved rows of the one-process batch
    r0, r1 = (StepLoader(ds, 6, tf, seed=3, rank=r, world=2).load(1) for r in (0, 1))
    full = one.load(1)
    merged = torch.cat([r0.x, r1.x])
    assert sorted(merged.sum((1, 2, 3)).tolist()) == sorted(full.x.sum((1, 2, 3)).tolist())
    ev = StepLoader(ds, 5, EvalTransform(pp), shuffle=False)
    assert sum(len(b.y) + len(b.skipped) for b in ev.iterate(0, len(ev))) == len(ds)


@pytest.mark.parametrize("augment, flip", [("affine", False), ("affine", True), ("none", True), ("eval", False)])
def test_batched_transforms_equal_the_one_by_one_path(augment: str, flip: bool) -> None:
    """Same-size images go through the transform as one batch: bitwise what each image gives alone (each
    draws from its own (seed, step, position) generator), so exact resume and worker independence hold."""
    from vitkit.data.digits import load_digits_split
    from vitkit.data.loader import step_generator

    train, _ = load_digits_split()
    pp = PreprocessConfig(img_size=(16, 16), mean=(0.5,), std=(0.5,))
    tf = EvalTransform(pp) if augment == "eval" else TrainTransform(pp, augment, flip=flip)
    loader = StepLoader(train, 64, tf, seed=5, shuffle=augment != "eval")
    batch = loader.load(2)
    one = torch.stack([tf(train.get(j)[0], step_generator(5, 2, 2 + p)) for p, j in loader.positions(2)])
    assert batch.x.shape == (64, 1, 16, 16) and torch.equal(batch.x, one)


def test_every_data_name_is_a_registered_source() -> None:
    """config.py's DATA_NAMES (checked when a recipe is read) and datasets.py's registry name the same sources."""
    from vitkit.data.config import DATA_NAMES
    from vitkit.data.datasets import SOURCES

    assert set(SOURCES) == set(DATA_NAMES) - {"auto"}
