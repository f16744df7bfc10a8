"""Few-shot linear evaluation of a frozen model: 1/5/10/25 examples per class, several seeds, mean +- std.

Features (pre_logits or the final class token) are whitened, a bias feature is appended, and a
ridge regression to {-1, 1}^K targets is solved in closed form (L2 2^10 as big_vision; --l2).
Beside it, DINO's weighted k-NN (cosine similarity, k = 20, votes weighted exp(s / 0.07)), the evaluation
used for self-supervised backbones, on the same shots and seeds, and on the whole training split.
Shots are drawn from the data's training split; accuracy is measured on its test split. Grey data (digits,
lfw) on an RGB model is converted as PIL's convert("RGB") does, and said.
"""

from __future__ import annotations

import argparse
import contextlib

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.commands._merge_args import add_merge_argument, apply_merge
from vitkit.utils.files import OutputFile, claim_output

HELP = "few-shot linear evaluation (closed-form least squares) of a frozen model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--data", default="digits", help="digits | lfw | a folder | a CIFAR folder | a list file (default: digits)")
    p.add_argument("--shots", default="1,5,10,25", help="examples per class (default: 1,5,10,25)")
    p.add_argument("--seeds", type=int, default=5, help="random draws of the shots per setting (default: 5)")
    p.add_argument("--l2", type=float, default=None, help="ridge L2 (default: 1024 = 2^10, as big_vision)")
    p.add_argument("--representation", default="pre_logits", choices=["pre_logits", "token"],
                   help="features: pre_logits (the head's input, after the pre-training tanh layer when the model "
                   "has one) or token (the final class token, or the GAP of the patch tokens); default: pre_logits")
    p.add_argument("--method", default="both", choices=["ridge", "knn", "both"],
                   help="ridge: closed-form least squares (the paper's); knn: DINO's weighted k-NN; both (default)")
    p.add_argument("--knn-k", type=int, default=20, help="k-NN neighbours (default: 20, DINO's)")
    p.add_argument("--knn-temperature", type=float, default=0.07, help="k-NN vote temperature (default: 0.07)")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default: 256)")
    p.add_argument("--workers", type=int, default=0, help="data loading processes")
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    add_load_arguments(p, img_size=True)
    add_merge_argument(p)


def run(args: argparse.Namespace) -> int:
    from vitkit.inference.fewshot import DEFAULT_L2, check_fewshot_args

    try:
        shots = [int(s) for s in args.shots.split(",") if s]
    except ValueError as e:
        raise ValueError(f"--shots must be comma-separated integers, got {args.shots!r}") from e
    check_fewshot_args(shots, args.seeds, DEFAULT_L2 if args.l2 is None else args.l2)  # before any work
    if args.knn_k < 1 or not args.knn_temperature > 0:
        raise ValueError(f"--knn-k must be >= 1 and --knn-temperature > 0, got {args.knn_k}, {args.knn_temperature}")
    with claim_output(args.json, args.overwrite, "--json") if args.json else contextlib.nullcontext() as claim:
        return _fewshot(args, shots, claim)


def _fewshot(args: argparse.Namespace, shots: list[int], claim: OutputFile | None) -> int:
    import json
    import sys

    from vitkit.data.base import match_channels, require_classes
    from vitkit.data.datasets import DataConfig, open_splits
    from vitkit.formats import load_pretrained
    from vitkit.inference.evaluate import eval_loader
    from vitkit.inference.fewshot import (
        DEFAULT_L2,
        describe_representation,
        extract_features,
        fewshot_table,
        knn_accuracy,
    )

    model = apply_merge(load_pretrained(args.model, **load_hints(args)), args)
    pp = model.preprocess
    dcfg = DataConfig.from_flag(args.data, model.config.in_chans, args.workers, args.batch_size)
    splits = open_splits(dcfg)
    say = lambda m: print(f"note: {m}", file=sys.stderr)  # noqa: E731
    train = match_channels(splits["train"], model.config.in_chans, args.data, say)
    test = match_channels(splits["test"], model.config.in_chans, f"{args.data} (test)")
    require_classes(train, args.data, "few-shot evaluation")
    k = len(train.classes)
    skipped: list[str] = []
    tr = extract_features(model, eval_loader(train, pp, args.batch_size, args.workers), args.representation, skipped)
    te = extract_features(model, eval_loader(test, pp, args.batch_size, args.workers), args.representation, skipped)
    for s in skipped:
        print(f"skipped: {s}", file=sys.stderr)
    l2 = DEFAULT_L2 if args.l2 is None else args.l2
    methods = ["ridge", "knn"] if args.method == "both" else [args.method]
    knn = {"k": args.knn_k, "temperature": args.knn_temperature}
    tables = {m: fewshot_table(tr, te, k, shots, range(args.seeds), l2, m, **(knn if m == "knn" else {}))
              for m in methods}
    print(f"few-shot evaluation: {args.model} on {args.data} ({k} classes, {len(te[1])} test images), "
          f"{describe_representation(model, args.representation)} (D={tr[0].shape[1]}), {args.seeds} seeds; "
          + "; ".join({"ridge": f"ridge L2 {l2:g}", "knn": f"k-NN k={args.knn_k} T={args.knn_temperature:g}"}[m]
                      for m in methods))
    print(f"{'shots':>6}" + "".join(f"  {m + ' accuracy (%)':>22}" for m in methods))
    for s in shots:
        print(f"{s:>6}" + "".join(f"  {100 * tables[m][s]['mean']:14.2f} ± {100 * tables[m][s]['std']:5.2f}"
                                  for m in methods))
    # the ridge table at the top level (as before k-NN came), k-NN's under "knn"
    doc: dict = {str(s): r for s, r in tables.get("ridge", {}).items()}
    if "knn" in tables:
        doc["knn"] = {str(s): r for s, r in tables["knn"].items()}
    if "knn" in methods:  # DINO's protocol: the whole training split as the neighbours
        full = knn_accuracy(tr[0], tr[1], te[0], te[1], k, args.knn_k, args.knn_temperature)
        print(f"{'all':>6}  k-NN on all {len(tr[1])} training images: {100 * full:.2f}%")
        doc["knn_all"] = full
    if claim is not None:
        with claim.replacing() as tmp:
            tmp.write_text(json.dumps(doc, indent=2) + "\n")
    return 1 if skipped else 0  # the job ran; the skipped files are named above
