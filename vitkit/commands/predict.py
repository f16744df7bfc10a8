"""Classify images with a saved model: the top-k classes with probabilities, for files, folders and lists.

Inputs are image files, folders (searched recursively for images) and list files (`.txt` / `.lst`: one
image path per line, relative to the list; anything after the path, such as a label, is ignored). They
are streamed in batches through the model's own preprocessing (stored with the checkpoint, so no flags
are needed to match training), with a progress bar. Any PIL-readable file in any mode works; an
unreadable file is named and skipped, the others still run, and the exit code is 1. `--output` writes a
CSV or JSONL table (path, top-k labels, probabilities). The default precision is fp32, the checkpoint's own
answer; `--precision auto` runs bf16 where the hardware multiplies bf16 natively and says what that costs;
`--runtime auto` (the default) runs the fastest installed CPU runtime for the precision
(`vitkit.inference.runtime`); both say what they chose. `--native` keeps each image's aspect ratio (NaViT): resized
to at most `--max-patches` patches, no crop, packed with the others (torch only: an exported graph has one size).
"""

from __future__ import annotations

import argparse
import sys

from vitkit.commands._load_args import add_load_arguments, load_for_inference
from vitkit.commands._merge_args import add_merge_argument
from vitkit.commands._runtime_args import (
    add_runtime_arguments,
    check_native,
    native_precision,
    predictor_for,
)
from vitkit.utils.files import OutputFile
from vitkit.utils.options import add_native_arguments

HELP = "top-k predictions for image files, folders and list files (batched; CSV / JSONL output)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("images", nargs="+", help="image files, folders of images, or .txt / .lst lists of image paths")
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--topk", type=int, default=5, help="how many classes to report per image (default: 5)")
    p.add_argument("--output", default=None,
                   help="also write the predictions to this .csv or .jsonl file (path, labels, probabilities)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    p.add_argument("--workers", type=int, default=0, help="image-decoding processes (default: 0, in-process)")
    add_runtime_arguments(p, default_runtime="auto", default_precision=None)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--max-pixels", type=int, default=None,
                   help="skip images with more pixels than this as unreadable (default: Pillow's 179M limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_load_arguments(p, img_size=True)
    add_merge_argument(p)
    add_native_arguments(p)


def run(args: argparse.Namespace) -> int:
    from vitkit.data.preprocess import max_image_pixels
    from vitkit.distributed import check_device
    from vitkit.inference.predict import check_output
    from vitkit.utils import check_int

    check_int("--topk", args.topk)
    check_int("--batch-size", args.batch_size)
    check_int("--workers", args.workers, low=0)
    check_device(args.device)
    check_native(args)
    max_image_pixels(args.max_pixels)  # --max-pixels 0 or a bad $VITKIT_MAX_IMAGE_PIXELS: refused before any work
    if not args.output:
        return _predict(args, None)
    check_output(args.output)
    with OutputFile(args.output, args.overwrite) as claim:  # an existing file refused before any work
        return _predict(args, claim)


def _predict(args: argparse.Namespace, claim: OutputFile | None) -> int:
    from tqdm.auto import tqdm

    from vitkit.inference.predict import expand_inputs, predict_files, write_predictions

    model = load_for_inference(args)
    if model.config.num_classes == 0:
        raise ValueError(f"{args.model} has no classifier head (num_classes=0): it gives features, not classes: "
                         "`vitkit embed` writes them; "
                         "use `vitkit fewshot` to evaluate its features, or fine-tune it with `vitkit finetune`")
    k = min(args.topk, model.config.num_classes)
    if k < args.topk:
        print(f"note: {args.model} predicts {k} classes; showing {k}", file=sys.stderr)
    paths = expand_inputs(args.images)
    rows: list[dict] = []
    failed: list[str] = []
    if args.native:
        from vitkit.inference.predict import predict_native

        precision, max_patches = native_precision(model, args)
        make = lambda done: predict_native(model, paths, max_patches, k, args.batch_size, precision, args.device,  # noqa: E731
                                           args.max_pixels, skipped=failed, progress=done)
    else:
        net = predictor_for(model, args, n_images=len(paths))
        make = lambda done: predict_files(net, model.preprocess, paths, k, args.batch_size, args.workers,  # noqa: E731
                                          args.max_pixels, skipped=failed, progress=done)
    show = not args.no_progress and len(paths) > args.batch_size
    with tqdm(total=len(paths), desc="predict", unit="img", disable=not show, file=sys.stderr) as bar:

        said = [0]

        def done(n: int) -> None:  # a batch is through: name its unreadable files as they come
            for msg in failed[said[0]:]:
                tqdm.write(f"skipped: {msg}", file=sys.stderr)
            said[0] = len(failed)
            bar.update(n)

        for row in make(done):
            rows.append(row)
            if not args.output:
                print(f"{row['path']}: " + ", ".join(f"{lab} ({100 * p:.1f}%)" for lab, p in zip(row["labels"],
                                                                                              row["probs"])))
    if claim is not None:
        write_predictions(rows, claim, k)
        print(f"wrote {len(rows)} predictions to {args.output}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(paths)} images could not be read", file=sys.stderr)
    return 1 if failed else 0
