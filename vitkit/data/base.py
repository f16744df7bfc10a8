"""The data set types behind one small interface: in-memory arrays, image files, and index subsets.

A data set has `classes`, `labels` (np.int64), `channels`, `len()`, `get(i, min_size=None) -> ((C, H, W)
floats in [0, 1] at the image's own size, label)` and `describe(i)` (a name for the log). `get` raises
ValueError for an unreadable image; the loader skips, counts and names it. A data set of encoded images may also
have `raw(i) -> (bytes, extension)`, the image as stored (so `vitkit data pack` keeps a JPEG a JPEG).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from vitkit.data.preprocess import read_image, read_image_file
from vitkit.data.splits import stratified_holdout


class Dataset(Protocol):
    classes: list[str]
    labels: np.ndarray
    channels: int

    def __len__(self) -> int: ...

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]: ...

    def describe(self, i: int) -> str: ...


class ArrayDataset:
    """Images held in memory, (N, C, H, W) uint8 (0..255) or floats in [0, 1]."""

    def __init__(self, images: torch.Tensor, labels: Any, classes: list[str], name: str = "array") -> None:
        if len(images) != len(labels):
            raise ValueError(f"{name}: {len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        self.classes, self.name, self.channels = list(classes), name, int(images.shape[1])

    def __len__(self) -> int:
        return len(self.labels)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        x = self.images[i]
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        return x, int(self.labels[i])

    def describe(self, i: int) -> str:
        return f"{self.name}[{i}]"


class FileDataset:
    """Image files with integer labels, decoded on access (1- or 3-channel)."""

    def __init__(self, paths: list[str], labels: Any, classes: list[str], channels: int = 3,
                 max_pixels: int | None = None, keep_uint8: bool = False) -> None:
        self.paths, self.labels = list(paths), np.asarray(labels, dtype=np.int64)
        self.classes, self.channels, self.max_pixels = list(classes), channels, max_pixels
        self.keep_uint8 = keep_uint8  # 8-bit images stay uint8, for PreprocessConfig.resize's uint8 path

    def __len__(self) -> int:
        return len(self.paths)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        """Image i, decoded at no less than `min_size` (smaller when the file is much larger)."""
        return read_image(self.paths[i], self.channels, min_size, self.max_pixels, keep_uint8=self.keep_uint8), int(
            self.labels[i])

    def describe(self, i: int) -> str:
        return self.paths[i]

    def fingerprint_parts(self) -> list[str]:
        """Each file's path and size (a missing file counts as -1)."""
        return [f"{p}:{os.stat(p).st_size if os.path.exists(p) else -1}" for p in self.paths]

    def raw(self, i: int) -> tuple[bytes, str]:
        """The file's bytes as stored, and its extension (for repacking without re-encoding)."""
        return read_image_file(self.paths[i], self.max_pixels), Path(self.paths[i]).suffix


