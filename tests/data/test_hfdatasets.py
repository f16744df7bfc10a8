"""Hugging Face `datasets` on disk: a saved DatasetDict and Parquet files read as vitkit data sets (labels and
pixels kept, columns found from the features or named, refusals that name the columns), every row read once
per epoch across 2 ranks x 2 workers, an undecodable row skipped and named, and a training run on them that
resumes bitwise."""

from __future__ import annotations

import importlib.util
import io

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import assert_read_once_per_epoch, assert_resumes_bitwise, digits_model
from vitkit.cli import main
from vitkit.data.config import DataConfig
from vitkit.data.datasets import detect_kind, open_splits
from vitkit.data.digits import LABELS, load_digits_split
from vitkit.data.hfdatasets import HFImageDataset
from vitkit.data.loader import StepLoader
from vitkit.data.shards import ShardDataset
from vitkit.data.transforms import EvalTransform

# installed, not imported here: `datasets` costs ~1 CPU s to import, paid at collection by every worker otherwise
pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs datasets")


def _png(img: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    Image.fromarray((img[0].numpy() * 255).round().astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _records(split, n: int) -> dict:  # noqa: ANN001
    return {"image": [{"bytes": _png(split.images[i]), "path": None} for i in range(n)],
            "label": [int(split.labels[i]) for i in range(n)]}


def _features(label=None):  # noqa: ANN001, ANN202
    import datasets

    return datasets.Features({"image": datasets.Image(), "label": label or datasets.ClassLabel(names=list(LABELS))})


def test_saved_dataset_dict_reads_back_pixels_labels_and_class_names(tmp_path) -> None:  # noqa: ANN001
    import datasets

    train, test = load_digits_split()
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(_records(train, 120), features=_features()),
                               "validation": datasets.Dataset.from_dict(_records(test, 30), features=_features())})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert detect_kind(str(tmp_path / "dd")) == "hf"
    splits = open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "dd"), "channels": 1}))
    assert splits["train"].source.endswith("[train]") and splits["test"].source.endswith("[validation]")
    from vitkit.train.config import config_from_dict
    from vitkit.train.run import describe_run

    cfg = config_from_dict({"data": {"name": "hf", "path": str(tmp_path / "dd")}, "train": {"batch_size": 8},
                            "schedule": {"steps": 1}, "optim": {"name": "sgd", "lr": 0.1}})
    header = describe_run(digits_model(), splits, cfg, [])
    assert f"splits: train = {tmp_path / 'dd'}[train], test = {tmp_path / 'dd'}[validation]" in header
    assert len(splits["train"]) == 120 and len(splits["test"]) == 30
    assert splits["train"].classes == list(LABELS)
    assert np.array_equal(splits["train"].labels, train.labels[:120])
    for i in (0, 77):
        x, y = splits["train"].get(i)
        torch.testing.assert_close(x, (train.images[i] * 255).round().float() / 255, atol=1e-6, rtol=0)
        assert y == train.labels[i]
    with pytest.raises(ValueError, match="holds the splits train, validation: name one"):
        HFImageDataset(str(tmp_path / "dd"), channels=1)
    # pack -> shards keeps the labels and the class names (any source vitkit reads packs)
    assert main(["data", "pack", str(tmp_path / "dd"), str(tmp_path / "s"), "--channels", "1", "--no-progress"]) == 0
    shards = ShardDataset(str(tmp_path / "s" / "train-000000.tar"), channels=1)
    assert np.array_equal(shards.labels, train.labels[:120]) and shards.classes == list(LABELS)
    (tmp_path / "dd" / "dataset_dict.json").write_text("{torn")
    with pytest.raises(ValueError, match="dataset_dict.json: not a DatasetDict's split list"):
        open_splits(DataConfig(**{"name": "hf", "path": str(tmp_path / "dd")}))


def test_parquet_with_other_column_names(tmp_path) -> None:  # noqa: ANN001
    import datasets

    train, _ = load_digits_split()
    rec = _records(train, 60)
    ds = datasets.Dataset.from_dict({"picture": rec["image"], "target": rec["label"], "note": ["x"] * 60},
                                    features=datasets.Features({"picture": datasets.Image(),
                                                                "target": datasets.Value("int64"),
                                                                "note": datasets.Value("string")}))
    (tmp_path / "pq").mkdir()
    ds.select(range(40)).to_parquet(str(tmp_path / "pq" / "train-0.parquet"))
    ds.select(range(40, 60)).to_parquet(str(tmp_path / "pq" / "train-1.parquet"))
    cfg = {"name": "hf", "path": str(tmp_path / "pq"), "channels": 1, "hf_cache": str(tmp_path / "cache")}
    with pytest.raises(ValueError, match="no ClassLabel column .* data.label_column .*columns: picture, target, note"):
        open_splits(DataConfig(**cfg))
    with pytest.warns(UserWarning, match="classes are named by their index"):
        splits = open_splits(DataConfig(**{**cfg, "label_column": "target", "holdout": 0.25}))
    assert len(splits["train"]) == 45 and len(splits["test"]) == 15  # no test split given: a holdout
    with pytest.warns(UserWarning, match="not a ClassLabel"):
        full = HFImageDataset(str(tmp_path / "pq" / "*.parquet"), channels=1, label_column="target",
                              cache_dir=str(tmp_path / "cache"))
    assert np.array_equal(full.labels, train.labels[:60]) and full.image_column == "picture"
    with pytest.raises(ValueError, match="no column 'lbl' \\(data.label_column\\)"):
        HFImageDataset(str(tmp_path / "pq"), channels=1, label_column="lbl", cache_dir=str(tmp_path / "cache"))


def _saved(tmp_path, n: int = 400, bad: int | None = None) -> HFImageDataset:  # noqa: ANN001
    import datasets

    train, _ = load_digits_split()
    rec = _records(train, n)
    if bad is not None:
        rec["image"][bad] = {"bytes": b"\x89PNG\r\n\x1a\n not an image", "path": None}
    datasets.Dataset.from_dict(rec, features=_features()).save_to_disk(str(tmp_path / "one"))
    return HFImageDataset(str(tmp_path / "one"), channels=1)


def test_every_row_once_per_epoch_across_two_ranks_and_two_workers(tmp_path) -> None:  # noqa: ANN001
    assert_read_once_per_epoch(_saved(tmp_path))


def test_undecodable_row_is_skipped_and_named(tmp_path) -> None:  # noqa: ANN001
    ds = _saved(tmp_path, n=50, bad=17)
    with pytest.raises(ValueError, match="one\\[row 17\\]"):
        ds.get(17)
    b = StepLoader(ds, 50, EvalTransform(digits_model().preprocess), shuffle=False).load(0)
    assert len(b.y) == 49 and len(b.skipped) == 1 and "[row 17]" in b.skipped[0]


def test_training_on_a_saved_dataset_resumes_bitwise(tmp_path) -> None:  # noqa: ANN001
    assert_resumes_bitwise(_saved(tmp_path), tmp_path)
