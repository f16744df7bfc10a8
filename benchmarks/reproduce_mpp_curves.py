"""The masked-patch-prediction pre-training curves (REPRODUCTION.md experiment 6) from a run's committed metrics.

    python benchmarks/reproduce_mpp_curves.py benchmarks/results/reproduce/laptop/mpp_pretraining_metrics.jsonl \
        --mpp-json benchmarks/results/reproduce/laptop/mpp.json --out docs/reproduction/mpp_pretraining_curves.png

Draws `vitkit.reproduce.plots.mpp_pretraining_curves` from the run's metrics.jsonl (committed beside the result
JSON, so the figure can always be redrawn); the majority-colour line comes from the experiment's result JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vitkit.reproduce.plots import mpp_pretraining_curves
from vitkit.train.metrics import read_metrics


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", type=Path, help="the MPP run's metrics.jsonl")
    ap.add_argument("--mpp-json", type=Path, default=None, help="the mpp experiment's result JSON (majority colour)")
    ap.add_argument("--title", default="masked patch prediction (§4.6): one pre-training run")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = ap.parse_args()
    majority = json.loads(args.mpp_json.read_text())["majority_colour"] if args.mpp_json else None
    print(args.out.parent / mpp_pretraining_curves(read_metrics(args.metrics), args.out, args.title, majority))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
