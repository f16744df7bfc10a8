"""Inspection figures say label and prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitkit.cli import main
from vitkit.data.digits import load_digits_split

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read


def test_inspect_titles_say_label_and_prediction(digits_ckpt: Path, tmp_path: Path) -> None:
    assert main(["inspect", "--model", str(digits_ckpt), "--out", str(tmp_path / "i"), "--num-images", "2",
                 "--no-progress", "--components", "4"]) == 0  # (4 panels of E's components, not 16: not read here)
    summary = json.loads((tmp_path / "i" / "inspect.json").read_text())
    assert [im["name"] for im in summary["images"]] == ["test image #0", "test image #1"]
    _, test = load_digits_split()
    assert summary["images"][1]["label"] == str(int(test.labels[1]))
