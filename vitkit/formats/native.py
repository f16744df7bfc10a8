"""vitkit's own checkpoint format: a folder with `config.json` + `model.safetensors`.

config.json holds {"format": "vitkit", "model": ViTConfig, "preprocess": PreprocessConfig}.
Writes are atomic; loading never unpickles (safetensors only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from vitkit.data.preprocess import PreprocessConfig
from vitkit.formats.common import Choices, load_state_checked, read_safetensors
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils.atomic import atomic_write_text, atomic_write_with

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_TAG = "vitkit"


def is_native_dir(path: Path) -> bool:
    if not (path.is_dir() and (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file()):
        return False
    try:
        return json.loads((path / CONFIG_NAME).read_text()).get("format") == FORMAT_TAG
    except (OSError, ValueError):
        return False


def save_native(model: VisionTransformer, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write `model` (weights, config and its `preprocess`) to `out_dir`, each file atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write_with(out / WEIGHTS_NAME, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    doc = {"format": FORMAT_TAG, "model": model.config.to_dict(), "preprocess": model.preprocess.to_dict()}
    if extra:
        doc.update(extra)
    atomic_write_text(out / CONFIG_NAME, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return out


def load_native(path: str | Path, hints: dict[str, Any] | None = None) -> VisionTransformer:
    """Load a vitkit folder: everything is in config.json (a hint that contradicts it is an error)."""
    folder = Path(path)
    cfg_path = folder / CONFIG_NAME
    try:
        doc = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{cfg_path}: cannot read the model config: {e}") from e
    if "model" not in doc:
        raise ValueError(f"{cfg_path}: no 'model' entry; is this a vitkit checkpoint?")
    try:
        cfg = ViTConfig.from_dict(doc["model"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{cfg_path}: {e}") from e
    choices = Choices(cfg_path, hints)
    for key in ("num_heads", "gelu", "ln_eps", "pooling"):
        choices.pick(key, getattr(cfg, key))
    model = VisionTransformer(cfg)
    load_state_checked(model, read_safetensors(folder / WEIGHTS_NAME), folder / WEIGHTS_NAME)
    if "preprocess" in doc:  # else the model's default: the original code's [-1, 1] scaling
        model.preprocess = PreprocessConfig.from_dict(doc["preprocess"])
    return model
