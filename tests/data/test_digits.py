"""The bundled digits (vitkit/data/digits.py): read from scikit-learn's file and split without importing
scikit-learn, yet the same images, labels and split, index for index, as scikit-learn's `load_digits` +
`train_test_split(test_size=0.25, stratify=y, random_state=0)`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitkit.data.digits import load_digits_split


def test_the_digits_and_their_split_are_scikit_learns() -> None:
    sk_data = pytest.importorskip("sklearn.datasets")
    from sklearn.model_selection import train_test_split

    d = sk_data.load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    train, test = load_digits_split()
    assert (len(train), len(test)) == (1347, 450)
    for ours, images, labels in ((train, x_tr, y_tr), (test, x_te, y_te)):
        assert ours.images.dtype == torch.float32 and ours.images.shape[1:] == (1, 8, 8)
        assert np.array_equal(ours.images.numpy(), images) and np.array_equal(ours.labels, labels)
