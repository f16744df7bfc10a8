"""Experiment 10 (Adam vs SGD for the ResNet, appendix D.1) under the other rate of a tied SGD pick.

The laptop run's SGD sweep ties on dev (0.3 and 0.9 both reach the best 5-shot digits dev accuracy); the pick takes
the smaller (`stats.pick_rate`). This trains every pre-training seed of ResNet-B with SGD at each other tied rate
(`tuning.other_tied_rates`, `tuning.seeded_at_rate`) and writes the experiment's result as it would read with that
rate picked: the same JSON as `optim.json` with the SGD results and rate replaced, judged by the same rule
(REPRODUCTION.md reads it through vitkit/reproduce/report.py). Adam's seeds are the result's own.

    python benchmarks/reproduce_tied_rate.py --result RUN/optim/result.json --work runs/tie --out OUT_DIR

`--work` is a laptop-scale reproduction folder (created when missing); the seed-0 run at the tied rate is the sweep's
own unit, so with a copy of the run's folder it is read back, and in a fresh folder it is trained again (on the same
kind of CPU with the same thread count it gives the sweep's dev accuracy bit for bit: the script says whether).
Train it on the machine the result came from: a run's numbers belong to its CPU. `--rate` trains a rate of another
run's tie on this run's CPU: the re-run on the AMD EPYC has no tie of its own, and was given the committed Xeon run's
pick (`--result benchmarks/results/reproduce/laptop_rerun/optim.json --rate 0.3`; REPRODUCTION.md §3, experiment 10).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

from vitkit.reproduce import tuning
from vitkit.reproduce.plan import LAPTOP, Pretrain
from vitkit.reproduce.rules import verdict
from vitkit.reproduce.runs import Workbench
from vitkit.utils.atomic import atomic_write_text


def cpu_model() -> str:
    for ln in Path("/proc/cpuinfo").read_text().splitlines():
        if ln.startswith("model name"):
            return ln.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", type=Path, required=True, help="the optim experiment's result JSON")
    ap.add_argument("--work", type=Path, required=True, help="a laptop-scale reproduction folder for the runs")
    ap.add_argument("--out", type=Path, required=True, help="folder for optim_sgd<rate>.json")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (the laptop run's: 2)")
    ap.add_argument("--rate", type=float, default=None,
                    help="train at this SGD rate instead of the result's other tied rates (another run's tie)")
    args = ap.parse_args()
    res = json.loads(args.result.read_text())
    if res.get("experiment") != "optim":
        raise SystemExit(f"{args.result}: not the optim experiment's result (experiment = {res.get('experiment')!r})")
    sweep = res["lr_sweeps"]["sgd"]
    # a rate given as printed (0.9) is the sweep's own float where the sweep tried it (0.8999999999999998: 0.3 x 3)
    given = [next((r["lr"] for r in sweep if f"{r['lr']:g}" == f"{args.rate:g}"), args.rate)] if args.rate else None
    rates = given or tuning.other_tied_rates(sweep)
    if not rates:
        print(f"{args.result}: the SGD pick {res['lr']['sgd']:g} is not tied on dev; nothing to do")
        return 0
    wb = Workbench(args.work, LAPTOP, progress=False, jobs=args.jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    for rate in rates:
        t0 = time.time()
        got = tuning.seeded_at_rate(wb, lambda seed=0: Pretrain("ResNet", "B", optimizer="sgd", seed=seed), rate)
        seed0 = wb.pretrain(Pretrain("ResNet", "B", optimizer="sgd", seed=0, lr=rate))
        dev0 = seed0["best"][f"digits_dev_{LAPTOP.select_shots}shot"]
        swept = next((r["dev"] for r in sweep if f"{r['lr']:g}" == f"{rate:g}"), None)
        alt = copy.deepcopy(res)
        alt["results"]["sgd"] = got
        alt["lr"]["sgd"] = rate
        alt.pop("markdown", None)
        alt.pop("figures", None)
        alt["tied_rate"] = {
            "of": str(args.result), "picked": res["lr"]["sgd"], "rate": rate, "cpu": cpu_model(),
            "seed0_dev": dev0, "sweep_dev": swept, "seed0_equals_sweep": None if swept is None else dev0 == swept,
            "wall_s": round(time.time() - t0, 1),
        }
        path = args.out / f"optim_sgd{rate:g}.json"
        atomic_write_text(path, json.dumps(alt, indent=2) + "\n")
        _, _, j = verdict("optim", alt)
        _, _, j0 = verdict("optim", res)
        same = "not in the sweep" if swept is None else f"the sweep's {swept:.4f}: " + (
            "equal" if dev0 == swept else "DIFFERENT")
        print(f"{path}: SGD at {rate:g} (seed-0 dev {dev0:.4f}, {same}); verdict {j.label} (at the pick "
              f"{res['lr']['sgd']:g}: {j0.label})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
