"""The habits of Hugging Face and timm users on vitkit's models (a mixin): `Model.from_pretrained(path)`,
`model.save_pretrained(dir)`, `model.push_to_hub(repo_id)` and timm's `pretrained_cfg` / `default_cfg` view.

The model layer imports nothing but utils, so loading and saving are not implemented here: vitkit.formats, the one
implementation of every checkpoint format, registers its `load_pretrained` / `save_pretrained` with
`set_checkpoint_io` when vitkit is imported, and these methods call them. `pretrained_cfg` is derived from the
model's preprocessing contract (`model.preprocess`, models/preprocess.py), which every checkpoint carries.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

_IO: dict[str, Callable[..., Any]] = {}


def set_checkpoint_io(load: Callable[..., Any], save: Callable[..., Any], push: Callable[..., Any]) -> None:
    """Register the checkpoint loader, saver and publisher (vitkit.formats' `load_pretrained`, `save_pretrained`,
    `push_to_hub`)."""
    _IO.update(load=load, save=save, push=push)


def load_checkpoint(path: str | Path, **kwargs: Any) -> Any:
    """The registered loader (vitkit.load_pretrained): a local path or a hub id, with its keywords."""
    return _IO["load"](path, **kwargs)


class HubApi:
    """`from_pretrained`, `save_pretrained` and `pretrained_cfg` for a model with `config` and `preprocess`."""

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> Any:
        """Load a checkpoint of any format vitkit reads, a local path or a Hugging Face hub id (vitkit.load_pretrained;
        its keywords, e.g. `revision`, `num_classes`, `img_size`, `num_heads`, mean the same)."""
        model = _IO["load"](path, **kwargs)
        if not isinstance(model, cls):
            raise ValueError(f"{path}: holds a {type(model).__name__}, not a {cls.__name__}; load it with "
                             f"{type(model).__name__}.from_pretrained or vitkit.load_pretrained")
        return model

    def save_pretrained(self, save_directory: str | Path, format: str = "vitkit", **kwargs: Any) -> Path:
        """Write the model as vitkit.save_pretrained does (`format`: "vitkit", "hf", "timm" or "npz"; its keywords,
        e.g. `max_shard_size`, mean the same) and return the path written."""
        return _IO["save"](self, save_directory, format=format, **kwargs)

    def push_to_hub(self, repo_id: str, format: str = "vitkit", **kwargs: Any) -> str:
        """Publish the model to the Hugging Face hub repo `repo_id` as vitkit.formats.push_to_hub does (saved in
        `format` with a model card; its keywords `revision`, `private`, `commit_message` mean the same); returns the
        commit id."""
        return _IO["push"](self, repo_id, format=format, **kwargs)

    @property
    def pretrained_cfg(self) -> dict[str, Any]:
        """timm's pretrained config of this model, from its preprocessing contract: input_size, mean, std,
        interpolation, crop_pct, crop_mode (timm's `resolve_data_config(model=model)` reads these), num_classes,
        label_names, the first conv and the classifier's names, and whether the input size is fixed."""
        pre, cfg = self.preprocess, self.config  # type: ignore[attr-defined]
        out = pre.to_timm()
        out = {**out, "input_size": tuple(out["input_size"]), "mean": tuple(out["mean"]), "std": tuple(out["std"])}
        fixed = not getattr(cfg, "dynamic_img_size", False)
        stem = "patch_embed.proj" if hasattr(cfg, "patch_size") else "stem.conv"
        if getattr(cfg, "resnet_layers", None) is not None:
            stem = "patch_embed.backbone.stem.conv"
        tagged = (getattr(cfg, "extra", None) or {}).get("pretrained", {})  # weights by name / hub id: repo, tag, ...
        return {"architecture": getattr(cfg, "name", "") or type(self).__name__, **out, **tagged,
                "num_classes": cfg.num_classes, "label_names": list(pre.labels), "fixed_input_size": fixed,
                "first_conv": stem, "classifier": "head"}

    @property
    def default_cfg(self) -> dict[str, Any]:
        """timm's older name of `pretrained_cfg`."""
        return self.pretrained_cfg
