"""Features for image files, folders and lists: one vector per image, written as .npz, .parquet or .jsonl.

Images are streamed in batches through the model's own preprocessing (the checkpoint's resize, crop,
interpolation, mean and std: no flags needed) with a progress bar. The default feature is the family's pooled
output as its own library returns it (transformers' `pooler_output`; CLIP's projected image embedding where
the file has the projection); `--pool` picks another (cls, mean, cls_mean, pre_logits, logits, patch) and
`--normalize` scales each to unit length for cosine retrieval. The .npz holds `paths` (str) and `features`
(float32, N x D). An unreadable file is named and skipped, the others are still written, and the exit code is 1.
Precision, runtime, compilation and threads are `predict`'s options, and so are `--native` / `--max-patches` (each
image at its own aspect ratio, packed: NaViT).
"""

from __future__ import annotations

import argparse
import sys

from vitkit.commands._load_args import add_load_arguments, feature_model, load_for_inference
from vitkit.commands._merge_args import add_merge_argument
from vitkit.commands._runtime_args import (
    add_runtime_arguments,
    check_native,
    native_precision,
    predictor_for,
)
from vitkit.utils.files import OutputFile
from vitkit.utils.options import add_native_arguments

HELP = "features of image files, folders and lists (batched; .npz / .parquet / .jsonl output)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from vitkit.inference.features import FEATURES

    p.add_argument("images", nargs="+", help="image files, folders of images, or .txt / .lst lists of image paths")
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--output", "-o", required=True, help="the .npz, .parquet or .jsonl file to write")
    p.add_argument("--pool", choices=FEATURES, default="pooled",
                   help="pooled (default): the family's own pooled output; cls: the class token after the final "
                   "LayerNorm; mean: the mean patch token; cls_mean: both concatenated; pre_logits / logits: the "
                   "head's input / output; patch: every patch token (N x P x D)")
    p.add_argument("--normalize", action="store_true", help="scale each feature to unit L2 norm (cosine retrieval)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    p.add_argument("--workers", type=int, default=0, help="image-decoding processes (default: 0, in-process)")
    add_runtime_arguments(p, default_runtime="auto", default_precision=None)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_load_arguments(p, img_size=True)
    add_merge_argument(p)
    add_native_arguments(p)


def run(args: argparse.Namespace) -> int:
    from vitkit.distributed import check_device
    from vitkit.inference.features import check_embed_output
    from vitkit.utils import check_int

    check_int("--batch-size", args.batch_size)
    check_int("--workers", args.workers, low=0)
    check_device(args.device)
    check_native(args)
    check_embed_output(args.output, True)
    with OutputFile(args.output, args.overwrite) as claim:  # an existing file refused, one writer, before any work
        return _embed(args, claim)


def _embed(args: argparse.Namespace, claim: OutputFile) -> int:
    from tqdm.auto import tqdm

    from vitkit.inference.features import embed_files, embed_native, write_embeddings
    from vitkit.inference.predict import expand_inputs

    model = load_for_inference(args)
    paths = expand_inputs(args.images)
    fnet = feature_model(model, args.pool, args.normalize)
    print(f"feature: {fnet.feature}{' (the family pooled output)' if args.pool == 'pooled' else ''}"
          f"{', L2-normalised' if args.normalize else ''}", file=sys.stderr)
    if fnet.note:
        print(fnet.note, file=sys.stderr)
    if args.native:
        fnet.check_packable()  # refused by name before any image is read
        precision, max_patches = native_precision(model, args)
    else:
        net = predictor_for(fnet, args, n_images=len(paths))
    show = not args.no_progress and len(paths) > args.batch_size
    with tqdm(total=len(paths), desc="embed", unit="img", disable=not show, file=sys.stderr) as bar:

        def done(n: int, skipped: list[str]) -> None:  # a batch is through: name its unreadable files as they come
            for msg in skipped:
                tqdm.write(f"skipped: {msg}", file=sys.stderr)
            bar.update(n)

        if args.native:
            emb = embed_native(fnet, paths, max_patches, args.batch_size, precision, args.device, progress=done)
        else:
            emb = embed_files(net, model.preprocess, paths, args.batch_size, args.workers, progress=done)
    emb.feature = fnet.feature
    write_embeddings(emb, claim)
    print(f"wrote {len(emb.paths)} features of shape {tuple(emb.features.shape[1:])} to {args.output}",
          file=sys.stderr)
    if emb.skipped:
        print(f"{len(emb.skipped)} of {len(paths)} images could not be read", file=sys.stderr)
    return 1 if emb.skipped else 0