class Subset:
    """A view of some indices of a data set (hold-out splits)."""

    def __init__(self, base: Dataset, indices: np.ndarray) -> None:
        self.base, self.indices = base, np.asarray(indices, dtype=np.int64)
        self.classes, self.channels = base.classes, base.channels
        self.carved = False  # a held-out split vitkit cut from a source that has none (datasets._carved)
        self.labels = base.labels[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        return self.base.get(int(self.indices[i]), min_size)

    def describe(self, i: int) -> str:
        return self.base.describe(int(self.indices[i]))

    def get_many(self, index: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """Images `index` drawn in one pass, where the base data set can (`batch_reader`)."""
        return self.base.get_many(self.indices[np.asarray(index, dtype=np.int64)])

    def raw(self, i: int) -> tuple[bytes, str] | None:
        return self.base.raw(int(self.indices[i])) if hasattr(self.base, "raw") else None

    def fingerprint_parts(self) -> list[str]:
        return [fingerprint(self.base)["hash"], hashlib.sha256(self.indices.tobytes()).hexdigest()]


class GreyAsRGB:
    """A 1-channel data set seen as RGB, each grey value copied to R, G and B: what PIL's `convert("RGB")` does
    to an "L" image (and so transformers' and timm's loaders), for a 3-channel model on grey data."""

    def __init__(self, base: Dataset) -> None:
        if base.channels != 1:
            raise ValueError(f"GreyAsRGB takes a 1-channel data set, got {base.channels} channels")
        self.base, self.classes, self.labels, self.channels = base, base.classes, base.labels, 3
        self.carved = getattr(base, "carved", False)

    def __len__(self) -> int:
        return len(self.base)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        x, y = self.base.get(i, min_size)
        return x.expand(3, *x.shape[1:]).contiguous(), y

    def describe(self, i: int) -> str:
        return self.base.describe(i)

    def fingerprint_parts(self) -> list[str]:
        return [fingerprint(self.base)["hash"], "rgb"]


def match_channels(ds: Dataset, channels: int, what: str, log: Callable[[str], None] | None = None) -> Dataset:
    """`ds` for a model taking `channels`: as it is, grey data as RGB for a 3-channel model (`GreyAsRGB`, said
    through `log`), or an error naming both counts."""
    if ds.channels == channels:
        return ds
    if ds.channels == 1 and channels == 3:
        if log is not None:
            log(f"{what}: grey images, converted to RGB for a 3-channel model (each value copied to R, G, B, as "
                "PIL's convert('RGB') does)")
        return GreyAsRGB(ds)
    raise ValueError(f"{what} has {ds.channels}-channel images; the model takes {channels}")


def batch_reader(ds: Dataset) -> Callable[[np.ndarray], tuple[torch.Tensor, np.ndarray]] | None:
    """`ds.get_many` where the data set (or the base of a subset) reads a batch in one pass (a glyph stream draws
    it vectorised), else None: the loader then reads image by image."""
    base = ds
    while isinstance(base, Subset):
        base = base.base
    return getattr(ds, "get_many", None) if hasattr(base, "get_many") else None


def class_names(names: Sequence[str] | None, labels: np.ndarray, where: str, unnamed: str) -> list[str]:
    """The class names for integer `labels`: `names`, refused (naming `where`) when fewer than the largest label
    needs; without names, the indices as names and a warning that says so, after `unnamed` (why there are none)."""
    if len(labels) and int(labels.min()) < 0:
        raise ValueError(f"{where}: label {int(labels.min())} is negative; labels are class indices 0, 1, ...")
    k = int(labels.max()) + 1
    if names is not None:
        if len(names) < k:
            raise ValueError(f"{where}: {len(names)} class names, but the labels go up to {k - 1}")
        dup = sorted(n for n, c in Counter(names).items() if c > 1)
        if dup:
            raise ValueError(f"{where}: class names appear twice: {', '.join(map(str, dup[:5]))}")
        return list(names)
    present = np.unique(labels)
    if len(present) < k:  # without names the classes are 0..max: a label far beyond the others is refused
        missing = sorted(set(range(min(k, len(present) + 6))) - set(present.tolist()))[:5]
        raise ValueError(f"{where}: the labels jump (max {k - 1}, but only {len(present)} distinct values; e.g. "
                         f"{', '.join(map(str, missing))} never occur{' ...' if len(missing) == 5 else ''}); without "
                         f"class names they must be 0..K-1 ({unnamed})")
    warnings.warn(f"{unnamed}: the {k} classes are named by their index (0, 1, ...)", UserWarning, stacklevel=3)
    return [str(i) for i in range(k)]


def require_classes(ds: Dataset, where: str, what: str = "training") -> None:
    """Classification needs at least two classes with examples: with one, every prediction is that class and every
    accuracy 100%, which measures nothing. Refused, naming the single class."""
    present = np.unique(np.asarray(ds.labels))
    if len(present) < 2:
        only = (f"only class {ds.classes[int(present[0])]!r} ({len(ds)} images)" if len(present) else "no images")
        raise ValueError(f"{where}: {what} needs at least 2 classes, the data has {only}: every prediction would be "
                         "right and the accuracy (100%) would mean nothing; add a folder per class")


def holdout(ds: Dataset, fraction: float, seed: int = 0) -> tuple[Subset, Subset]:
    kept, held = stratified_holdout(ds.labels, fraction, seed)
    return Subset(ds, kept), Subset(ds, held)


def synthetic(num_classes: int, img_size: tuple[int, int], channels: int = 3, n: int = 64, seed: int = 0) -> ArrayDataset:
    """Random uint8 images with labels i % K, for dry runs of recipes whose data is not at hand."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.randint(0, 256, (n, channels, *img_size), generator=g, dtype=torch.uint8)
    return ArrayDataset(imgs, np.arange(n) % num_classes, [str(i) for i in range(num_classes)], "synthetic")


def fingerprint(ds: Dataset) -> dict[str, Any]:
    """What a training state records of its data: the number of examples and a hash of the labels and, where a
    data set has them (`fingerprint_parts`), its files and their sizes, so a resume on changed data (images added,
    removed or replaced, which would silently re-carve a held-out split) is noticed."""
    h = hashlib.sha256(np.ascontiguousarray(ds.labels, dtype=np.int64).tobytes())
    for part in getattr(ds, "fingerprint_parts", lambda: [])():
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return {"n": len(ds), "hash": h.hexdigest()[:20]}
