"""Hold-out splits by index: the paper's dev sets (appendix B: 2% CIFAR, 10% Pets/Flowers, 1% ImageNet).

`split_indices` draws what scikit-learn's `train_test_split(..., stratify=..., random_state=seed)` draws, index
for index (tests/data/test_splits.py compares them), without importing scikit-learn: its import (SciPy and its
own modules) costs every process that trains far more than a split of a few thousand indices.
"""

from __future__ import annotations

import math

import numpy as np


def _approximate_mode(counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Samples per class of `n_draws` stratified draws: the floor of each class's share, the rest to the largest
    remainders, ties broken by `rng` (scikit-learn's `utils.extmath._approximate_mode`)."""
    continuous = counts / counts.sum() * n_draws
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add = min(len(inds), need)
            floored[rng.choice(inds, size=add, replace=False)] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(int)


def split_indices(labels: np.ndarray, test_fraction: float, seed: int,
                  stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices of one shuffled split: ceil(test_fraction * n) test samples, each class in proportion
    when `stratify` (scikit-learn's `StratifiedShuffleSplit`, else its `ShuffleSplit`), both in drawn order."""
    n = len(labels)
    n_test = math.ceil(test_fraction * n)
    if not 0.0 < test_fraction < 1.0 or n - n_test < 1:
        raise ValueError(f"a split of {n} samples with a test fraction {test_fraction} leaves no training sample")
    rng = np.random.RandomState(seed)
    if not stratify:
        order = rng.permutation(n)
        return order[n_test:], order[:n_test]
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if counts.min() < 2 or min(n - n_test, n_test) < len(counts):
        raise ValueError(f"a stratified split needs 2 samples of each class and at least one of each on either side: "
                         f"{len(counts)} classes, the smallest of {counts.min()}, {n - n_test} train / {n_test} test")
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    n_train = _approximate_mode(counts, n - n_test, rng)
    n_held = _approximate_mode(counts - n_train, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i, members in enumerate(by_class):
        order = members.take(rng.permutation(counts[i]), mode="clip")
        train.extend(order[: n_train[i]])
        test.extend(order[n_train[i]: n_train[i] + n_held[i]])
    return rng.permutation(train), rng.permutation(test)


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) indices; the held-out part is a `fraction` of each class where classes allow it."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"a hold-out fraction must be in (0, 1), got {fraction}")
    labels = np.asarray(labels)
    n_held = int(np.ceil(fraction * len(labels)))
    counts = np.bincount(labels) if len(labels) else np.zeros(0, int)
    stratify = bool(len(counts) and counts[counts > 0].min() >= 2 and n_held >= (counts > 0).sum())
    kept, held = split_indices(labels, fraction, seed, stratify)
    return np.sort(kept), np.sort(held)
