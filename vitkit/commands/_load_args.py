"""Options shared by every command that loads a checkpoint: the values a file's shapes do not determine (their
names, choices and help are `vitkit.utils.options.LOAD_HINTS`)."""

from __future__ import annotations

import argparse
from typing import Any

from vitkit.utils import to_pair
from vitkit.utils.options import LOAD_HINTS, add_img_size_argument


def add_load_arguments(p: argparse.ArgumentParser, img_size: bool = False) -> None:
    """The loading hints; `img_size`: also --img-size, for the commands that have no resolution option of their
    own (convert, export and finetune do)."""
    for flag, (_, kw) in LOAD_HINTS.items():
        p.add_argument(flag, default=None, **kw)
    if img_size:
        add_img_size_argument(p, "run at this resolution, E_pos resampled in 2D (paper §3.2); the size of a file "
                              "that stores no position embeddings (a big_vision sin-cos .npz)", dest="load_img_size")
    p.add_argument("--revision", default=None, help="with a Hugging Face hub id as the model: its branch, tag or "
                   "commit (default: main); a local path always wins over a hub id of the same spelling")
    p.add_argument("--allow-pickle", action="store_true", help="with a hub id: also fetch pickled weights "
                   "(pytorch_model.bin), read with torch.load(weights_only=True); default: safetensors only")


def load_hints(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `load_pretrained` given on the command line."""
    hints = {name: getattr(args, flag[2:].replace("-", "_")) for flag, (name, _) in LOAD_HINTS.items()}
    size = getattr(args, "load_img_size", None)  # this module's --img-size; the commands with their own pass theirs
    if size is not None:
        hints["img_size"] = size
    if getattr(args, "revision", None) is not None:  # the hub's keywords (formats/hub.py), only when given
        hints["revision"] = args.revision
    if getattr(args, "allow_pickle", False):
        hints["allow_pickle"] = True
    return hints


def load_for_inference(args: argparse.Namespace) -> Any:
    """The model predict / embed / eval run: a checkpoint (`load_pretrained` with the loading hints, then --merge),
    or an exported file (`.onnx`, `.xml`, `.pt2`, vitkit.inference.backends.ExportedModel) run on its own runtime
    with its own preprocessing and labels; an option a fixed graph cannot take is refused by name."""
    from vitkit.commands._merge_args import apply_merge
    from vitkit.inference.backends import is_exported, load_exported

    if not is_exported(args.model):
        from vitkit.formats import load_pretrained

        return apply_merge(load_pretrained(args.model, **load_hints(args)), args)
    model = load_exported(args.model)
    hints = {k: v for k, v in load_hints(args).items() if k != "img_size"}
    given = [f"--{k.replace('_', '-')}" for k, v in hints.items() if v not in (None, False)]
    if getattr(args, "merge", 0):
        given.append("--merge (the graph's token merging is fixed when it is exported)")
    if getattr(args, "native", False):
        given.append("--native (the graph has one fixed input size)")
    if given:
        raise ValueError(f"{args.model} is an exported graph, fixed when it was written: {', '.join(given)} "
                         "applies to checkpoints; use the checkpoint, or export it again with the option")
    size = getattr(args, "load_img_size", None)
    if size is not None and to_pair(size, "--img-size") != tuple(model.config.img_size):
        h, w = model.config.img_size
        raise ValueError(f"--img-size {size}: {args.model} is exported at {h}x{w} (fixed in its graph); export the "
                         "checkpoint again with --img-size")
    return model


def feature_model(model: Any, pool: str, normalize: bool) -> Any:
    """What `vitkit embed` runs: a checkpoint's `FeatureNet`, or an exported file's output (`as_features`)."""
    from vitkit.inference.backends import ExportedModel
    from vitkit.inference.features import FeatureNet

    return model.as_features(pool, normalize) if isinstance(model, ExportedModel) else FeatureNet(model, pool,
                                                                                                 normalize)
