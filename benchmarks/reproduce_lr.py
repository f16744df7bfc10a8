"""The pre-training learning-rate check behind `vitkit reproduce`'s per-family rates (REPRODUCTION.md).

Pre-trains one family's "B" model on the full glyph set at each learning rate, as the full-scale plan
does, and prints the glyph test accuracy and the 5-shot digits dev / test accuracy. The plan's rate of a
family is the one with the best 5-shot digits *dev* accuracy.

    python benchmarks/reproduce_lr.py --family ViT --lrs 0.001 0.003 0.006 --out runs/reproduce-lr
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from vitkit.reproduce.plan import FAMILIES, FULL, Pretrain
from vitkit.reproduce.runs import Workbench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=FAMILIES, required=True)
    p.add_argument("--lrs", type=float, nargs="+", default=[0.001, 0.003, 0.006])
    p.add_argument("--out", default="runs/reproduce-lr")
    args = p.parse_args()
    rows = []
    for lr in args.lrs:
        scale = dataclasses.replace(FULL, lrs={f: lr for f in FAMILIES})
        wb = Workbench(Path(args.out) / f"{args.family}_lr{lr:g}", scale, progress=False)
        s = wb.pretrain(Pretrain(args.family, "B"))
        row = {"family": args.family, "lr": lr, "glyph_test_top1": s["glyph_test_top1"],
               "digits_dev_5shot": s["final"]["digits_dev_5shot"], "digits_test_5shot": s["final"]["digits_test_5shot"],
               "train_s": s["train_s"]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    best = max(rows, key=lambda r: r["digits_dev_5shot"])
    print(f"{args.family}: best lr by 5-shot digits dev accuracy: {best['lr']:g}")


if __name__ == "__main__":
    main()
