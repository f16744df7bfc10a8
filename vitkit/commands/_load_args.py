"""Options shared by every command that loads a checkpoint: the values a file's shapes do not determine."""

from __future__ import annotations

import argparse
from typing import Any


def add_load_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--posemb", choices=["sincos2d_big_vision", "sincos2d", "none"], default=None,
                   help="position embeddings a file does not store (a big_vision .npz trained with fixed sin-cos ones: "
                   "sincos2d_big_vision, and its --img-size: convert, export and finetune take it; for other commands "
                   "convert the file first)")


def load_hints(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `load_pretrained` given on the command line."""
    return {"num_heads": args.num_heads, "gelu": args.gelu, "ln_eps": args.ln_eps, "pooling": args.pooling,
            "posemb": args.posemb}
