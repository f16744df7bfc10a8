"""Work bounded by the output, checked before anything is allocated: an image whose resize before the centre crop
would be gigabytes is skipped and named (the rest of the batch goes on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

import vitkit
from tests.inputs import png_bytes
from vitkit.cli import main
from vitkit.models.preprocess import PreprocessConfig


def test_an_extreme_aspect_ratio_is_skipped_and_named_not_a_crash(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=224, patch_size=16,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.875,
                                    labels=["a", "b", "c"])
    model = vitkit.save_pretrained(m, tmp_path / "m")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(np.zeros((1, 100_000), np.uint8)).save(photos / "wide.png")  # 177 bytes: 78 GB to resize before
    Image.fromarray(np.zeros((1_000_000, 1), np.uint8)).save(photos / "tall.png")
    (photos / "ok.png").write_bytes(png_bytes())
    capsys.readouterr()
    assert main(["predict", str(photos), "--model", str(model), "--runtime", "torch"]) == 1  # (skipped files: 1)
    out = capsys.readouterr()
    assert "wide.png: a 100000x1 image would be resized to 25,600,000x256 before its centre crop" in out.err
    assert "tall.png: a 1x1000000 image would be resized to 256x256,000,000" in out.err
    assert "ok.png" in out.out and "2 of 3 images could not be read" in out.err
    assert m.preprocess.resized_size(300, 400) == (256, 341)  # an ordinary photo: resized as before
    m.preprocess.check_input_size(256, 256 * 32)  # a 32:1 panorama still goes through
