"""The one read door (vitkit.formats.common.read_tensors / tensor_header, vitkit.utils.files.read_json): every
reader of a user's weights or configs goes through it, so a new reader cannot skip its checks (a regular file,
bounded in size, values finite, JSON depth bounded)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vitkit.formats.common import read_tensors, tensor_header

ROOT = Path(__file__).resolve().parents[2] / "vitkit"
# raw readers of files a user gives (called as module.name or name), and the one module each may be called in
RAW_READERS = {"load_file": "formats/common.py", "torch.load": "formats/common.py", "safe_open": "formats/common.py",
               "json.loads": "utils/files.py", "json.load": "utils/files.py", "np.load": "formats/npz.py"}
READER_PACKAGES = ("formats", "inference", "commands")


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else
                    f.id if isinstance(f, ast.Name) else "")
            out.append((node.lineno, name))
    return out


def test_no_reader_of_weights_or_configs_skips_the_door() -> None:
    """Before: adapters read adapter_config.json with json.loads(path.read_text()) (a FIFO hung, /dev/zero filled
    memory, deep JSON raised RecursionError) and their weights with load_file (no value checks); export sidecars
    and safetensors metadata had their own readers."""
    found = []
    for pkg in READER_PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            for line, name in _calls(ast.parse(f.read_text())):
                if name in RAW_READERS and RAW_READERS[name] != rel:
                    found.append(f"{rel}:{line}: {name}")
    # sharded.save_id parses the bounded header of a file the door already read (its own damage message)
    assert [f for f in found if not f.startswith("formats/sharded.py") or "json.loads" not in f] == []


def test_the_tensor_door_refuses_special_files_and_values_before_any_reader(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="w.safetensors: it is a FIFO, not a regular file"):
        read_tensors(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="w.safetensors: it is a FIFO"):
        tensor_header(tmp_path / "w.safetensors")
    os.symlink("/dev/zero", tmp_path / "z.pth")
    with pytest.raises(ValueError, match="z.pth: it is a device, not a regular file"):
        read_tensors(tmp_path / "z.pth")
    save_file({"w": torch.tensor([1.0, float("inf")]), "i": torch.arange(3)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match="tensor 'w' holds 1 non-finite value"):
        read_tensors(tmp_path / "m.safetensors")
    save_file({"i": torch.arange(3)}, str(tmp_path / "m.safetensors"))
    assert read_tensors(tmp_path / "m.safetensors")["i"].dtype == torch.int64  # a buffer (position_ids) may be int
    with pytest.raises(ValueError, match="tensor 'i' is torch.int64; weights are floating point"):
        read_tensors(tmp_path / "m.safetensors", all_weights=True)
