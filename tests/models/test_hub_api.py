"""Hugging Face and timm users' habits (issue #39): `Model.from_pretrained(path)`, `model.save_pretrained(dir)`
and timm's `pretrained_cfg` / `default_cfg` view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.inputs import FAMILIES, TIMM_FIXTURE
from vitkit.models import ResNetV2, VisionTransformer


def test_save_pretrained_and_from_pretrained_on_local_paths(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                            num_classes=3).eval()
    x = torch.randn(2, 3, 16, 16)
    for fmt in ("vitkit", "hf", "timm"):
        out = m.save_pretrained(tmp_path / fmt, format=fmt) if fmt != "vitkit" else m.save_pretrained(tmp_path / fmt)
        assert out == tmp_path / fmt and (out / "config.json").is_file()
        back = VisionTransformer.from_pretrained(out)
        assert isinstance(back, VisionTransformer) and not back.training
        with torch.no_grad():
            torch.testing.assert_close(back(x), m(x), rtol=1e-5, atol=1e-5)
    transformers = pytest.importorskip("transformers")
    hf = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=x).logits, m(x), rtol=1e-4, atol=1e-4)
    # from_pretrained takes load_pretrained's keywords (a new head, §3.2)
    assert VisionTransformer.from_pretrained(tmp_path / "vitkit", num_classes=7).config.num_classes == 7
    # a two-unit BiT at half width: a ResNetV2 all the same (an R50x1's 94 MB of random weights took 1.2 CPU s to write)
    bit = vitkit.create_model("bit", layers=(1, 1), width_factor=0.5, img_size=32, num_classes=2)
    bit.save_pretrained(tmp_path / "bit")
    assert isinstance(ResNetV2.from_pretrained(tmp_path / "bit"), ResNetV2)
    with pytest.raises(ValueError, match="holds a ResNetV2, not a VisionTransformer"):
        VisionTransformer.from_pretrained(tmp_path / "bit")


def test_a_missing_plain_path_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # hub ids are fetched through huggingface_hub (tests/formats/test_hub_ids.py); a plain path is only a path
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at nothing_here$"):
        vitkit.load_pretrained("nothing_here")


def test_pretrained_cfg_is_timms_view_of_the_preprocessing() -> None:
    # a folder timm wrote: the view gives back what timm's pretrained_cfg said
    doc = json.loads((TIMM_FIXTURE / "hub" / "config.json").read_text())["pretrained_cfg"]
    m = vitkit.load_pretrained(TIMM_FIXTURE / "hub")
    pc = m.pretrained_cfg
    assert m.default_cfg == pc
    for key in ("input_size", "mean", "std", "interpolation", "num_classes"):
        assert pc[key] == (tuple(doc[key]) if isinstance(doc[key], list) else doc[key]), key
    if doc.get("crop_mode", "center") == "center":
        assert pc["crop_pct"] == doc["crop_pct"]
    # a timm name: the name's default pretrained config (DINOv2: 518 px, ImageNet mean / std, crop 1.0, no head)
    d = vitkit.create_model("vit_small_patch14_dinov2").pretrained_cfg
    assert (d["architecture"], d["input_size"], d["mean"], d["std"], d["interpolation"], d["crop_pct"],
            d["crop_mode"], d["num_classes"], d["first_conv"], d["fixed_input_size"]) == (
        "vit_small_patch14_dinov2", (3, 518, 518), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "bicubic", 1.0,
        "center", 0, "patch_embed.proj", True)
    # the original code's evaluation (no crop) is timm's crop_pct 1.0 with "squash": a plain resize
    p = vitkit.create_model("vit_ti16", img_size=32, num_classes=2).pretrained_cfg
    assert (p["crop_pct"], p["crop_mode"], p["mean"]) == (1.0, "squash", (0.5, 0.5, 0.5))
    hub = vitkit.load_pretrained(FAMILIES / "siglip_hub")
    assert hub.pretrained_cfg["input_size"] == (3, 32, 32) and hub.pretrained_cfg["interpolation"] == "bicubic"
