"""Evaluate a saved model on a labelled split: top-1 and (when K >= 5) top-5 accuracy.

`--data` is `digits` (default: the demo's fixed test split), `lfw`, or a path (image folder, list
file, CIFAR batches). Unreadable images are skipped and named, as in training (exit code 1). `--native` scores each
image at its own aspect ratio (at most `--max-patches` patches, no crop, packed: NaViT), in torch.
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
from vitkit.utils.options import add_native_arguments

HELP = "top-1 / top-5 accuracy of a model on a data split (default: the digits test split)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--data", default="digits", help="digits (default), lfw, or a data path")
    p.add_argument("--split", default=None, choices=("test", "train", "all"),
                   help="which split (default: the source's test split; every image of a source that has none, "
                   "e.g. a folder with no train/val sub-folders)")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default: 256)")
    p.add_argument("--workers", type=int, default=0, help="data-loading processes (default: 0, in-process)")
    add_runtime_arguments(p, default_runtime=None, default_precision=None)
    p.add_argument("--max-pixels", type=int, default=None,
                   help="skip images with more pixels than this as unreadable (default: Pillow's 179M limit)")
    add_load_arguments(p, img_size=True)
    add_merge_argument(p)
    add_native_arguments(p)


def run(args: argparse.Namespace) -> int:
    from vitkit.data.base import match_channels
    from vitkit.data.datasets import DataConfig, open_splits
    from vitkit.inference.evaluate import align_classes, eval_loader, evaluate_loader
    from vitkit.utils import check_int

    check_int("--batch-size", args.batch_size)
    check_int("--workers", args.workers, low=0)
    check_native(args)
    model = load_for_inference(args)
    pp = model.preprocess
    dcfg = DataConfig.from_flag(args.data, model.config.in_chans, args.workers, args.batch_size, args.max_pixels)
    splits = open_splits(dcfg)
    carved = getattr(splits["test"], "carved", False)  # the source has no test split of its own
    split = args.split or ("all" if carved else "test")
    names = ["train", "test"] if split == "all" else [split]
    label_map, how = align_classes(pp.labels, model.config.num_classes, splits["train"].classes, args.data, args.model)
    for i, name in enumerate(names):  # grey data on an RGB model: converted as PIL's convert("RGB"), said once
        splits[name] = match_channels(splits[name], model.config.in_chans, args.data,
                                      None if i else lambda m: print(f"note: {m}", file=sys.stderr))
    if not pp.labels:
        print(f"note: {how}", file=sys.stderr)
    n = sum(len(splits[name]) for name in names)
    skipped: list[str] = []
    if args.native:  # each image at its own aspect ratio, packed (NaViT), on a snapshot of the model in torch
        from vitkit.data.collate import NativePacker
        from vitkit.data.loader import StepLoader
        from vitkit.inference.runtime import inference_model

        precision, max_patches = native_precision(model, args)
        packer = NativePacker(pp, model.config.patch_size, max_patches)
        loaders = [StepLoader(splits[name], args.batch_size, packer, shuffle=False, num_workers=args.workers)
                   for name in names]
        res = evaluate_loader(inference_model(model, precision), loaders, precision, skipped=skipped,
                              label_map=label_map)
    else:
        net = predictor_for(model, args, n_images=n)
        loaders = [eval_loader(splits[name], pp, args.batch_size, args.workers) for name in names]  # `all`: one set
        res = evaluate_loader(net, loaders, skipped=skipped, label_map=label_map)
    for s in skipped:
        print(f"skipped: {s}", file=sys.stderr)
    present = len({c for name in names for c in splits[name].labels.tolist()})
    if split == "all":
        where = "all of it" + (" (it has no test split of its own)" if carved else " (train and test splits)")
    else:
        where = f"its {split} split" + (" (a holdout vitkit carved: the source has no test split)" if carved else "")
    print(f"{args.data}: scored {int(res['n'])} images, {where}"
          + (f" ({len(skipped)} unreadable, skipped)" if skipped else ""))
    print(f"classes: {present} present of the {model.config.num_classes} the model predicts ({how})")
    print(f"top-1: {100 * res['top1']:.2f}%")
    if "top5" in res:
        print(f"top-5: {100 * res['top5']:.2f}%")
    return 1 if skipped else 0  # the job ran; the skipped files are named above
