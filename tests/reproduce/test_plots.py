"""Figures of `vitkit reproduce` drawn from records alone (vitkit/reproduce/plots.py); the experiments' figures are
drawn in tests/reproduce/test_summary.py and test_rules.py, from the committed JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vitkit.reproduce import plots

# an MPP run's metrics.jsonl as the engine writes it (training lines, few-shot evaluations, the final test line)
RECORDS: list[dict[str, Any]] = [
    *({"step": s, "loss": 2.0 - 0.002 * s, "train_acc": 0.37 + 0.0005 * s, "lr": 1e-3, "img_per_s": 900.0}
      for s in range(50, 501, 50)),
    *({"step": s, "eval_fewshot_digits_dev_5shot": 0.3 + s / 5000, "eval_fewshot_digits_test_5shot": 0.28 + s / 5000}
      for s in (125, 250, 375, 500)),
    {"step": 500, "split": "test", "final": True, "eval_top1": 0.6, "eval_loss": 1.1, "eval_n": 1000.0},
]


def test_mpp_pretraining_curves_name_every_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: dict[str, Any] = {}
    save = plots._save

    def keep(fig: Any, path: Path) -> str:
        drawn["ylabels"] = [ax.get_ylabel() for ax in fig.axes]
        drawn["legend"] = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    name = plots.mpp_pretraining_curves(RECORDS, tmp_path / "curves.png", "MPP, 500 steps", majority=0.374)
    assert name == "curves.png" and (tmp_path / "curves.png").stat().st_size > 10_000
    assert drawn["ylabels"][0].startswith("masked-colour cross-entropy")
    assert drawn["ylabels"][1] == "masked patches: mean colour right (%)"
    assert drawn["ylabels"][2] == "5-shot digits accuracy (%)"
    assert "masked patches of the batches trained on" in drawn["legend"]  # no "augmented": MPP draws none
    assert not any("augment" in t for t in drawn["legend"])
    assert "always the most frequent colour" in drawn["legend"]
    with pytest.raises(ValueError, match="no training line"):
        plots.mpp_pretraining_curves(RECORDS[-1:], tmp_path / "x.png", "x")
