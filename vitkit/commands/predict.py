"""Classify image files with a saved model: prints the top-k classes with probabilities.

Any PIL-readable file (PNG, JPEG, ...), any mode: grayscale / RGBA / palette images are converted
to what the model takes. The preprocessing stored with the checkpoint is applied, so no flags are
needed to match training. An unreadable file is reported by name and the others still run.
"""

from __future__ import annotations

import argparse
import sys

from vitkit.commands._load_args import add_load_arguments, load_hints

HELP = "top-k predictions for image files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--topk", type=int, default=5, help="how many classes to print per image (default: 5)")
    p.add_argument("--max-pixels", type=int, default=None,
                   help="skip images with more pixels than this as unreadable (default: Pillow's 179M limit)")
    add_load_arguments(p)


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.formats import load_pretrained
    from vitkit.utils import check_int

    check_int("--topk", args.topk)
    model = load_pretrained(args.model, **load_hints(args))
    if model.config.num_classes == 0:
        raise ValueError(f"{args.model} has no classifier head (num_classes=0): it gives features, not classes; "
                         "use `vitkit fewshot` to evaluate its features, or fine-tune it with `vitkit finetune`")
    pp = model.preprocess
    k = min(args.topk, model.config.num_classes)
    if k < args.topk:
        print(f"note: {args.model} predicts {k} classes; showing {k}", file=sys.stderr)
    failed: list[str] = []
    for path in args.images:
        try:
            x = pp.load_image(path, args.max_pixels)
        except (ValueError, OSError) as e:
            print(f"{path}: skipped: {e}", file=sys.stderr)
            failed.append(path)
            continue
        with torch.no_grad():
            probs = torch.softmax(model(pp.normalize(x[None])).float(), -1)[0]
        top = probs.topk(k)
        preds = ", ".join(
            f"{pp.labels[i] if i < len(pp.labels) else i} ({100 * p:.1f}%)"
            for p, i in zip(top.values.tolist(), top.indices.tolist())
        )
        print(f"{path}: {preds}")
    if failed:
        print(f"{len(failed)} of {len(args.images)} images could not be read: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
