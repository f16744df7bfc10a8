"""The one read door (vitkit.formats.common.read_tensors / tensor_header, vitkit.utils.files.read_json): every
reader of a user's weights or configs goes through it, so a new reader cannot skip its checks (a regular file,
bounded in size, values finite, JSON depth bounded)."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.helpers import random_vit
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


def _poisoned(load):  # noqa: ANN001, ANN202
    """`load_state_checked` run on a model whose every tensor is NaN first: what the load does not overwrite shows."""
    def run(model: torch.nn.Module, state: dict, source: Path) -> None:
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                if t.is_floating_point():
                    t.fill_(float("nan"))
        load(model, state, source)
    return run


@pytest.mark.parametrize("fmt", ["vitkit", "hf", "timm", "npz", "bit"])
def test_loaders_build_without_random_init_and_overwrite_every_tensor(tmp_path: Path, fmt: str, monkeypatch) -> None:  # noqa: ANN001
    """The loaders build their model without its random init (`built_to_load`): no draw from the global generator,
    and the model is the one a build with its init then the same load gives (today's): every tensor overwritten
    (a model filled with NaN before the load comes out the same), bitwise the same outputs."""
    from vitkit.formats import common, load_pretrained, native, npz, save_pretrained, timm
    from vitkit.formats import hf as hf_mod
    from vitkit.models.resnet import ResNetV2

    if fmt == "bit":
        torch.manual_seed(0)
        src = ResNetV2((1, 1, 1, 1), width_factor=0.5, num_classes=3).eval()
        with torch.no_grad():
            for p in src.parameters():
                p.normal_(0, 0.2)
    else:
        src = random_vit()
    path = tmp_path / ("m.safetensors" if fmt == "timm" else "m")
    save_pretrained(src, path, format="vitkit" if fmt == "bit" else fmt)
    hints = {"num_heads": src.config.num_heads} if fmt == "timm" else {}
    x = torch.randn(2, src.config.in_chans, *((32, 32) if fmt == "bit" else src.config.img_size))
    rng = torch.get_rng_state()
    loaded = load_pretrained(path, **hints)
    assert torch.equal(torch.get_rng_state(), rng)  # nothing drawn
    tensors = {n for n, _ in [*loaded.named_parameters(), *loaded.named_buffers()]}
    assert tensors == set(loaded.state_dict())  # no tensor outside the state dict that the strict load fills
    monkeypatch.setattr(common, "no_random_init", contextlib.nullcontext)  # today's build: every init drawn
    for mod in (native, npz, timm, hf_mod):
        monkeypatch.setattr(mod, "load_state_checked", _poisoned(common.load_state_checked))
    today = load_pretrained(path, **hints)
    assert list(today.state_dict()) == list(loaded.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(today.state_dict().values(), loaded.state_dict().values(),
                                                 strict=True))
    with torch.no_grad():
        assert torch.equal(loaded(x), today(x)) and torch.isfinite(loaded(x)).all()


def test_value_check_counts_every_non_finite_value_and_passes_finite_values_whose_sum_overflows() -> None:
    """check_tensor_values sums a tensor first (NaN and Inf carry through a sum) and counts only a suspect one:
    finite weights whose sum overflows pass, every NaN / Inf mix is refused with its exact count."""
    from vitkit.formats.common import check_tensor_values

    for t in (torch.full((8,), 60000.0, dtype=torch.float16), torch.full((4,), 3e38), torch.tensor([1e308, 1e308],
              dtype=torch.float64), torch.zeros(0), torch.randn(3, 5, dtype=torch.bfloat16)):
        check_tensor_values("w", t, None, "f")  # the sum is inf (or nothing) for the first three: counted, none bad
    for values, bad in (([float("inf"), float("-inf"), 1.0], 2), ([float("nan"), 2.0], 1), ([60000.0, 60000.0, float("inf")], 1),
                        ([float("-inf")] * 3, 3)):
        for dtype in (torch.float32, torch.float16):
            with pytest.raises(ValueError, match=f"tensor 'w' holds {bad} non-finite value"):
                check_tensor_values("w", torch.tensor(values).to(dtype), None, "f")
