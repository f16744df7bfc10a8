"""Hugging Face `datasets` image-classification sets on local disk: a `save_to_disk` folder (one split, or a
DatasetDict of splits) or Parquet files (a file, a folder of them, or a `*` glob). Nothing is downloaded.

Which column holds the images and which the labels is read from the dataset's features (the one `Image`
column; the one `ClassLabel` column, whose names become the classes); where the features do not settle it,
`image_column` / `label_column` name them, or the data set is refused with the columns it has. An integer
label column without class names is accepted with the classes named by index, and a warning says so.
Images are decoded by vitkit (`read_image`: safe formats, the pixel limit, reduced-size decoding), not by
`datasets`, so an undecodable one is skipped and named (`<source>[row 17]`) like a file in a folder.

The rows are random-access (Arrow, memory-mapped), so the step-indexed loader gives each rank and worker
its own part of every batch, reads each row once per epoch and resumes exactly, as for any vitkit data set.
Parquet is converted to Arrow in the `datasets` cache on first use (`cache_dir`), as `load_dataset` does.
Needs the optional extra: `pip install 'vitkit[hf]'`.
"""

from __future__ import annotations

import glob
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.data.base import class_names
from vitkit.data.preprocess import read_image, read_image_file
from vitkit.utils.files import inside

DICT_FILE, SINGLE_FILE = "dataset_dict.json", "state.json"


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as e:
        raise ValueError("Hugging Face datasets need the `datasets` package: pip install 'vitkit[hf]'") from e
    return datasets


def is_hf_path(path: str) -> bool:
    """A `save_to_disk` folder, a Parquet file or glob, or a folder of Parquet files."""
    p = Path(path)
    if path.endswith(".parquet"):
        return True
    return p.is_dir() and ((p / DICT_FILE).is_file() or (p / SINGLE_FILE).is_file() or any(p.glob("*.parquet")))


def _parquet_files(path: str) -> list[str]:
    p = Path(path)
    if "*" in path:
        files = sorted(glob.glob(path))
    elif p.is_dir():
        files = sorted(str(f) for f in p.glob("*.parquet"))
    else:
        files = [str(p)] if p.is_file() else []
    if not files:
        raise FileNotFoundError(f"no Parquet files at {path}")
    return files


def load_hf(path: str, split: str | None = None, cache_dir: str | None = None) -> tuple[Any, str]:
    """(datasets.Dataset, description) for `path`; `split` picks one split of a saved DatasetDict (required
    there: the message lists the splits)."""
    ds_lib = _datasets()
    p = Path(path)
    if p.is_dir() and ((p / DICT_FILE).is_file() or (p / SINGLE_FILE).is_file()):
        loaded = ds_lib.load_from_disk(str(p))
        if isinstance(loaded, ds_lib.DatasetDict):
            if split is None or split not in loaded:
                raise ValueError(f"{p} holds the splits {', '.join(loaded)}: name one"
                                 + (f" (no split {split!r})" if split else ""))
            return loaded[split], f"{p}[{split}]"
        if split is not None:
            raise ValueError(f"{p} is one split (a saved Dataset); it has no split {split!r}")
        return loaded, str(p)
    files = _parquet_files(path)
    return ds_lib.Dataset.from_parquet(files, cache_dir=cache_dir), path


