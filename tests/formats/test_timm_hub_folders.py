"""timm hub folders written by timm itself (tests/reference/make_timm_hub_reference.py: a plain ViT augreg, DINOv2 as
the hub ships it and with a pretrained_cfg input size other than the weights' 518 grid, CLIP, SigLIP, a distilled
DeiT; the hub's pretrained_cfg preprocessing, small random weights) go from image files through `vitkit embed` to
the features timm's own pipeline gives: `resolve_data_config` + `create_transform`, then
`forward_head(forward_features(x), pre_logits=True)`, on non-square, large, tiny, grey, RGBA and EXIF-rotated
photos."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vitkit
from vitkit.cli import main

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "timm_hub"
REF = json.loads((FIXTURE / "reference.json").read_text())
FILES = [FIXTURE / "images" / f for f in REF["files"]]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("name", sorted(REF["folders"]))
def test_timm_hub_folders_embed_files_as_timms_own_pipeline(tmp_path: Path, name: str, capsys) -> None:  # noqa: ANN001
    folder, ref = FIXTURE / name, REF["folders"][name]
    model = vitkit.load_pretrained(folder)
    data = ref["data_config"]  # timm's resolve_data_config, read by vitkit from the same pretrained_cfg
    pre = model.preprocess
    assert [3, *pre.img_size] == data["input_size"] and pre.interpolation == data["interpolation"]
    assert list(pre.mean) == data["mean"] and list(pre.std) == data["std"]
    assert (pre.crop_pct or 1.0) == data["crop_pct"] and model.config.grid_size == tuple(ref["grid"])
    if name == "dinov2_224":  # weights on a 37 x 37 grid, run at 224 as timm builds it from the config
        assert "weights at 518x518" in model.config.extra["resampled_for_input"]
    out = tmp_path / "f.npz"
    assert main(["embed", *map(str, FILES), "--model", str(folder), "-o", str(out), "--runtime", "torch",
                 "--no-progress"]) == 0
    if name == "deit":  # timm's pre-logits of a distilled model: the mean of its two tokens, said
        assert "mean of the class and distillation tokens" in capsys.readouterr().err
    with np.load(out, allow_pickle=False) as z:
        paths, feats = list(z["paths"]), z["features"]
    want = np.load(FIXTURE / "features.npz", allow_pickle=False)[name]
    assert paths == list(map(str, FILES)) and feats.shape == want.shape
    cos = _cos(feats, want)
    assert cos.min() >= 0.9999, dict(zip(REF["files"], cos.round(6)))
