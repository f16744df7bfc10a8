"""`vitkit eval --native` (NaViT): each image scored at its own aspect ratio, packed, on an ordinary checkpoint; the
accuracy is the one of the model run on each image alone at its native size."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch

import vitkit
from tests.helpers import native_images, tiny_labelled_vit
from vitkit.cli import main
from vitkit.data.preprocess import read_image
from vitkit.models.packing import native_grid


def test_eval_native_scores_each_image_at_its_own_aspect(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    m = tiny_labelled_vit()
    vitkit.save_pretrained(m, tmp_path / "m")
    files = {}
    for seed, c in enumerate("ab"):  # two of the model's five classes, four images each of mixed aspects
        (tmp_path / "data" / c).mkdir(parents=True)
        files[c] = native_images(tmp_path / "data" / c, seed)
    right = 0
    for label, fs in files.items():
        for f in fs:
            x = read_image(str(f), 3)
            gh, gw = native_grid(*x.shape[1:], 8, 16)
            alone = copy.deepcopy(m)
            alone.set_img_size((8 * gh, 8 * gw))
            with torch.no_grad():
                right += int(alone(m.preprocess.native(x[None], 8, 16)).argmax(-1)) == "abcde".index(label)
    assert main(["eval", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "data"), "--native",
                 "--max-patches", "16", "--batch-size", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"scored 8 images", out)
    top1 = float(re.search(r"top-1: ([\d.]+)%", out).group(1))
    assert abs(top1 - 100 * right / 8) < 0.01
