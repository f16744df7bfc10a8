"""vitkit/inspect/figures.py: the image panels' cheaper drawing leaves every pixel of the figures as it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vitkit.inspect.figures as figures


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGBA"))


def test_hidden_axes_draw_the_pixels_of_the_empty_tick_lists_they_replace(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """`_frame_only` hides an image panel's x / y Axis artists, `_colorbar` a colour bar's short axis (the layout
    and the draw then skip their tick bookkeeping: 25-35% of an inspect figure's CPU) where they had empty tick
    lists: the PNGs are the same, pixel for pixel, frames (spines), titles, colour bars and clipped-token crosses
    included."""
    g = torch.Generator().manual_seed(0)
    heads, roll = torch.rand(1, 2, 4, 4, generator=g), torch.rand(1, 4, 4, generator=g)
    heads[0, :, 1, 2] = 40.0  # a clipped head-map token: its crosses and the "extend" colour bar are drawn too
    comps, ratio = torch.randn(3, 1, 4, 4, generator=g), torch.tensor([0.5, 0.3, 0.2])  # one channel: a colour bar

    def draw(tag: str) -> list[np.ndarray]:
        a = figures.plot_attention_maps([torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(1))],
                                        ["img\nlabel: 1"], roll, heads, tmp_path / f"maps_{tag}.png", "m",
                                        "class token", layer=2)
        f = figures.plot_filter_components(comps, ratio, tmp_path / f"filters_{tag}.png", "m")
        return [_pixels(a), _pixels(f)]

    hidden = draw("hidden")

    def empty_ticks(ax) -> None:  # noqa: ANN001
        ax.set_xticks([])
        ax.set_yticks([])

    monkeypatch.setattr(figures, "_frame_only", empty_ticks)
    monkeypatch.setattr(figures, "_colorbar", lambda fig, mappable, **kw: fig.colorbar(mappable, **kw))
    ticks = draw("ticks")
    for new, old in zip(hidden, ticks):
        assert new.shape == old.shape and np.array_equal(new, old)
        assert (old[..., :3] < 64).all(-1).sum() > 100  # drawn: frames and text, not a blank canvas
