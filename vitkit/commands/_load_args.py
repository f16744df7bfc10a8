"""Options shared by every command that loads a checkpoint: the values a file's shapes do not determine (their
names, choices and help are `vitkit.utils.options.LOAD_HINTS`)."""

from __future__ import annotations

import argparse
from typing import Any

from vitkit.utils.options import LOAD_HINTS, add_img_size_argument


def add_load_arguments(p: argparse.ArgumentParser, img_size: bool = False) -> None:
    """The loading hints; `img_size`: also --img-size, for the commands that have no resolution option of their
    own (convert, export and finetune do)."""
    for flag, (_, kw) in LOAD_HINTS.items():
        p.add_argument(flag, default=None, **kw)
    if img_size:
        add_img_size_argument(p, "run at this resolution, E_pos resampled in 2D (paper §3.2); the size of a file "
                              "that stores no position embeddings (a big_vision sin-cos .npz)", dest="load_img_size")


def load_hints(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `load_pretrained` given on the command line."""
    hints = {name: getattr(args, flag[2:].replace("-", "_")) for flag, (name, _) in LOAD_HINTS.items()}
    size = getattr(args, "load_img_size", None)  # this module's --img-size; the commands with their own pass theirs
    if size is not None:
        hints["img_size"] = size
    return hints
