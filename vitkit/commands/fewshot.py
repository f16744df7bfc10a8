"""Few-shot linear evaluation of a frozen model: 1/5/10/25 examples per class, several seeds, mean +- std.

Features (pre_logits or the final class token) are whitened, a bias feature is appended, and a
ridge regression to {-1, 1}^K targets is solved in closed form (L2 2^10 as big_vision; --l2).
Shots are drawn from the data's training split; accuracy is measured on its test split.
"""

from __future__ import annotations

import argparse

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.commands._merge_args import add_merge_argument, apply_merge

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
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default: 256)")
    p.add_argument("--workers", type=int, default=0, help="data loading processes")
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    add_load_arguments(p, img_size=True)
    add_merge_argument(p)


def run(args: argparse.Namespace) -> int:
    import json

    from vitkit.data.datasets import DataConfig, open_splits
    from vitkit.evaluate import eval_loader
    from vitkit.fewshot import DEFAULT_L2, describe_representation, extract_features, fewshot_table
    from vitkit.formats import load_pretrained

    try:
        shots = [int(s) for s in args.shots.split(",") if s]
    except ValueError as e:
        raise ValueError(f"--shots must be comma-separated integers, got {args.shots!r}") from e
    model = apply_merge(load_pretrained(args.model, **load_hints(args)), args)
    pp = model.preprocess
    dcfg = DataConfig.from_flag(args.data, model.config.in_chans, args.workers, args.batch_size)
    splits = open_splits(dcfg)
    train, test = splits["train"], splits["test"]
    if train.channels != model.config.in_chans:
        raise ValueError(f"{args.data} has {train.channels}-channel images; {args.model} takes {model.config.in_chans}")
    k = len(train.classes)
    tr = extract_features(model, eval_loader(train, pp, args.batch_size, args.workers), args.representation)
    te = extract_features(model, eval_loader(test, pp, args.batch_size, args.workers), args.representation)
    l2 = DEFAULT_L2 if args.l2 is None else args.l2
    table = fewshot_table(tr, te, k, shots, range(args.seeds), l2)
    print(f"few-shot linear evaluation: {args.model} on {args.data} ({k} classes, {len(te[1])} test images), "
          f"{describe_representation(model, args.representation)} (D={tr[0].shape[1]}), L2 {l2:g}, {args.seeds} seeds")
    print(f"{'shots':>6}  {'accuracy (%)':>16}")
    for s, r in table.items():
        print(f"{s:>6}  {100 * r['mean']:8.2f} ± {100 * r['std']:5.2f}")
    if args.json:
        from vitkit.utils.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({str(s): r for s, r in table.items()}, indent=2) + "\n")
    return 0
