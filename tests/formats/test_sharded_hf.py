"""transformers' sharded saves (`model.safetensors.index.json` / `pytorch_model.bin.index.json` + shards), as
`save_pretrained(max_shard_size=...)` writes them, load with transformers' outputs; a damaged index or shard and a
folder without weights are named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.cli import main

transformers = pytest.importorskip("transformers")


def _hf(tmp_path: Path, safe: bool) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    hf = transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8,
        num_labels=3)).eval()
    out = tmp_path / ("safe" if safe else "bin")
    hf.save_pretrained(out, max_shard_size="20KB")
    if not safe:  # transformers 4's pytorch_model-0000i-of-0000n.bin layout (transformers 5 writes safetensors only)
        from safetensors.torch import load_file

        index = out / "model.safetensors.index.json"
        doc = json.loads(index.read_text())
        names = {n: n.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
                 for n in set(doc["weight_map"].values())}
        for n, b in names.items():
            torch.save(load_file(out / n), out / b)
            (out / n).unlink()
        doc["weight_map"] = {k: names[v] for k, v in doc["weight_map"].items()}
        (out / "pytorch_model.bin.index.json").write_text(json.dumps(doc))
        index.unlink()
    return out, hf


@pytest.mark.parametrize("safe", [True, False])
def test_a_sharded_save_loads_with_transformers_outputs(tmp_path: Path, safe: bool) -> None:
    folder, hf = _hf(tmp_path, safe)
    index = folder / ("model.safetensors.index.json" if safe else "pytorch_model.bin.index.json")
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    assert index.is_file() and len(shards) > 1
    m = vitkit.load_pretrained(folder)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(m(x), hf(pixel_values=x).logits, rtol=2e-5, atol=2e-5)


def test_a_damaged_sharded_save_and_a_weightless_folder_are_named(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder, _ = _hf(tmp_path, True)
    index = folder / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    shard = sorted(set(doc["weight_map"].values()))[-1]
    (folder / shard).rename(tmp_path / shard)
    with pytest.raises(ValueError, match=f"shard {shard} is missing"):
        vitkit.load_pretrained(folder)
    (tmp_path / shard).rename(folder / shard)
    key = next(iter(doc["weight_map"]))
    index.write_text(json.dumps({**doc, "weight_map": {**doc["weight_map"], key: "../elsewhere.safetensors"}}))
    with pytest.raises(ValueError, match="not a shard file beside the index"):
        vitkit.load_pretrained(folder)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(folder / "config.json", bare / "config.json")
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "x.png"), "--model", str(bare)]) == 2
    assert "a transformers 'vit' folder without weights" in capsys.readouterr().err
