"""vitkit/models/preprocess.py: the preprocessing contract a model carries, checked when it is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vitkit
from vitkit.models.preprocess import PreprocessConfig


def test_an_interpolation_vitkit_does_not_reproduce_is_refused_by_name(tmp_path: Path) -> None:
    """A config.json's `preprocess.interpolation` "linear" / "trilinear" / 3 ended in torch's NotImplementedError
    ("Got 4D input, but linear mode needs 3D input": vitkit's own failure, exit 1) at the first image; "area" and
    "nearest-exact" resized as no reference library does. Refused when the config is read, naming the key."""
    for mode in ("linear", "trilinear", "area", "nearest-exact", "bicubic_antialias", "lanczos", 3):
        with pytest.raises(ValueError, match=f"interpolation must be one of bilinear, bicubic, nearest, got {mode!r}"):
            PreprocessConfig(interpolation=mode)  # type: ignore[arg-type]
    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=8)
    folder = vitkit.save_pretrained(m, tmp_path / "m")
    doc = json.loads((folder / "config.json").read_text())
    doc["preprocess"]["interpolation"] = "linear"
    (folder / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"/m: preprocessing interpolation must be one of .* got 'linear'"):
        vitkit.load_pretrained(folder)
