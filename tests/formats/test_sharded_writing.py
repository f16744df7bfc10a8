"""Sharded writing (issue #39): above `max_shard_size` the vitkit and hf savers write transformers' sharded layout,
which vitkit and transformers read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import vitkit
from vitkit.formats import save_pretrained
from vitkit.formats.sharded import parse_size


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=2, num_heads=2, mlp_dim=32,
                               num_classes=3).eval()


@pytest.mark.parametrize("fmt", ["vitkit", "hf"])
def test_a_model_above_max_shard_size_is_written_in_shards_and_read_back(tmp_path: Path, fmt: str) -> None:
    m = _model()
    x = torch.randn(2, 3, 16, 16)
    out = save_pretrained(m, tmp_path / fmt, format=fmt, max_shard_size="4KB")
    assert not (out / "model.safetensors").exists()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("model-*-of-*.safetensors"))
    n = len(shards)
    assert n > 1 and shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert set(index["weight_map"].values()) == set(shards)
    held, total = set(), 0
    for name in shards:
        with safe_open(str(out / name), "pt") as f:
            keys = set(f.keys())
            sizes = [f.get_tensor(k).numel() * f.get_tensor(k).element_size() for k in keys]
        assert sum(sizes) <= 4000 or len(keys) == 1  # a shard passes the size only for one tensor larger than it
        assert {k for k, s in index["weight_map"].items() if s == name} == keys
        held |= keys
        total += sum(sizes)
    assert index["metadata"]["total_size"] == total and held == set(index["weight_map"])
    back = vitkit.load_pretrained(out)
    with torch.no_grad():
        torch.testing.assert_close(back(x), m(x), rtol=1e-5, atol=1e-5)
    # the same model saved again unsharded over the sharded folder: no shard of the old save is left behind
    again = save_pretrained(m, out, format=fmt)
    assert (again / "model.safetensors").is_file() and not list(again.glob("model-*-of-*.safetensors"))
    assert not (again / "model.safetensors.index.json").exists()


def test_transformers_reads_the_sharded_folder(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    m = _model()
    out = m.save_pretrained(tmp_path / "hf", format="hf", max_shard_size=4000)
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1
    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=x).logits, m(x), rtol=1e-4, atol=1e-4)


def test_max_shard_size_values() -> None:
    assert (parse_size("5GB"), parse_size("2GiB"), parse_size("500mb"), parse_size(1234)) == (
        5 * 10**9, 2 << 30, 500 * 10**6, 1234)
    for bad in ("5 parsecs", "-1GB", 0, True, "GB"):
        with pytest.raises(ValueError, match="max_shard_size"):
            parse_size(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="npz format is not written sharded"):
        save_pretrained(_model(), "unused", format="npz", max_shard_size="1MB")
