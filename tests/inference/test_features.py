"""`vitkit embed --native` (vitkit/inference/features.py's `embed_native`, NaViT): each image's feature at its own
aspect ratio, packed, as the model gives it for that image alone; what packing cannot give is refused by name."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from tests.helpers import NATIVE_SIZES, native_images, tiny_labelled_vit
from vitkit.cli import main
from vitkit.data.preprocess import read_image
from vitkit.models.features import feature
from vitkit.models.packing import native_grid


@pytest.mark.parametrize("pool", ["mean", "pre_logits"])
def test_embed_native_gives_each_image_its_own_feature(tmp_path: Path, pool: str) -> None:
    m = tiny_labelled_vit()
    vitkit.save_pretrained(m, tmp_path / "m")
    files = native_images(tmp_path, 1)
    out = tmp_path / "f.npz"
    assert main(["embed", *map(str, files), "--model", str(tmp_path / "m"), "--native", "--max-patches", "12",
                 "--pool", pool, "--normalize", "--batch-size", "3", "-o", str(out), "--no-progress"]) == 0
    got = np.load(out, allow_pickle=False)
    assert list(got["paths"]) == list(map(str, files))
    for f, (h, w), v in zip(files, NATIVE_SIZES, got["features"]):
        gh, gw = native_grid(h, w, 8, 12)
        alone = copy.deepcopy(m)
        alone.set_img_size((8 * gh, 8 * gw))
        with torch.no_grad():
            want = feature(alone, alone.tokens(m.preprocess.native(read_image(str(f), 3)[None], 8, 12)), pool)[0]
        assert np.abs(v - torch.nn.functional.normalize(want, dim=-1).numpy()).max() <= 1e-5


def test_embed_native_refuses_patch_features(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    vitkit.save_pretrained(tiny_labelled_vit(), tmp_path / "m")
    files = native_images(tmp_path, 1)
    assert main(["embed", str(files[0]), "--model", str(tmp_path / "m"), "--native", "--pool", "patch",
                 "-o", str(tmp_path / "f.npz")]) == 2
    assert "--native with --pool patch: each image has its own patch grid" in capsys.readouterr().err
