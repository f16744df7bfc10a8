"""Backbones in facebookresearch/dinov2's own layout (its torch hub's `dinov2_*_pretrain.pth`) load with the DINOv2
code's tokens, at the model's size and at others (E_pos resampled as its hub builds each kind: DINO's offset 0.1
for the plain backbones, antialiased for the register ones). The fixtures are written by that code itself:
tests/reference/make_dinov2_reference.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from tests.inputs import noise_folder
from vitkit.cli import main

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "dinov2"
REF = np.load(FIX / "outputs.npz", allow_pickle=False)
TOL = dict(rtol=2e-5, atol=2e-5)


def _tokens(m: vitkit.VisionTransformer, side: int) -> torch.Tensor:
    with torch.no_grad():
        return m.forward_features(torch.from_numpy(REF[f"x_{side}"]))


@pytest.mark.parametrize("name,registers,how", [("plain", 0, "bicubic_dino"), ("reg", 2, "bicubic_antialias")])
def test_dinov2_backbones_give_the_dinov2_codes_tokens_at_every_size(name: str, registers: int, how: str) -> None:
    m = vitkit.load_pretrained(FIX / f"dinov2_{name}.pth", num_heads=4)  # width 32 is not one of Table 1's
    c = m.config
    assert (c.num_registers, c.layer_scale, c.posemb_resample, c.ln_eps, c.gelu) == (registers, 1.0, how, 1e-6, "exact")
    assert set(c.extra["assumed"]) == {"posemb_resample", "preprocess"}  # what the file does not say, and said
    assert m.preprocess.mean == (0.485, 0.456, 0.406) and m.preprocess.crop_pct == 0.875
    c.dynamic_img_size = True
    other = vitkit.VisionTransformer(c.replace(posemb_resample="bicubic")).eval()
    other.load_state_dict(m.state_dict())
    for side in (32, 48, 24):
        want = torch.from_numpy(REF[f"{name}_tokens_{side}"])
        torch.testing.assert_close(_tokens(m, side), want, **TOL)
        if side != 32:  # the resampling the hub uses is what makes the other sizes right
            assert (_tokens(other, side) - want).abs().max() > 1e-4


def test_chunked_blocks_are_read_and_giant_swiglu_and_damage_are_refused(tmp_path: Path) -> None:
    state = torch.load(FIX / "dinov2_plain.pth", weights_only=True)
    chunked = {(f"blocks.{k.split('.')[1]}.{k[len('blocks.'):]}" if k.startswith("blocks.") else k): v
               for k, v in state.items()}  # block_chunks = depth: blocks.C.I.*
    assert "blocks.1.1.norm1.weight" in chunked
    torch.save(chunked, tmp_path / "chunked.pth")
    m = vitkit.load_pretrained(tmp_path / "chunked.pth", num_heads=4)
    torch.testing.assert_close(_tokens(m, 32), torch.from_numpy(REF["plain_tokens_32"]), **TOL)
    torch.save({**state, "blocks.0.mlp.w12.weight": torch.zeros(2, 32)}, tmp_path / "giant.pth")
    with pytest.raises(ValueError, match="SwiGLU"):
        vitkit.load_pretrained(tmp_path / "giant.pth", num_heads=4)
    reg = torch.load(FIX / "dinov2_reg.pth", weights_only=True)
    torch.save({**reg, "register_tokens": torch.zeros(4)}, tmp_path / "flat.pth")  # a damaged file: named
    with pytest.raises(ValueError, match=r"flat.pth: tensor 'reg_token' has shape \(4,\), expected a 3-D array"):
        vitkit.load_pretrained(tmp_path / "flat.pth", num_heads=4)


def test_dinov2_backbones_run_through_the_commands_and_convert(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reg = str(FIX / "dinov2_reg.pth")
    data = noise_folder(tmp_path / "data", n=12, classes=2)
    assert main(["fewshot", "--model", reg, "--num-heads", "4", "--data", str(data), "--shots", "2"]) == 0
    assert main(["finetune", "--model", reg, "--num-heads", "4", "--data", str(data), "--out", str(tmp_path / "ft"),
                 "--no-progress", "--img-size", "48", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
                 "train.batch_size=8", "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    tuned = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert (tuned.config.num_registers, tuned.config.posemb_resample, tuned.config.num_classes) == (
        2, "bicubic_antialias", 2)
    assert main(["predict", "--model", str(tmp_path / "ft" / "model"), str(data / "c0" / "000.png")]) == 0
    assert main(["convert", reg, str(tmp_path / "hf"), "--to", "hf", "--num-heads", "4"]) == 0
    doc = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert doc["architectures"] == ["Dinov2WithRegistersModel"] and doc["layerscale_value"] == 1.0
    theirs = transformers.Dinov2WithRegistersModel.from_pretrained(tmp_path / "hf").eval()
    for side in (32, 24):  # transformers' register class also resamples antialiased
        with torch.no_grad():
            out = theirs(pixel_values=torch.from_numpy(REF[f"x_{side}"])).last_hidden_state
        torch.testing.assert_close(out, torch.from_numpy(REF[f"reg_tokens_{side}"]), **TOL)
    assert main(["convert", reg, str(tmp_path / "timm"), "--to", "timm", "--num-heads", "4"]) == 0
    back = vitkit.load_pretrained(tmp_path / "timm")
    torch.testing.assert_close(_tokens(back, 32), torch.from_numpy(REF["reg_tokens_32"]), **TOL)


@pytest.mark.parametrize("name", ["plain", "reg"])
def test_dinov2_backbones_keep_their_own_table_through_other_sizes_and_a_convert(name: str, tmp_path: Path) -> None:
    """Loaded at another size (img_size=24), moved to 48, converted and moved back to 32: every size resampled
    once from the file's own 4x4 table (the DINOv2 code's tokens), and the converted file holds that table."""
    m = vitkit.load_pretrained(FIX / f"dinov2_{name}.pth", num_heads=4, img_size=24)
    assert (m.config.img_size, m.config.posemb_grid) == ((24, 24), (4, 4))
    torch.testing.assert_close(_tokens(m, 24), torch.from_numpy(REF[f"{name}_tokens_24"]), **TOL)
    m.set_img_size(48)
    torch.testing.assert_close(_tokens(m, 48), torch.from_numpy(REF[f"{name}_tokens_48"]), **TOL)
    vitkit.save_pretrained(m, tmp_path / "saved")
    back = vitkit.load_pretrained(tmp_path / "saved")
    back.set_img_size(32)
    torch.testing.assert_close(_tokens(back, 32), torch.from_numpy(REF[f"{name}_tokens_32"]), **TOL)
