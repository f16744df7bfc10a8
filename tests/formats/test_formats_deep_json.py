"""JSON nested 10^5 deep in any metadata a loader reads (issue #39: "a config.json nested 10^5 deep gives a
RecursionError") is refused naming the file (and the metadata key), never a RecursionError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.formats import save_pretrained
from vitkit.formats.adapters import read_adapter_config

DEEP = "[" * 100_000 + "]" * 100_000


def _model() -> torch.nn.Module:
    return vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                               num_classes=3)


def _deep_value(path: Path, key: str) -> None:
    """`path`'s JSON object with `key` set to a value nested 10^5 deep (the rest of the document valid)."""
    text = json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != key})
    path.write_text(text[:-1] + f', "{key}": {DEEP}}}')


@pytest.mark.parametrize("fmt, file, key", [("hf", "config.json", "id2label"),
                                            ("hf", "preprocessor_config.json", "image_mean"),
                                            ("timm", "config.json", "pretrained_cfg"),
                                            ("vitkit", "config.json", "preprocess")])
def test_a_deep_value_in_a_folders_json_is_named(tmp_path: Path, fmt: str, file: str, key: str) -> None:
    folder = save_pretrained(_model(), tmp_path / fmt, format=fmt)
    _deep_value(folder / file, key)
    with pytest.raises(ValueError, match=f"{folder / file}.*nested too deep"):
        vitkit.load_pretrained(folder)


def test_deep_json_in_safetensors_metadata_and_side_files_is_named(tmp_path: Path) -> None:
    bare = save_pretrained(_model(), tmp_path / "m.safetensors", format="timm")
    save_file(load_file(bare), str(tmp_path / "deep.safetensors"), metadata={"format": "pt", "vitkit_config": DEEP})
    with pytest.raises(ValueError, match="deep.safetensors metadata vitkit_config.*nested too deep"):
        vitkit.load_pretrained(tmp_path / "deep.safetensors")
    sharded = save_pretrained(_model(), tmp_path / "sh", format="hf", max_shard_size=2000)
    (sharded / "model.safetensors.index.json").write_text(DEEP)
    with pytest.raises(ValueError, match="index.json.*nested too deep"):
        vitkit.load_pretrained(sharded)
    (tmp_path / "ad").mkdir()
    (tmp_path / "ad" / "adapter_config.json").write_text(DEEP)
    with pytest.raises(ValueError, match="adapter_config.json.*nested too deep"):
        read_adapter_config(tmp_path / "ad")