def splits_of(path: str) -> list[str]:
    """The split names of a saved DatasetDict, [] for anything else."""
    p = Path(path)
    if p.is_dir() and (p / DICT_FILE).is_file():
        try:
            return [str(name) for name in json.loads((p / DICT_FILE).read_text())["splits"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{p / DICT_FILE}: not a DatasetDict's split list ({type(e).__name__}: {e})") from e
    return []


def _pick(features: dict[str, Any], kind: type, given: str | None, what: str, key: str, source: str) -> str:
    if given:
        if given not in features:
            raise ValueError(f"{source}: no column {given!r} ({key}); columns: {', '.join(features)}")
        return given
    found = [name for name, f in features.items() if isinstance(f, kind)]
    if len(found) == 1:
        return found[0]
    if not found and what == "label" and "label" in features:
        return "label"
    raise ValueError(f"{source}: {'several' if found else 'no'} {kind.__name__} column{'s' if found else ''} "
                     f"({', '.join(found) or 'none'}) to take the {what}s from; name it with {key} "
                     f"(columns: {', '.join(features)})")


class HFImageDataset:
    """A `datasets.Dataset` of images and class labels as a vitkit data set (the interface of vitkit.data.base)."""

    def __init__(self, path: str, channels: int = 3, classes: list[str] | None = None, max_pixels: int | None = None,
                 split: str | None = None, image_column: str | None = None, label_column: str | None = None,
                 cache_dir: str | None = None) -> None:
        ds_lib = _datasets()
        ds, self.source = load_hf(path, split, cache_dir)
        self.image_column = _pick(ds.features, ds_lib.Image, image_column, "image", "data.image_column", self.source)
        self.label_column = _pick(ds.features, ds_lib.ClassLabel, label_column, "label", "data.label_column",
                                  self.source)
        labels = ds.data.column(self.label_column).to_numpy(zero_copy_only=False)
        if labels.dtype.kind not in "iu":
            raise ValueError(f"{self.source}: column {self.label_column!r} holds {labels.dtype} values, not class "
                             "indices")
        if len(labels) == 0:
            raise ValueError(f"{self.source}: no rows")
        if labels.min() < 0:
            raise ValueError(f"{self.source}: column {self.label_column!r} has label {int(labels.min())} (unlabelled "
                             "rows, as in some test splits); these cannot be trained or scored")
        self.labels = labels.astype(np.int64)
        feature = ds.features[self.label_column]
        own = list(feature.names) if isinstance(feature, ds_lib.ClassLabel) else None
        if classes is not None and own is not None and own != list(classes):
            raise ValueError(f"{self.source}: its class names ({', '.join(own[:5])}, ...) differ from the training "
                             f"split's ({', '.join(list(classes)[:5])}, ...)")
        self.classes = class_names(classes if classes is not None else own, self.labels,
                                   f"{self.source} (column {self.label_column!r})",
                                   f"{self.source}: column {self.label_column!r} is not a ClassLabel")
        # vitkit decodes: the rows give the stored bytes (or a file path), never a PIL image from `datasets`
        self.ds = ds.select_columns([self.image_column]).cast_column(self.image_column, ds_lib.Image(decode=False))
        self.channels, self.max_pixels = channels, max_pixels
        p = Path(path)  # the data root: image paths stored in rows must resolve inside it
        self.root = (p if p.is_dir() else Path(_parquet_files(path)[0]).parent).resolve()

    def __len__(self) -> int:
        return len(self.labels)

    def _stored(self, i: int) -> bytes:
        cell = self.ds[int(i)][self.image_column]
        if isinstance(cell, dict) and cell.get("bytes") is not None:
            return cell["bytes"]
        if isinstance(cell, dict) and cell.get("path"):
            f = Path(cell["path"])
            f = (f if f.is_absolute() else self.root / f).resolve()
            if not inside(f, self.root):
                raise ValueError(f"cannot read image {self.describe(i)}: its path {cell['path']!r} lies outside the "
                                 f"dataset's folder {self.root}; vitkit reads only files inside the data it is given")
            return read_image_file(f, self.max_pixels)
        raise ValueError(f"cannot read image {self.describe(i)}: no image bytes or path")

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        img = read_image(io.BytesIO(self._stored(i)), self.channels, min_size, self.max_pixels, name=self.describe(i))
        return img, int(self.labels[i])

    def raw(self, i: int) -> tuple[bytes, str] | None:
        """The image as stored, when it is a JPEG or PNG (so packing it into shards keeps its bytes)."""
        data = self._stored(i)
        ext = ".jpg" if data.startswith(b"\xff\xd8\xff") else ".png" if data.startswith(b"\x89PNG") else None
        return (data, ext) if ext else None

    def describe(self, i: int) -> str:
        return f"{self.source}[row {int(i)}]"
