"""Choose the demo recipe on a dev split, then measure the chosen one on test (median of seeds).

    .venv/bin/python benchmarks/demo_recipe.py dev  [--seeds 0,1,2] [--dev-fraction 0.25] [--only 'a;b']
    .venv/bin/python benchmarks/demo_recipe.py test [--seeds 0,1,2]                  # recipe digits_demo on test

`dev` trains each candidate (recipe digits_demo + overrides) on 85% of the training images and scores it on
the held-out 15% (the test split is not looked at); `test` runs the shipped recipe as `vitkit demo` does and
reports test top-1 and training seconds per seed. Results go to benchmarks/results/demo_recipe_<mode>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

CANDIDATES: dict[str, list[str]] = {
    "recipe": [],
    "1300 steps": ["schedule.steps=1300"],
    "lr 3e-3": ["optim.lr=3e-3"],
    "drop_path 0.1": ["model.drop_path=0.1"],
    "label smoothing 0": ["optim.label_smoothing=0.0"],
    "EMA 0.999": ["train.ema_decay=0.999"],
    "EMA 0.999, 1300 steps": ["train.ema_decay=0.999", "schedule.steps=1300"],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["dev", "test"])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tag", default="", help="suffix of the results file")
    ap.add_argument("--only", default=None, help="candidate names separated by ';' (dev mode)")
    ap.add_argument("--dev-fraction", type=float, default=0.15, help="share of the training images held out")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    cands = CANDIDATES if args.mode == "dev" else {"digits_demo": []}
    if args.only:
        cands = {k: v for k, v in cands.items() if k in args.only.split(";")}
    rows = []
    for name, over in cands.items():
        accs, secs, losses = [], [], []
        for seed in seeds:
            extra = [f"data.dev_fraction={args.dev_fraction}", 'data.eval_split="dev"'] if args.mode == "dev" else []
            cfg = load_config("digits_demo", [*over, *extra, f"train.seed={seed}"])
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                res = run_experiment(cfg, Path(d) / "run", progress=False, final_test=args.mode == "test")
                wall = time.perf_counter() - t0
            split = "dev" if args.mode == "dev" else "test"
            accs.append(res[split]["top1"])
            losses.append(res[split]["loss"])
            secs.append(res["train_s"])
            print(f"{name} seed {seed}: {split} top-1 {100 * accs[-1]:.2f}%, training {secs[-1]:.1f}s "
                  f"(run {wall:.1f}s)", flush=True)
        rows.append({"candidate": name, "overrides": over, "seeds": seeds, "top1": accs, "loss": losses,
                     "train_s": secs, "dev_fraction": args.dev_fraction if args.mode == "dev" else None,
                     "median": statistics.median(accs), "mean": statistics.mean(accs),
                     "std": statistics.pstdev(accs)})
        print(f"== {name}: median {100 * rows[-1]['median']:.2f}%, mean {100 * rows[-1]['mean']:.2f} ± "
              f"{100 * rows[-1]['std']:.2f}%, mean loss {sum(losses) / len(losses):.4f}", flush=True)
    out = Path(__file__).parent / "results" / f"demo_recipe_{args.mode}{'_' + args.tag if args.tag else ''}.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "threads": torch.get_num_threads(),
                               "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
