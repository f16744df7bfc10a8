"""Every saver writes the whole model or refuses (formats/writable.py): an unmerged LoRA model is written merged (its
reload gives the adapted model's logits, the merge is logged and recorded in the written config, the caller's model
keeps its adapters), and a tensor no key table takes is refused by name, nothing written."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.helpers import random_vit
from vitkit.formats import load_pretrained, save_pretrained
from vitkit.models.lora import LoraConfig, apply_lora, lora_modules

# case -> (model overrides, format, file name (a folder unless it has a suffix), save_pretrained options)
CASES = {
    "vitkit": ({}, "vitkit", "m", {}),
    "vitkit_sharded": ({}, "vitkit", "m", {"max_shard_size": 20_000}),
    "hf": ({}, "hf", "m", {}),
    "hf_sharded": ({}, "hf", "m", {"max_shard_size": 20_000}),
    "hf_dinov2": ({"layer_scale": 0.1, "num_classes": 0, "in_chans": 3}, "hf", "m", {}),
    "timm": ({}, "timm", "m", {}),
    "timm_file": ({}, "timm", "m.safetensors", {}),
    "npz": ({}, "npz", "m", {}),
    "npz_file": ({}, "npz", "m.npz", {}),
}


def _x(model: torch.nn.Module) -> torch.Tensor:
    c = model.config
    return torch.randn(2, c.in_chans, *c.img_size, generator=torch.Generator().manual_seed(3))


def _written_text(out: Path) -> str:
    """The JSON a checkpoint at `out` was written with: its folder's files, a bare file's metadata or sidecar."""
    if out.is_dir():
        return "".join(f.read_text() for f in sorted(out.glob("*.json")))
    if out.suffix == ".safetensors":
        with safe_open(str(out), "pt") as f:
            return "".join(f.metadata().values())
    return out.with_name(out.stem + ".vitkit.json").read_text()


@pytest.mark.parametrize("case", CASES)
def test_an_unmerged_lora_model_is_written_merged(case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                  ) -> None:
    over, fmt, name, opts = CASES[case]
    model = random_vit(**over)
    apply_lora(model, LoraConfig(rank=2, targets=("q", "v", "proj", "fc1", "fc2")))
    with torch.no_grad():
        for m in lora_modules(model).values():
            for b in m.lora_B.values():
                b.normal_(0, 0.3)  # B non-zero: the adapted model is not the base
    model.eval()
    x = _x(model)
    with torch.no_grad():
        want = model(x)
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        out = save_pretrained(model, tmp_path / name, format=fmt, **opts)
    with torch.no_grad():
        got = load_pretrained(out)(x)
        again = model(x)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert lora_modules(model) and torch.equal(again, want)  # the caller's model keeps its adapters
    assert any("LoRA" in r.getMessage() and "merged" in r.getMessage() for r in caplog.records)
    assert 'merged_lora"' in _written_text(out) and '"rank": 2' in _written_text(out)


@pytest.mark.parametrize("where", ["buffer", "parameter"])
@pytest.mark.parametrize("case", CASES)
def test_a_tensor_no_key_table_takes_is_refused_by_name(case: str, where: str, tmp_path: Path) -> None:
    over, fmt, name, opts = CASES[case]
    model = random_vit(**over)
    if where == "buffer":
        model.register_buffer("calibration", torch.ones(3))
        key = "calibration"
    else:
        model.blocks[1].register_parameter("gain", torch.nn.Parameter(torch.ones(model.config.width)))
        key = "blocks.1.gain"
    with pytest.raises(ValueError, match=rf"cannot save as {fmt}: .*'{key}'"):
        save_pretrained(model, tmp_path / name, format=fmt, **opts)
    assert not (tmp_path / name).exists()
