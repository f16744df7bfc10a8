"""README "What happens to bad input": an int, bool or complex weight tensor, or a NaN / Inf in one, is refused at
load by every loader, naming the file and the tensor (the check sits in `gather_state` / `load_state_checked`, which
every format passes through, before any cast). The walk: every format vitkit reads x every bad-tensor kind."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import vitkit
from tests.helpers import digits_model
from tests.inputs import FAMILIES, png_bytes
from vitkit.cli import main
from vitkit.formats import save_pretrained

FIXTURES = FAMILIES.parent
HF_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
                patch_size=8)


def _small() -> vitkit.VisionTransformer:
    m = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    torch.nn.init.normal_(m.head.bias)
    return m


def _transformers(cls: str, cfg: str, **kw: object) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        tf = pytest.importorskip("transformers")
        getattr(tf, cls)(getattr(tf, cfg)(**{**HF_SMALL, **kw})).eval().save_pretrained(out)
        return out
    return make


def _copy(src: Path) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        if src.is_dir():
            shutil.copytree(src, out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, out := out.with_suffix(src.suffix))
        return out
    return make


def _timm_pth(out: Path) -> Path:
    out = out.with_suffix(".pth")
    torch.save({"model": load_file(FAMILIES / "deit3.safetensors")}, out)  # a training wrapper, as timm's train.py
    return out


# name -> (writer of a good checkpoint at a path, load_pretrained hints)
SOURCES: dict[str, tuple[Callable[[Path], Path], dict]] = {
    "vitkit": (lambda out: save_pretrained(_small(), out), {}),
    "hf_vit": (lambda out: save_pretrained(_small(), out, format="hf"), {}),
    "hf_deit": (_transformers("DeiTForImageClassificationWithTeacher", "DeiTConfig", num_labels=3), {}),
    "hf_dinov2": (_transformers("Dinov2Model", "Dinov2Config"), {}),
    "hf_dinov2_reg": (_transformers("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", num_register_tokens=2), {}),
    "hf_clip": (_transformers("CLIPVisionModel", "CLIPVisionConfig"), {}),
    "hf_siglip": (_transformers("SiglipVisionModel", "SiglipVisionConfig"), {}),
    "hf_mae": (_transformers("ViTMAEModel", "ViTMAEConfig", mask_ratio=0.0), {}),
    "timm_hub": (_copy(FAMILIES / "deit3_hub"), {}),
    "timm_safetensors": (_copy(FAMILIES / "deit3.safetensors"), {"num_heads": 4}),
    "timm_pth": (_timm_pth, {"num_heads": 4}),
    "vit_jax_npz": (lambda out: save_pretrained(_small(), out.with_suffix(".npz"), format="npz"), {}),
    "big_vision_npz": (_copy(FIXTURES / "big_vision" / "tok_learn.npz"), {}),
    "dinov2_hub_pth": (_copy(FIXTURES / "dinov2" / "dinov2_plain.pth"), {"num_heads": 4}),
    "openai_clip": (_copy(FIXTURES / "openclip" / "clip_quickgelu.pt"), {"gelu": "quick"}),
}
KINDS = ("int32", "int64", "bool", "complex64", "nan", "inf")


def _weights(path: Path) -> Path:
    if path.is_file():
        return path
    return next(path / n for n in ("model.safetensors", "model.npz", "pytorch_model.bin") if (path / n).is_file())


def _target(keys: list[str]) -> str:
    """A bias every loader reads (of the image tower, where a file holds a text tower too)."""
    keys = [k for k in keys if "bias" in k.lower()]
    visual = [k for k in keys if k.startswith("visual.")]
    return sorted(visual or keys)[-1]


def _bad(t: np.ndarray | torch.Tensor, kind: str) -> np.ndarray | torch.Tensor:
    if kind in ("nan", "inf"):
        t = t.copy() if isinstance(t, np.ndarray) else t.clone()
        t.reshape(-1)[0] = float(kind)
        return t
    if isinstance(t, np.ndarray):
        return (t * 10).astype(kind if kind != "bool" else np.bool_)
    return (t * 10).to(getattr(torch, kind))


def _corrupt(file: Path, kind: str) -> str:
    """Replace one tensor of `file` by a bad one (in place); returns its key."""
    if file.suffix == ".npz":
        with np.load(file, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        key = _target(list(arrays))
        arrays[key] = _bad(arrays[key], kind)
        np.savez(file, **arrays)
    elif file.suffix == ".safetensors":
        state = load_file(file)
        key = _target(list(state))
        state[key] = _bad(state[key], kind).contiguous()
        from safetensors import safe_open

        with safe_open(str(file), "pt") as f:
            meta = f.metadata()
        save_file(state, str(file), metadata=meta)
    else:
        obj = torch.load(file, weights_only=True)
        state = obj.get("model", obj)
        key = _target(list(state))
        state[key] = _bad(state[key], kind)
        torch.save(obj, file)
    return key


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_format_refuses_every_bad_tensor_kind_by_name(source: str, tmp_path: Path) -> None:
    write, hints = SOURCES[source]
    good = write(tmp_path / "good")
    vitkit.load_pretrained(good, **hints)  # the unspoilt file loads
    for kind in KINDS:
        bad = _copy(good)(tmp_path / kind)
        key = _corrupt(_weights(bad), kind)
        want = "non-finite value" if kind in ("nan", "inf") else f"is torch.{kind}"
        # values (NaN, Inf, complex) are checked at the read door, by the file's own key; a dtype against the model's
        # tensor, which CLIP's file names otherwise (the image tower's timm tensor it is read into)
        mapped = key.replace("visual.transformer.resblocks.", "blocks.").replace("c_proj", "fc2")
        names = f"({key}|{mapped})" if source == "openai_clip" else key
        with pytest.raises(ValueError, match=f"{_weights(bad).name}: tensor '{names}' (holds 1 |is torch)") as e:
            vitkit.load_pretrained(bad, **hints)
        assert want in str(e.value), (kind, str(e.value))


def test_an_int_weight_tensor_is_a_user_error_in_the_commands(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    bad = save_pretrained(_small(), tmp_path / "m", format="hf")
    key = _corrupt(bad / "model.safetensors", "int32")
    (tmp_path / "x.png").write_bytes(png_bytes())
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "x.png"), "--model", str(bad)]) == 2
    assert f"tensor '{key}' is torch.int32" in capsys.readouterr().err
    assert main(["convert", str(bad), str(tmp_path / "out"), "--to", "vitkit"]) == 2
    assert f"tensor '{key}' is torch.int32" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
