"""Checkpoint families written by timm (DeiT distilled, SigLIP-style towers) load with timm's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from tests.inputs import FAMILIES, noise_folder
from vitkit.cli import main
from vitkit.formats import save_pretrained


def test_deit_distilled_checkpoints_written_by_timm_load_with_timms_outputs(tmp_path: Path, capsys) -> None:  # noqa: ANN001

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    for path, hints in ((FAMILIES / "deit_distilled_hub", {}), (FAMILIES / "deit_distilled.safetensors",
                                                                {"num_heads": 4})):
        m = vitkit.load_pretrained(path, **hints)
        assert m.config.distill_token and m.config.num_class_tokens == 2
        with torch.no_grad():  # eval mode: the two heads averaged, as timm does
            torch.testing.assert_close(m(x), torch.from_numpy(ref["deit_distilled_logits"]), rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(m.forward_features(x), torch.from_numpy(ref["deit_distilled_features"]),
                                       rtol=2e-5, atol=2e-5)
    # saved back where the format can hold it (timm: deit_*_distilled; vitkit), refused by name where not
    back = save_pretrained(m, tmp_path / "back_timm", format="timm")
    assert json.loads((back / "config.json").read_text())["architecture"].startswith("deit_")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["deit_distilled_logits"]),
                                   rtol=2e-5, atol=2e-5)
    for fmt in ("hf", "npz"):
        with pytest.raises(ValueError, match="distill_token=True"):
            save_pretrained(m, tmp_path / f"back_{fmt}", format=fmt)
    # the CLI paths: predict, finetune, eval on the fine-tuned model
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "deit_distilled_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    tuned = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert tuned.config.distill_token and tuned.config.num_classes == 3
    assert main(["eval", "--model", str(tmp_path / "ft" / "model"), "--data", str(data)]) == 0


def test_siglip_style_towers_written_by_timm_load_with_timms_outputs(tmp_path: Path) -> None:

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    m = vitkit.load_pretrained(FAMILIES / "siglip_hub")
    assert m.config.pooling == "map" and m.config.num_class_tokens == 0
    with torch.no_grad():
        z = m.forward_features(x)
        for got, key in ((m(x), "siglip_logits"), (z, "siglip_features"),
                         (m.forward_head(z, pre_logits=True), "siglip_pooled")):
            torch.testing.assert_close(got, torch.from_numpy(ref[key]), rtol=2e-5, atol=2e-5, msg=key)
    back = save_pretrained(m, tmp_path / "back", format="timm")  # timm's attn_pool names again
    doc = json.loads((back / "config.json").read_text())
    assert doc["model_args"]["global_pool"] == "map" and doc["model_args"]["class_token"] is False
    from safetensors.torch import load_file

    assert "attn_pool.latent" in load_file(back / "model.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["siglip_logits"]),
                                   rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="pooling='map'"):
        save_pretrained(m, tmp_path / "hf", format="hf")
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "siglip_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["fewshot", "--model", hub, "--data", str(data), "--shots", "2"]) == 0  # features of the MAP head
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    assert vitkit.load_pretrained(tmp_path / "ft" / "model").config.pooling == "map"
