"""Attention figures stay readable when a few tokens take most of the weight (DINOv2's high-norm tokens), and say
which layer, query and tokens they show."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from tests.helpers import figures_drawn_not_encoded
from tests.hub_folders import hub_folder
from vitkit.cli import main
from vitkit.inspect.figures import OUTLIER_RATIO, ROBUST_PERCENTILE, plot_attention_maps, robust_vmax


def test_robust_scale_clips_a_few_dominant_tokens_and_leaves_ordinary_maps_at_their_max() -> None:
    rng = np.random.default_rng(0)
    smooth = rng.uniform(0.5, 1.0, (16, 16)) / 256
    assert robust_vmax(smooth) == (float(smooth.max()), 0)
    spiky = smooth.copy()
    spiky[3, 4], spiky[10, 2] = 0.5, 0.3  # two artefact tokens hold most of the attention
    top, clipped = robust_vmax(spiky)
    assert clipped == 2 and top == float(smooth.max()) < float(np.percentile(spiky, ROBUST_PERCENTILE)) * OUTLIER_RATIO
    # on the max scale 254 of the 256 cells would sit below 1% of the colour map: on the robust one, most span it
    assert (smooth / spiky.max() < 0.01).mean() > 0.99 and (np.clip(spiky / top, 0, 1) > 0.5).mean() > 0.5


def test_inspect_of_a_stock_dinov2_with_registers_documents_its_scale_layer_and_tokens(tmp_path: Path) -> None:
    folder = hub_folder(tmp_path, "dinov2_reg")
    out = tmp_path / "i"
    assert main(["inspect", "--model", str(folder), "--out", str(out), "--num-images", "2", "--no-progress",
                 "--components", "4"]) == 0  # (4 panels of E's components, not 28: this test reads the others)
    doc = json.loads((out / "attention_maps.json").read_text())
    assert doc["heads_layer"] == 2 and doc["query"] == "class token"
    assert doc["columns"] == "the 16x16 patches (the class token and 4 registers left out)"
    for im in doc["images"]:
        heads = np.asarray(im["last_layer_heads"])
        top, clipped = robust_vmax(heads)
        assert im["colour_scale"]["heads_top"] == round(top, 6) and im["colour_scale"]["heads_clipped"] == clipped
    assert (out / "attention_maps.png").stat().st_size > 10_000


def test_attention_figure_marks_clipped_tokens(tmp_path: Path) -> None:
    heads = torch.full((1, 2, 8, 8), 1 / 64)
    heads[0, :, 2, 5] = 0.9
    roll = heads[:, 0].clone()
    path = plot_attention_maps([torch.rand(3, 64, 64)], ["x"], roll, heads, tmp_path / "a.png", "m", "class token",
                               layer=12, columns="the 8x8 patches")
    assert path.stat().st_size > 5_000


def test_attention_figure_colour_bar_labels_fit_their_bars(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Before: a clipped row's labels ("rollout / max of the rest (1 clipped)", "attention weight (clipped: 4
    above)") were taller than their bars and ran into the next row's label and off the figure."""
    import vitkit.inspect.figures as figures

    made = []

    class Kept(figures.Figure):
        def __init__(self, *a, **k) -> None:  # noqa: ANN002, ANN003
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(figures, "Figure", Kept)
    figures_drawn_not_encoded(monkeypatch)  # laid out and drawn as savefig would (positions are read), not encoded
    g = torch.Generator().manual_seed(0)
    heads, roll = torch.rand(2, 4, 8, 8, generator=g), torch.rand(2, 8, 8, generator=g)
    heads[0, :, 0, 0], roll[1, 0, 0] = 50.0, 50.0  # a clipped head map in row 1, a clipped rollout in row 2
    plot_attention_maps([torch.rand(3, 64, 64)] * 2, ["a", "b"], roll, heads, tmp_path / "a.png", "m", "class token")
    fig = made[0]
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) == 4
    for bar in bars:
        label, box = bar.yaxis.label.get_window_extent(renderer), bar.get_window_extent(renderer)
        assert label.y0 >= box.y0 - 1 and label.y1 <= box.y1 + 1, bar.yaxis.label.get_text()
        assert whole.x0 <= label.x0 and label.x1 <= whole.x1 and whole.y0 <= label.y0, bar.yaxis.label.get_text()
