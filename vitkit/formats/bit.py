"""The BiT baseline's own released checkpoints (big_transfer: `BiT-M-R50x1.npz`, ...), read into `bit_*` models.

Keys (TF names, HWIO kernels): `resnet/root_block/standardized_conv2d/kernel` (7, 7, C, 64·w),
`resnet/block{s}/unit{uu}/{a,b,c}/{standardized_conv2d/kernel, group_norm/gamma, group_norm/beta}`,
`resnet/block{s}/unit01/a/proj/standardized_conv2d/kernel` (the projection shortcut),
`resnet/group_norm/{gamma,beta}` (before the head) and `resnet/head/conv2d/{kernel,bias}` (1, 1, F, K).
Unit "a" is the pre-activation GroupNorm + 1x1 conv, "b" the 3x3 (strided) conv, "c" the last 1x1 conv.
The architecture is read from the shapes: the width factor from the root conv, the units per stage from
the unit keys, the classes from the head. BiT's numerics (big_transfer's bit_jax: symmetric zero padding,
kernels standardised with eps 1e-10 under the square root, GroupNorm eps 1e-5) are the format's, logged;
the resolution is not in the file (BiT pre-trained at 224 px: assumed and logged unless `img_size=` says).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.formats.common import (
    Choices,
    KeyTable,
    built_to_load,
    gather_state,
    load_state_checked,
    require,
    resnet_width_factor,
    units_per_stage,
)
from vitkit.formats.npz import NPZ_TO_TORCH, read_npz
from vitkit.models.resnet import BiTConfig, ResNetV2

ROOT = "resnet/root_block/standardized_conv2d/kernel"
NPZ_TO_TORCH_BIT = {**NPZ_TO_TORCH, "head": lambda a: a.reshape(a.shape[-2], a.shape[-1]).T}  # (1,1,F,K)->(K,F)


def is_bit_npz(path: Path) -> bool:
    """An .npz whose arrays include BiT's root conv (the file list is read, no array is loaded)."""
    if not (path.is_file() and path.suffix == ".npz"):
        return False
    if not zipfile.is_zipfile(path):
        return False  # the npz reader names what the file is
    try:
        with zipfile.ZipFile(path) as z:
            return f"{ROOT}.npy" in z.namelist()
    except (OSError, ValueError, zipfile.BadZipFile):
        return False


def key_table(cfg: BiTConfig) -> KeyTable:
    """(vitkit key, BiT key, layout) for every tensor of a ResNetV2 with `cfg`'s shape."""
    t = [("stem.conv.weight", ROOT, "conv")]
    for s, units in enumerate(cfg.layers):
        for u in range(units):
            tp, bp = f"stages.{s}.blocks.{u}.", f"resnet/block{s + 1}/unit{u + 1:02d}/"
            for i, part in enumerate("abc", 1):
                t += [(f"{tp}conv{i}.weight", f"{bp}{part}/standardized_conv2d/kernel", "conv"),
                      (f"{tp}norm{i}.weight", f"{bp}{part}/group_norm/gamma", "gn"),
                      (f"{tp}norm{i}.bias", f"{bp}{part}/group_norm/beta", "gn")]
            if u == 0:
                t += [(f"{tp}downsample.conv.weight", f"{bp}a/proj/standardized_conv2d/kernel", "conv")]
    t += [("norm.weight", "resnet/group_norm/gamma", "gn"), ("norm.bias", "resnet/group_norm/beta", "gn")]
    if cfg.num_classes:
        t += [("head.weight", "resnet/head/conv2d/kernel", "head"), ("head.bias", "resnet/head/conv2d/bias", "same")]
    return t


def infer_config(a: dict[str, np.ndarray], path: Path, choices: Choices) -> BiTConfig:
    root = require(a, ROOT, path, 4, "array")
    layers = units_per_stage(a, lambda s: f"resnet/block{s + 1}/unit", "/a/standardized_conv2d/kernel")
    if not layers:
        raise ValueError(f"{path}: no 'resnet/block1/unit01/...' arrays; not a BiT ResNet checkpoint")
    head = a.get("resnet/head/conv2d/kernel")
    if choices.hints:
        raise ValueError(f"{path}: {sorted(choices.hints)} do not apply to a BiT ResNet")
    choices.assumed["numerics"] = ("'bit': big_transfer's own (symmetric padding, weight standardisation eps 1e-10, "
                                   "GroupNorm eps 1e-5)")
    return BiTConfig(layers=layers, width_factor=resnet_width_factor(root.shape[3]), in_chans=int(root.shape[2]),
                     num_classes=int(head.shape[-1]) if head is not None else 0, numerics="bit")


def load_bit_npz(path: str | Path, hints: dict[str, Any] | None = None) -> ResNetV2:
    """Load a big_transfer `.npz` into a `ResNetV2` (eval mode); every array must be accounted for."""
    file = Path(path)
    arrays = read_npz(file)
    choices = Choices(file, hints)
    cfg = infer_config(arrays, file, choices)
    choices.assumed["img_size"] = "(224, 224): not in the file; BiT's pre-training resolution (img_size= to change)"
    model = built_to_load(ResNetV2, choices.record(cfg))
    state = gather_state(arrays, key_table(cfg), model.state_dict(), file,
                         lambda kind, arr: torch.from_numpy(np.ascontiguousarray(NPZ_TO_TORCH_BIT[kind](arr))),
                         lambda kind, shape: shape)
    load_state_checked(model, state, file)
    return model.eval()
