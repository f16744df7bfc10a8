"""Few-shot linear evaluation: the closed-form solver against an independent solve, and the CLI table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vitkit.cli import main
from vitkit.formats import load_pretrained
from vitkit.inference.fewshot import BIAS_CONSTANT, fewshot_accuracy, fewshot_table, fit_linear, sample_shots


def _independent_ridge(x: np.ndarray, y: np.ndarray, k: int, l2: float) -> np.ndarray:
    """Ridge as an augmented least-squares problem [X; sqrt(l2) I] w = [Y; 0], solved by lstsq."""
    z = (x - x.mean(0)) / (x.std(0) + 1e-5)
    z = np.hstack([z, BIAS_CONSTANT * np.ones((len(z), 1))])
    t = np.where(np.arange(k)[None] == y[:, None], 1.0, -1.0)
    a = np.vstack([z, np.sqrt(l2) * np.eye(z.shape[1])])
    b = np.vstack([t, np.zeros((z.shape[1], k))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


def test_solver_matches_independent_closed_form() -> None:
    rng = np.random.default_rng(0)
    for n, d, k, l2 in [(10, 32, 5, 1024.0), (60, 8, 3, 0.5), (25, 40, 10, 2.0**10)]:
        x = rng.normal(size=(n, d)) * rng.uniform(0.1, 5, size=d) + rng.normal(size=d)
        y = np.arange(n) % k
        w, _, _ = fit_linear(x, y, k, l2)
        np.testing.assert_allclose(w, _independent_ridge(x, y, k, l2), rtol=1e-7, atol=1e-9)
        # and the predictions use the same whitening on new points
        xt = rng.normal(size=(30, d))
        zt = np.hstack([(xt - x.mean(0)) / (x.std(0) + 1e-5), np.full((30, 1), BIAS_CONSTANT)])
        yt = (zt @ _independent_ridge(x, y, k, l2)).argmax(1)
        assert fewshot_accuracy(x, y, xt, yt, k, l2) == 1.0


def test_shots_and_table() -> None:
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(4), 30)
    feats = rng.normal(size=(120, 6)) + 3 * np.eye(4, 6)[labels]  # separable classes
    idx = sample_shots(labels, 5, seed=3, num_classes=4)
    assert len(idx) == 20 and np.all(np.bincount(labels[idx]) == 5)
    assert not np.array_equal(idx, sample_shots(labels, 5, seed=4, num_classes=4))
    table = fewshot_table((feats, labels), (feats, labels), 4, shots=(1, 10), seeds=(0, 1, 2), l2=1.0)
    assert set(table) == {1, 10} and len(table[1]["accs"]) == 3
    assert table[10]["mean"] > 0.9 and table[10]["mean"] >= table[1]["mean"] - 0.05


def test_counts_past_any_use_are_refused_by_name_before_any_fit() -> None:
    """`fewshot --shots 10^20` and `--seeds 10^20` ended in numpy's / Python's OverflowError ("vitkit's own
    failure"), `--seeds 10^9` ran 10^9 fits; each is refused naming the bound (shots past a class's examples are
    still capped and said: the 10^6-shot crafted case)."""
    labels = np.repeat(np.arange(2), 4)
    feats = np.random.default_rng(0).normal(size=(8, 3))
    data = (feats, labels)
    with pytest.raises(ValueError, match="shots must be at most 1,000,000,000 examples per class, got 10{20}"):
        fewshot_table(data, data, 2, shots=(1, 10**20), seeds=(0,))
    with pytest.raises(ValueError, match=r"at most 10,000 random draws .*got range\(0, 10{20}\)"):
        fewshot_table(data, data, 2, shots=(1,), seeds=range(10**20))
    with pytest.raises(ValueError, match="at most 10,000 random draws .*got 10001"):
        fewshot_table(data, data, 2, shots=(1,), seeds=range(10_001))
    assert set(fewshot_table(data, data, 2, shots=(1, 10**6), seeds=range(2))) == {1, 10**6}


def test_fewshot_cli_prints_the_table(tmp_path: Path, capsys) -> None:
    from tests.helpers import digits_model
    from vitkit.formats import save_pretrained

    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--seeds", "2", "--json", str(tmp_path / "fs.json")]) == 0
    out = capsys.readouterr().out
    for s in ("1", "5", "10", "25"):
        assert any(line.split()[:1] == [s] and "±" in line for line in out.splitlines())
    assert (tmp_path / "fs.json").exists()
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--shots", "x"]) == 2


def _knn_by_hand(x, y, xt, num_classes, k, t):  # noqa: ANN001, ANN202 - one test example at a time, as DINO's loop
    preds = []
    for q in xt:
        sims = np.array([float(q @ r) / (np.linalg.norm(q) * np.linalg.norm(r)) for r in x])
        order = sorted(range(len(x)), key=lambda j: -sims[j])[:k]
        votes = [sum(np.exp(sims[j] / t) for j in order if y[j] == c) for c in range(num_classes)]
        preds.append(int(np.argmax(votes)))
    return np.array(preds)


def test_knn_matches_a_direct_numpy_computation_of_dinos_weighted_vote() -> None:
    from vitkit.inference.fewshot import knn_accuracy, knn_predict

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 90)
    feats = rng.normal(size=(90, 8)) + 1.5 * np.eye(5, 8)[labels]
    test_labels = rng.integers(0, 5, 40)
    test = rng.normal(size=(40, 8)) + 1.5 * np.eye(5, 8)[test_labels]
    for k, t, chunk in ((20, 0.07, 7), (3, 0.5, 1024), (200, 0.07, 16)):  # k beyond the pool: all of it votes
        got = knn_predict(feats, labels, test, 5, k, t, chunk)
        np.testing.assert_array_equal(got, _knn_by_hand(feats, labels, test, 5, k, t))
    acc = knn_accuracy(feats, labels, test, test_labels, 5)
    assert acc == float((_knn_by_hand(feats, labels, test, 5, 20, 0.07) == test_labels).mean())
    # the temperature matters: a flat vote (huge T) is a majority vote and differs from the sharp one somewhere
    assert not np.array_equal(knn_predict(feats, labels, test, 5, 20, 1e6), knn_predict(feats, labels, test, 5, 20,
                                                                                         0.01))
    with pytest.raises(ValueError, match="temperature"):
        knn_predict(feats, labels, test, 5, 20, 0.0)


def test_fewshot_on_grey_lfw_runs_with_an_rgb_backbone_and_reports_knn(tmp_path: Path, capsys) -> None:
    """lfw is greyscale; a 3-channel model used to be refused. Grey values are copied to R, G, B (PIL's
    convert("RGB")), said on stderr; the k-NN rows come beside the ridge's and match a NumPy k-NN on the same
    features."""
    import json

    from tests.hub_folders import hub_folder
    from vitkit.data.base import GreyAsRGB, match_channels
    from vitkit.data.datasets import DataConfig, open_splits
    from vitkit.inference.evaluate import eval_loader
    from vitkit.inference.fewshot import extract_features

    folder = hub_folder(tmp_path, "dinov2_reg")
    assert main(["fewshot", "--model", str(folder), "--data", "lfw", "--img-size", "112", "--shots", "1,5", "--seeds", "2",
                 "--json", str(tmp_path / "fs.json")]) == 0
    cap = capsys.readouterr()
    assert "grey images, converted to RGB" in cap.err
    doc = json.loads((tmp_path / "fs.json").read_text())
    assert set(doc) == {"1", "5", "knn", "knn_all"} and set(doc["knn"]) == {"1", "5"}
    model = load_pretrained(folder, img_size=112)
    splits = open_splits(DataConfig.from_flag("lfw", 3, 0, 64))
    tr, te = (match_channels(splits[s], 3, "lfw") for s in ("train", "test"))
    assert isinstance(tr, GreyAsRGB)
    x, _ = tr.get(0)
    grey, _ = splits["train"].get(0)
    assert x.shape[0] == 3 and torch.equal(x[0], grey[0]) and torch.equal(x[2], grey[0])
    ftr = extract_features(model, eval_loader(tr, model.preprocess, 64))
    fte = extract_features(model, eval_loader(te, model.preprocess, 64))
    want = float((_knn_by_hand(ftr[0], ftr[1], fte[0], 2, 20, 0.07) == fte[1]).mean())
    assert doc["knn_all"] == pytest.approx(want)

