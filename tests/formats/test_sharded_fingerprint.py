"""A folder vitkit writes records its weights' fingerprint in config.json (issue #39): config.json and weights of two
saves (a mixed replace, files copied across folders) are refused naming both files; foreign folders, and weights
rewritten in place (their header kept), read as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.formats import save_pretrained
from vitkit.formats.sharded import FINGERPRINT_KEY


def _two() -> tuple[torch.nn.Module, torch.nn.Module]:
    out = []
    for seed in (0, 1):  # the same architecture: the files have the same names and shapes
        torch.manual_seed(seed)
        out.append(vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                                       num_classes=3))
    return out[0], out[1]


@pytest.mark.parametrize("fmt", ["vitkit", "hf", "timm"])
def test_weights_swapped_in_from_another_save_are_refused(tmp_path: Path, fmt: str) -> None:
    a, b = _two()
    fa, fb = save_pretrained(a, tmp_path / "a", format=fmt), save_pretrained(b, tmp_path / "b", format=fmt)
    assert FINGERPRINT_KEY in json.loads((fa / "config.json").read_text())
    vitkit.load_pretrained(fa)  # whole: loads
    rec = json.loads((fa / "config.json").read_text())[FINGERPRINT_KEY]
    assert rec["files"] == ["model.safetensors"] and rec["save_id"] != json.loads(
        (fb / "config.json").read_text())[FINGERPRINT_KEY]["save_id"]
    shutil.copyfile(fb / "model.safetensors", fa / "model.safetensors")
    with pytest.raises(ValueError, match="do not belong together") as e:
        vitkit.load_pretrained(fa)
    assert str(fa / "config.json") in str(e.value) and str(fa / "model.safetensors") in str(e.value)
    # the same model saved twice is two saves too (a replace mid-read pairs them): refused alike
    save_pretrained(a, tmp_path / "a2", format=fmt)
    shutil.copyfile(tmp_path / "a2" / "model.safetensors", fa / "model.safetensors")
    with pytest.raises(ValueError, match="do not belong together"):
        vitkit.load_pretrained(fa)


def test_sharded_saves_are_checked_shard_by_shard_and_foreign_folders_read_as_before(tmp_path: Path) -> None:
    a, b = _two()
    fa = save_pretrained(a, tmp_path / "a", format="vitkit", max_shard_size=4000)
    fb = save_pretrained(b, tmp_path / "b", format="vitkit", max_shard_size=4000)
    shard = sorted(fa.glob("model-*-of-*.safetensors"))[-1].name
    shutil.copyfile(fb / shard, fa / shard)
    with pytest.raises(ValueError, match=f"do not belong together.*{shard}|{shard}.*do not belong"):
        vitkit.load_pretrained(fa)
    # config.json of a sharded save beside the single weights file of another save: named too
    single = save_pretrained(b, tmp_path / "single", format="vitkit")
    shutil.copyfile(fa / "config.json", single / "config.json")
    with pytest.raises(ValueError, match=f"{single / 'config.json'} and {single / 'model.safetensors'} do not belong"):
        vitkit.load_pretrained(single)
    # a folder saved again by transformers keeps config.json's unknown keys but writes its own weights (no vitkit save
    # id): the stale record is not a mix, and the folder loads
    transformers = pytest.importorskip("transformers")
    hf = save_pretrained(a, tmp_path / "hf", format="hf")
    resaved = tmp_path / "resaved"
    transformers.ViTForImageClassification.from_pretrained(hf).save_pretrained(resaved)
    assert FINGERPRINT_KEY in json.loads((resaved / "config.json").read_text())
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(resaved)(x), a.eval()(x), rtol=1e-4, atol=1e-4)
