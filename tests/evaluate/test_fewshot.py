"""Few-shot linear evaluation: the closed-form solver against an independent solve, and the CLI table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitkit.cli import main
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


def test_fewshot_cli_prints_the_table(tmp_path: Path, capsys) -> None:
    from helpers import digits_model

    from vitkit.formats import save_pretrained

    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--seeds", "2", "--json", str(tmp_path / "fs.json")]) == 0
    out = capsys.readouterr().out
    for s in ("1", "5", "10", "25"):
        assert any(line.split()[:1] == [s] and "±" in line for line in out.splitlines())
    assert (tmp_path / "fs.json").exists()
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--shots", "x"]) == 2
