"""A snapshot of a reproduction run still under way: every finished pre-training unit's summary numbers.

    python benchmarks/reproduce_rerun_snapshot.py --run /work/repro/laptop \
        --out benchmarks/results/reproduce/laptop/rerun_units_partial.json

Reads `<run>/pretrain/*/unit.json` (a unit's file is written once its run has finished, atomically) and writes, per
unit, what REPRODUCTION.md compares with the committed run before the re-run's result JSON exists: the model, rate,
data size and seed, the early-stopping 5-shot digits dev and test accuracies and the glyph test accuracy. Nothing
in the run folder is changed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from vitkit.utils.atomic import atomic_write_text

KEEP = ("name", "family", "size", "posemb", "pooling", "optimizer", "objective", "images", "steps", "seed", "lr",
        "glyph_test_top1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="the run's output folder (--out)")
    ap.add_argument("--out", type=Path, required=True, help="the snapshot JSON to write")
    args = ap.parse_args()
    units = []
    for path in sorted((args.run / "pretrain").glob("*/unit.json")):
        s = json.loads(path.read_text())
        best = s.get("best") or {}
        units.append({**{k: s.get(k) for k in KEEP}, "dev": best.get("digits_dev_5shot"),
                      "digits_test_5shot": best.get("digits_test_5shot")})
    doc = {"run": str(args.run), "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "units": units}
    atomic_write_text(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(units)} finished pre-training units of {args.run}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
