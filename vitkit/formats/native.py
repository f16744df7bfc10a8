"""vitkit's own checkpoint format: a folder with `config.json` + `model.safetensors`.

config.json holds {"format": "vitkit", "arch": "vit" | "bit", "model": ViTConfig or BiTConfig, "preprocess":
PreprocessConfig}; a file without "arch" is a ViT (the format's first version).
Writes are atomic; loading never unpickles (safetensors only).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torch import nn

from vitkit.formats.common import Choices, built_to_load, check_fits_weights, load_state_checked, tensor_header
from vitkit.formats.sharded import (
    FINGERPRINT_KEY,
    check_fingerprint,
    fingerprint,
    has_weights,
    read_weights,
    weight_files,
    write_weights,
)
from vitkit.formats.writable import check_architecture, writable
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.resnet import BiTConfig, ResNetV2
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import read_json

CONFIG_NAME = "config.json"
FORMAT_TAG = "vitkit"


def is_native_dir(path: Path) -> bool:
    if not (path.is_dir() and (path / CONFIG_NAME).is_file() and has_weights(path)):
        return False
    try:
        doc = read_json(path / CONFIG_NAME, "model config")
        return isinstance(doc, dict) and doc.get("format") == FORMAT_TAG
    except (OSError, ValueError):
        return False


ARCHS: dict[str, tuple[type, type]] = {"vit": (VisionTransformer, ViTConfig), "bit": (ResNetV2, BiTConfig)}


def arch_of(model: nn.Module) -> str:
    """The native format's name of a model class ("vit" or "bit"), or a ValueError."""
    for name, (cls, _) in ARCHS.items():
        if isinstance(model, cls):
            return name
    raise ValueError(f"vitkit's format holds ViTs and BiT ResNets, got a {type(model).__name__}")


def save_native(model: nn.Module, out_dir: str | Path, extra: dict[str, Any] | None = None,
                max_shard_size: int | str | None = None) -> Path:
    """Write `model` (weights, config and its `preprocess`) to `out_dir`, each file atomically; the weights sharded
    above `max_shard_size` (formats/sharded.py). Unmerged LoRA adapters are written merged (said in the log and
    kept in config.json's model "extra"); a tensor the model its config describes does not have is refused by name
    (formats/writable.py)."""
    out = Path(out_dir)
    model = writable(model, FORMAT_TAG)
    check_architecture(model, ARCHS[arch_of(model)][0], FORMAT_TAG)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    written = write_weights(out, tensors, {"format": "pt"}, max_shard_size)
    doc = {"format": FORMAT_TAG, "arch": arch_of(model), "model": model.config.to_dict(),
           FINGERPRINT_KEY: fingerprint(written),
           "preprocess": model.preprocess.to_dict()}
    if extra:
        doc.update(extra)
    atomic_write_text(out / CONFIG_NAME, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return out


def _check_fits_weights(cfg: ViTConfig, folder: Path, cfg_path: Path) -> None:
    """Before a model is built: the ViT config.json describes must be about the size of the weights beside it
    (their headers read through the tensor door; a damaged file is named by `read_weights`)."""
    try:
        held = sum(math.prod(shape) for f in weight_files(folder) for shape in tensor_header(f)[0].values())
    except ValueError:
        return  # read_weights names the damage
    check_fits_weights(cfg, held, cfg_path)


def load_native(path: str | Path, hints: dict[str, Any] | None = None) -> nn.Module:
    """Load a vitkit folder: everything is in config.json (a hint that contradicts it is an error)."""
    folder = Path(path)
    cfg_path = folder / CONFIG_NAME
    try:
        doc = read_json(cfg_path, "model config")
    except (OSError, ValueError) as e:
        raise ValueError(f"{cfg_path}: cannot read the model config: {e}") from e
    if "model" not in doc:
        raise ValueError(f"{cfg_path}: no 'model' entry; is this a vitkit checkpoint?")
    arch = doc.get("arch", "vit")
    if arch not in ARCHS:
        raise ValueError(f"{cfg_path}: unknown arch {arch!r}; known: {sorted(ARCHS)}")
    model_cls, cfg_cls = ARCHS[arch]
    try:
        cfg = cfg_cls.from_dict(doc["model"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{cfg_path}: {e}") from e
    choices = Choices(cfg_path, hints)
    choices.agree(cfg, arch)
    if arch == "vit":
        _check_fits_weights(cfg, folder, cfg_path)
    model = built_to_load(model_cls, cfg)
    state, wpath = read_weights(folder)
    check_fingerprint(folder, doc)  # after the read: a folder replaced meanwhile is noticed
    load_state_checked(model, state, wpath)
    if "preprocess" in doc:  # else the model's default: the original code's [-1, 1] scaling
        model.preprocess = PreprocessConfig.from_dict(doc["preprocess"])
    return model
