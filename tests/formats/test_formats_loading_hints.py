"""Loaders never guess silently: what a file's shapes do not determine (heads of fused qkv weights, GELU
flavour, LayerNorm eps, pooling) comes from the file's metadata, the caller, or the format's documented
default (logged and kept in model.config.extra["assumed"]); with no such default it is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.models.vit import VisionTransformer, ViTConfig


def _random(**kw) -> VisionTransformer:
    cfg = dict(img_size=32, patch_size=8, depth=2, mlp_dim=64, num_classes=5, gelu="exact")
    m = VisionTransformer(ViTConfig(**{**cfg, **kw})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m


def test_bare_timm_file_of_another_width_needs_num_heads(tmp_path: Path) -> None:
    """Width 128 with 8 heads: the fused qkv weight has the same shape for any head count, and 64-wide heads
    (2 here) give logits far off. Refused without num_heads; exact with it."""
    m = _random(width=128, num_heads=8)
    torch.save(m.state_dict(), tmp_path / "w128.pth")
    with pytest.raises(ValueError, match=r"w128\.pth: num_heads cannot be read .*--num-heads"):
        vitkit.load_pretrained(tmp_path / "w128.pth")
    x = torch.randn(2, 3, 32, 32)
    wrong = vitkit.load_pretrained(tmp_path / "w128.pth", num_heads=2)
    with torch.no_grad():
        assert (wrong(x) - m(x)).abs().max() > 1e-2  # what a silent guess would have given
        right = vitkit.load_pretrained(tmp_path / "w128.pth", num_heads=8)
        assert torch.equal(right(x), m(x))
    assert right.config.num_heads == 8 and "num_heads" not in right.config.extra.get("assumed", {})


def test_table1_width_is_inferred_and_says_so(tmp_path: Path, caplog) -> None:
    m = _random(width=192, num_heads=3, mlp_dim=768)  # ViT-Ti's width
    torch.save(m.state_dict(), tmp_path / "ti.pth")
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        ours = vitkit.load_pretrained(tmp_path / "ti.pth")
    assert ours.config.num_heads == 3
    assumed = ours.config.extra["assumed"]
    assert "Table 1's width-192 model has 3 heads" in assumed["num_heads"] and set(assumed) == {"num_heads", "gelu", "ln_eps", "preprocess", "pooling"}
    assert any("num_heads is not in the file; assumed 3" in r.message for r in caplog.records)
    # the assumption travels with the model: a re-saved copy says where its values came from
    vitkit.save_pretrained(ours, tmp_path / "vk")
    doc = json.loads((tmp_path / "vk" / "config.json").read_text())
    assert doc["model"]["extra"]["assumed"]["gelu"].startswith("'exact'")


def test_hints_may_not_contradict_what_a_file_records(tmp_path: Path) -> None:
    m = _random(width=48, num_heads=3, gelu="tanh")
    vitkit.save_pretrained(m, tmp_path / "t.safetensors", format="timm")  # vitkit's config rides along
    assert vitkit.load_pretrained(tmp_path / "t.safetensors").config.num_heads == 3
    with pytest.raises(ValueError, match=r"the file says num_heads=3, but num_heads=4 was given"):
        vitkit.load_pretrained(tmp_path / "t.safetensors", num_heads=4)
    vitkit.save_pretrained(m, tmp_path / "vk")
    with pytest.raises(ValueError, match=r"config\.json: the file says gelu='tanh', but gelu='exact' was given"):
        vitkit.load_pretrained(tmp_path / "vk", gelu="exact")


def test_npz_numerics_are_the_originals_unless_given(tmp_path: Path, caplog) -> None:
    m = _random(width=64, num_heads=4, gelu="tanh")
    vitkit.save_pretrained(m, tmp_path / "m.npz", format="npz")
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        ours = vitkit.load_pretrained(tmp_path / "m.npz")
    assert (ours.config.gelu, ours.config.ln_eps, ours.config.num_heads) == ("tanh", 1e-6, 4)  # heads: from shapes
    assert set(ours.config.extra["assumed"]) == {"gelu", "ln_eps"}
    assert any("gelu is not in the file; assumed 'tanh'" in r.message for r in caplog.records)
    exact = vitkit.load_pretrained(tmp_path / "m.npz", gelu="exact")
    assert exact.config.gelu == "exact" and "gelu" not in exact.config.extra["assumed"]


def test_hf_config_without_eps_takes_transformers_default_and_logs_it(tmp_path: Path, caplog) -> None:
    m = _random(width=64, num_heads=4, ln_eps=1e-12)
    vitkit.save_pretrained(m, tmp_path / "hf", format="hf")
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    del doc["layer_norm_eps"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        ours = vitkit.load_pretrained(tmp_path / "hf")
    assert ours.config.ln_eps == 1e-12 and "transformers' ViTConfig default" in ours.config.extra["assumed"]["ln_eps"]
    assert ours.config.num_heads == 4 and "num_heads" not in ours.config.extra["assumed"]


def test_num_heads_on_the_command_line(tmp_path: Path, capsys) -> None:
    m = digits_model(width=32, depth=1, num_heads=8, mlp_dim=32, gelu="exact")
    torch.save(m.state_dict(), tmp_path / "d.pth")
    img = tmp_path / "x.png"
    Image.new("L", (8, 8), 90).save(img)
    assert main(["predict", str(img), "--model", str(tmp_path / "d.pth")]) == 2
    assert "num_heads cannot be read" in capsys.readouterr().err
    assert main(["predict", str(img), "--model", str(tmp_path / "d.pth"), "--num-heads", "8"]) == 0
    assert main(["convert", str(tmp_path / "d.pth"), str(tmp_path / "vk"), "--to", "vitkit", "--num-heads", "8"]) == 0
    assert vitkit.load_pretrained(tmp_path / "vk").config.num_heads == 8
