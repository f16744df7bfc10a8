"""The embedded default data set: scikit-learn's `load_digits` (1,797 real 8x8 handwritten digits).

Shipped inside scikit-learn, so nothing is downloaded. The split is fixed:
`train_test_split(test_size=0.25, stratify=y, random_state=0)` -> 1,347 train / 450 test images.
The test split is never used for choices (a dev split is carved from train: `data.dev_fraction`).

The file is read, and the split drawn (`vitkit.data.splits.split_indices`), without importing scikit-learn,
whose import (SciPy and its own modules) would cost every process that trains on the digits more than the data.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from vitkit.data.base import ArrayDataset
from vitkit.data.splits import split_indices

LABELS = [str(i) for i in range(10)]


def _digits_file() -> Path:
    """scikit-learn's `datasets/data/digits.csv.gz` (found without importing scikit-learn)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the digits data set ships inside scikit-learn: pip install scikit-learn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: scikit-learn's digits file is missing (reinstall scikit-learn)")
    return path


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(images, labels, train indices, test indices), parsed once per process (the text file's parse is most of a
    tiny digits run's data cost) and read only: every caller gets copies (fancy indexing)."""
    with gzip.open(_digits_file()) as f:
        table = np.loadtxt(f, delimiter=",")  # 1,797 rows: 64 pixels, the label
    x = (table[:, :-1].reshape(-1, 8, 8).astype(np.float32) / 16.0)[:, None]  # (1797, 1, 8, 8)
    y = table[:, -1].astype(np.int64)
    tr, te = split_indices(y, 0.25, 0)  # train_test_split(test_size=0.25, stratify=y, random_state=0)
    for a in (x, y, tr, te):
        a.flags.writeable = False
    return x, y, tr, te


def load_digits_split() -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of the bundled digits: one channel, 8x8, pixels 0..16 scaled to [0, 1]; new arrays on every
    call (the caller may change them)."""
    x, y, tr, te = _digits_arrays()
    return (ArrayDataset(torch.from_numpy(x[tr]), y[tr], LABELS, "digits/train"),
            ArrayDataset(torch.from_numpy(x[te]), y[te], LABELS, "digits/test"))
