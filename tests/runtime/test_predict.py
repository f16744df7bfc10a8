"""`vitkit predict --native` (vitkit/inference/predict.py's `predict_native`, NaViT): each image at its own aspect
ratio, at most --max-patches patches, no crop, packed with the others, on an ordinary (fixed-size) checkpoint."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import NATIVE_SIZES, native_images, tiny_labelled_vit
from vitkit.cli import main
from vitkit.data.preprocess import read_image
from vitkit.models.packing import native_grid


def test_predict_native_runs_each_image_at_its_own_aspect(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The top-k of each image is the model's answer on that image resized (aspect kept, no crop) to its native
    grid under --max-patches, the model moved to that size by the §3.2 resampling (`set_img_size`)."""
    m = tiny_labelled_vit()
    vitkit.save_pretrained(m, tmp_path / "m")
    files = native_images(tmp_path)
    out = tmp_path / "p.jsonl"
    assert main(["predict", *map(str, files), "--model", str(tmp_path / "m"), "--native", "--max-patches", "16",
                 "--topk", "5", "--batch-size", "3", "--output", str(out), "--no-progress"]) == 0
    assert "at most 16 patches per image" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["path"] for r in rows] == list(map(str, files))
    assert native_grid(40, 160, 8, 16) == (2, 8)  # the 4:1 strip keeps its aspect: 2 x 8 patches
    for f, (h, w), r in zip(files, NATIVE_SIZES, rows):
        x = m.preprocess.native(read_image(str(f), 3)[None], 8, 16)
        gh, gw = native_grid(h, w, 8, 16)
        assert x.shape[-2:] == (8 * gh, 8 * gw)
        alone = copy.deepcopy(m)
        alone.set_img_size((8 * gh, 8 * gw))
        with torch.no_grad():
            probs = alone(x).softmax(-1)[0]
        top = probs.topk(5)
        assert r["labels"] == [m.preprocess.labels[i] for i in top.indices.tolist()]
        assert r["probs"] == pytest.approx(top.values.tolist(), abs=1e-5)


@pytest.mark.parametrize(("extra", "pattern"), [
    (["--native", "--runtime", "onnxruntime"], "--native runs in torch: an exported onnxruntime graph has one fixed"),
    (["--native", "--precision", "int8"], "int8 runs in onnxruntime at a fixed input size"),
    (["--native", "--compile"], "every packed batch has its own shape"),
    (["--max-patches", "16"], "--max-patches applies to --native"),
    (["--native", "--merge", "2"], "token merging"),
])
def test_predict_native_refuses_what_cannot_run_packed(tmp_path: Path, capsys, extra: list[str],  # noqa: ANN001
                                                       pattern: str) -> None:
    vitkit.save_pretrained(tiny_labelled_vit(), tmp_path / "m")
    f = tmp_path / "a.png"
    Image.fromarray(np.zeros((40, 160, 3), dtype=np.uint8)).save(f)
    assert main(["predict", str(f), "--model", str(tmp_path / "m"), *extra]) == 2
    assert pattern in capsys.readouterr().err
