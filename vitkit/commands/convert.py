"""Convert a checkpoint between formats: vitkit, hf (transformers), timm, npz (original vit_jax keys).

The source format is detected; the outputs of the converted model are the source's (the converter
refuses targets that cannot express the model, e.g. GAP pooling in HF's ViT, exact GELU in .npz).
"""

from __future__ import annotations

import argparse

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.formats import SAVERS
from vitkit.utils.options import add_img_size_argument, legacy_img_size

FORMATS = tuple(SAVERS)  # the formats vitkit writes (vitkit.formats)
HELP = f"convert a checkpoint between the {', '.join(FORMATS[:-1])} and {FORMATS[-1]} formats"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="checkpoint to read (any supported format; detected)")
    parser.add_argument("dst", help="where to write: a folder, or a .npz / .safetensors file for npz / timm")
    parser.add_argument("--to", required=True, choices=FORMATS, dest="to", help="format to write")
    parser.add_argument("--num-classes", type=int, default=None, help="replace the head by a zero K-way head")
    add_img_size_argument(parser, "resample E_pos to this size (paper §3.2); the old `H W` still reads, with a note",
                          legacy_pair=True)
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an existing folder or file (also onto the source itself)")
    add_load_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from vitkit.formats import detect_format, load_pretrained, restore_interrupted, save_pretrained
    from vitkit.formats.hub import resolve_checkpoint

    hints = load_hints(args)  # a hub id is fetched once, here; its snapshot is then read as any folder
    source = resolve_checkpoint(args.src, hints.pop("revision", None), hints.pop("allow_pickle", False))
    src_fmt = detect_format(source)
    src, dst = source.resolve(), Path(args.dst).resolve()
    restore_interrupted(dst)  # an earlier --overwrite killed mid-swap: the old checkpoint is back, and protected
    if not args.overwrite:
        if dst == src or src.is_relative_to(dst) or dst.is_relative_to(src):
            raise FileExistsError(f"{args.dst}: that is (inside) the source {args.src}; converting onto it would "
                                  "replace its files: choose another destination, or --overwrite")
        if dst.is_file() or (dst.is_dir() and any(dst.iterdir())):
            raise FileExistsError(f"{args.dst} already exists; choose another destination, or --overwrite")
    img = legacy_img_size(args.img_size)
    model = load_pretrained(source, num_classes=args.num_classes, img_size=img, **hints)
    out = save_pretrained(model, args.dst, format=args.to)
    print(f"{args.src} ({src_fmt}) -> {out} ({args.to})")
    return 0
