"""Hold-out splits (vitkit/data/splits.py): `split_indices` draws scikit-learn's `train_test_split` indices for the
same seed, stratified or not, without importing it; `stratified_holdout` keeps its rule (stratified where every
class has two samples and the hold-out one of each) and refuses a split that leaves nothing to train on."""

from __future__ import annotations

import numpy as np
import pytest

from vitkit.data.splits import split_indices, stratified_holdout


def test_split_indices_are_scikit_learns_index_for_index() -> None:
    ms = pytest.importorskip("sklearn.model_selection")
    rng = np.random.default_rng(0)
    # sizes, class counts, fractions and seeds whose remainders tie (broken by the seed's draws) and do not
    for n, classes, fraction, seed in ((50, 3, 0.3, 1), (97, 7, 0.25, 5), (400, 10, 0.1, 42), (31, 2, 0.5, 0),
                                       (1797, 10, 0.25, 0), (60, 6, 0.1, 3)):
        labels = rng.integers(0, classes, n)
        labels[:classes * 2] = np.repeat(np.arange(classes), 2)  # every class at least twice
        for stratify in (True, False):
            want = ms.train_test_split(np.arange(n), test_size=fraction, stratify=labels if stratify else None,
                                       random_state=seed)
            got = split_indices(labels, fraction, seed, stratify)
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), (n, classes, fraction, seed, stratify)


def test_stratified_holdout_keeps_its_rule_and_refuses_an_empty_side() -> None:
    ms = pytest.importorskip("sklearn.model_selection")
    for labels, stratified in ((np.repeat(np.arange(4), [10, 6, 3, 2]), True),  # every class twice: stratified
                               (np.array([0, 0, 0, 0, 0, 1, 2, 2]), False)):  # a class of one: a plain shuffle
        kept, held = stratified_holdout(labels, 0.25, seed=1)
        want = ms.train_test_split(np.arange(len(labels)), test_size=0.25, random_state=1,
                                   stratify=labels if stratified else None)
        assert np.array_equal(kept, np.sort(want[0])) and np.array_equal(held, np.sort(want[1]))
        assert np.array_equal(np.sort(np.concatenate([kept, held])), np.arange(len(labels)))
    with pytest.raises(ValueError, match="hold-out fraction must be in"):
        stratified_holdout(np.arange(4), 1.0)
    with pytest.raises(ValueError, match="leaves no training sample"):
        stratified_holdout(np.array([0]), 0.5)
