"""Inspect a Vision Transformer as in the paper's §4.5: write Fig. 6 and Fig. 7 as PNGs plus their numbers.

Figures (each with a JSON of the numbers behind it, and inspect.json as a summary):
  embedding_filters.png              principal components of the patch-embedding filters (Fig. 7 left)
  position_embedding_similarity.png  cosine similarity between position embeddings (Fig. 7 centre)
  attention_distance.png             mean attention distance per head vs depth (Fig. 7 right)
  attention_maps.png                 attention rollout to the input, and last-layer heads (Fig. 6)

Images: files, or `skimage:NAME` for scikit-image's sample photos (e.g. skimage:chelsea). Without
--images, 1-channel models (the demo) use the demo's test digits, 3-channel models a few
scikit-image photos.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitkit.commands._load_args import add_load_arguments, load_hints

HELP = "figures of paper §4.5: embedding filters, position-embedding similarity, attention distance, attention maps"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--model", required=True, help="checkpoint vitkit can load (e.g. runs/demo)")
    parser.add_argument("--images", nargs="+", metavar="FILE", help="image files or skimage:NAME (default: see above)")
    parser.add_argument("--out", default="runs/inspect", help="output folder (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="write into an existing, non-empty --out")
    parser.add_argument(
        "--num-images", type=int, default=32, help="default images to use when --images is not given (default: 32)"
    )
    parser.add_argument("--show", type=int, default=6, help="images drawn in attention_maps.png (default: 6)")
    parser.add_argument("--components", type=int, default=28, help="principal components of E to draw (default: 28)")
    parser.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default: 16)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_load_arguments(parser, img_size=True)


def run(args: argparse.Namespace) -> int:
    import vitkit
    from vitkit.inspect.report import default_images, inspect_model, load_images, model_preprocess

    for flag in ("num_images", "show", "components", "batch_size"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    dest = Path(args.out)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(20, "--out is a file; inspect writes a folder of figures", str(dest))
    if dest.is_dir() and any(dest.iterdir()) and not args.overwrite:  # the rule of every writer
        raise FileExistsError(f"{dest} already exists and is not empty; choose another --out, or --overwrite")
    model = vitkit.load_pretrained(args.model, **load_hints(args))

    unread: list[str] = []

    def warn(msg: str) -> None:
        unread.append(msg)
        print(f"vitkit inspect: warning: {msg}", file=sys.stderr)

    if args.images:
        images = load_images(args.images, model_preprocess(model), warn)
    else:
        images = default_images(model, args.num_images)
    name = model.config.name or Path(args.model).name
    summary = inspect_model(
        model,
        images,
        args.out,
        name=name,
        num_components=args.components,
        show=args.show,
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    out = Path(args.out)
    print(f"inspected {name} on {len(images)} images -> {out}")
    for key, fig in summary["figures"].items():
        if "skipped" in fig:
            print(f"  {key}: skipped ({fig['skipped']})")
        else:
            print(f"  {out / fig['png']}  (+ {fig['json']})")
    layers = summary["figures"]["attention_distance"]["mean_over_heads_per_layer"]
    print("  mean attention distance per layer (px): " + ", ".join(f"{d:.1f}" for d in layers))
    return 1 if unread else 0  # the job ran; the skipped images are named above
