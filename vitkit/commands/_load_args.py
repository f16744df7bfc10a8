"""Options shared by every command that loads a checkpoint: the values a file's shapes do not determine."""

from __future__ import annotations

import argparse
from typing import Any


def add_load_arguments(p: argparse.ArgumentParser, img_size: bool = False) -> None:
    """The loading hints; `img_size`: also --img-size, for the commands that have no resolution option of their
    own (convert, export and finetune do)."""
    p.add_argument("--num-heads", type=int, default=None,
                   help="attention heads, for a file that does not record them (a bare timm state dict whose width "
                   "is not one of Table 1's); must agree with a file that does")
    p.add_argument("--gelu", choices=["tanh", "exact", "quick"], default=None,
                   help="GELU flavour, for a file that does not record it (default: the format's own; quick: OpenAI "
                   "CLIP's QuickGELU)")
    p.add_argument("--pooling", choices=["token", "gap", "map"], default=None,
                   help="pooling, for a file that does not record it (a bare timm file with a class token: token, "
                   "assumed and logged; gap for one trained with global_pool='avg')")
    p.add_argument("--ln-eps", type=float, default=None,
                   help="LayerNorm eps, for a file that does not record it (default: the format's own)")
    p.add_argument("--posemb", choices=["sincos2d_big_vision", "none"], default=None,
                   help="position embeddings a file does not store (a big_vision .npz trained with fixed sin-cos ones: "
                   "sincos2d_big_vision, with its --img-size)")
    if img_size:
        p.add_argument("--img-size", type=_size, default=None, metavar="S|HxW", dest="load_img_size",
                       help="run at this resolution, E_pos resampled in 2D (paper §3.2); the size of a file that "
                       "stores no position embeddings (a big_vision sin-cos .npz)")


def load_hints(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `load_pretrained` given on the command line."""
    hints = {"num_heads": args.num_heads, "gelu": args.gelu, "ln_eps": args.ln_eps, "pooling": args.pooling,
             "posemb": args.posemb}
    size = getattr(args, "load_img_size", None)  # this module's --img-size; the commands with their own pass theirs
    if size is not None:
        hints["img_size"] = size
    return hints


def _size(text: str) -> int | tuple[int, int]:
    """`S` (a square side) or `HxW`, one word so that a command's image arguments may follow it."""
    try:
        parts = [int(v) for v in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"expected a size S or HxW in pixels, got {text!r}")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])
