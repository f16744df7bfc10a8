"""The embedded default data set: scikit-learn's `load_digits` (1,797 real 8x8 handwritten digits).

Shipped inside scikit-learn, so nothing is downloaded. The split is fixed:
`train_test_split(test_size=0.25, stratify=y, random_state=0)` -> 1,347 train / 450 test images.
The test split is never used for choices (a dev split is carved from train: `data.dev_fraction`).
"""

from __future__ import annotations

import numpy as np
import torch

from vitkit.data.base import ArrayDataset

LABELS = [str(i) for i in range(10)]


def load_digits_split() -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of the bundled digits: one channel, 8x8, pixels 0..16 scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]  # (1797, 1, 8, 8)
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    return (ArrayDataset(torch.from_numpy(x_tr), y_tr, LABELS, "digits/train"),
            ArrayDataset(torch.from_numpy(x_te), y_te, LABELS, "digits/test"))
