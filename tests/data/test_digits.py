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


def test_the_digits_file_is_parsed_once_and_every_caller_gets_its_own_arrays() -> None:
    """The text file is parsed once per process; each call returns new arrays with the same values, so a caller
    that changes its images or labels changes nobody else's."""
    from vitkit.data import digits

    digits._digits_arrays.cache_clear()
    a_train, a_test = digits.load_digits_split()
    b_train, b_test = digits.load_digits_split()
    assert digits._digits_arrays.cache_info().misses == 1
    assert torch.equal(a_train.images, b_train.images) and torch.equal(a_test.images, b_test.images)
    assert np.array_equal(a_train.labels, b_train.labels) and np.array_equal(a_test.labels, b_test.labels)
    a_train.images[0] += 1
    a_test.labels[0] += 1
    c_train, c_test = digits.load_digits_split()
    assert torch.equal(b_train.images, c_train.images) and np.array_equal(b_test.labels, c_test.labels)
