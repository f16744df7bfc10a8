"""Commit a finished re-run of the laptop reproduction beside the committed run: its log, its result JSON, the MPP
pre-training run's metrics and curves, and the timing note written from the log.

    python benchmarks/reproduce_import_rerun.py --run /work/repro/laptop --log /work/repro/laptop_rerun.log

The log is the invocation's own (`start` / `end` stamps, `uptime`, the run's output, GNU time's `-v` report); a log
without its `end` stamp and GNU time's report is refused (the run has not finished). It is copied whole to
benchmarks/results/reproduce/laptop/rerun_<date>.log (refused above 1 MiB: a run's progress bar belongs in no log;
use --no-progress). Each experiment's `<run>/<name>/result.json` goes to benchmarks/results/reproduce/laptop_rerun/
<name>.json; the committed run's JSON, which REPRODUCTION.md's verdicts are read from, is left alone. Then:
`python benchmarks/reproduce_tied_rate.py` for experiment 10's other tied rate, and `python -m vitkit.reproduce.report`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from vitkit.reproduce.plan import EXPERIMENT_NAMES, LAPTOP, Pretrain
from vitkit.reproduce.plots import mpp_pretraining_curves
from vitkit.reproduce.report import RERUN, RESULTS, ROOT, clock_text, time_log
from vitkit.train.metrics import read_metrics
from vitkit.utils.atomic import atomic_write_text

MAX_LOG = 1 << 20
CURVES = ROOT / "docs" / "reproduction" / "mpp_pretraining_curves.png"
HISTORY = ROOT / "docs" / "reproduction" / "history.md"
# history.md §6 showed the 3,000-step run's generic curves.png under this name; the redrawn figure is another run's
OLD_CAPTION = "The pipeline is not what fails. The curves of the 3,000-step MPP run:"
NEW_CAPTION = """The pipeline is not what fails. That 3,000-step run's own curves cannot be redrawn: its `metrics.jsonl` was never
committed, and its figure was the trainer's generic plot (an unnamed accuracy axis, a legend saying "augmented"
for batches that had no augmentation), so it is no longer shown. The figure below is another MPP run, drawn from
metrics that are committed (`benchmarks/results/reproduce/laptop_rerun/mpp_pretraining_metrics.jsonl`, by
`benchmarks/reproduce_mpp_curves.py`): the laptop scale's ViT-B, {steps} MPP steps at its picked rate, seed 0, from
the laptop re-run on a second CPU (REPRODUCTION.md §2). The 3,000-step run's curves, as read off its generic plot:"""


def recaption_history(steps: int) -> None:
    """history.md §6: the figure under mpp_pretraining_curves.png is now the re-run's, said so (once)."""
    text = HISTORY.read_text()
    i = text.find(OLD_CAPTION)
    if i < 0:
        return
    j = text.index("Its\ncolour loss falls", i)
    k = text.index("![MPP pre-training curves](mpp_pretraining_curves.png)", i)
    figure = "![MPP pre-training curves](mpp_pretraining_curves.png)\n\n"
    atomic_write_text(HISTORY, text[:i] + NEW_CAPTION.format(steps=steps).split(" The 3,000-step run's")[0] + "\n\n"
                      + figure + "The 3,000-step run's curves, as read off its generic plot: its\n"
                      + text[j + len("Its\n"):] if k < j else text)


def timing_note(log: Path, cpu: str) -> str:
    """benchmarks/results/reproduce/laptop/timing.md: what supports each laptop run's time."""
    r = time_log(log)
    load = ", ".join(r["load_start"] or ("not recorded",))
    end_load = ", ".join(r["load_end"] or ("not recorded",))
    return f"""# Timing of the laptop runs: what supports each

## The committed run (2026-11-26, the JSON REPRODUCTION.md reads)

`vitkit reproduce --all --jobs 2 --out runs/laptop_final`, from an empty folder, on a 2-core Intel Xeon with
AVX512_BF16 and AMX: **39 min 48 s of wall clock, 3,685 s of CPU (user + system)**, 0.88 GiB peak resident memory of
the largest process; the project's test suite ran beside it for its first 15 minutes. These numbers were written by
the session that ran it, in commit cd5829f (its message and that commit's REPRODUCTION.md; the page's opening gave
39 min 49 s once: one measurement, mistyped). No log of that invocation was committed and its folder no longer
exists, so they rest on that commit alone.

## The re-run on a second CPU ({(r['start'] or '')[:10]}): from its committed log

[{log.name}]({log.name}) (the invocation's own log, whole: start and end stamps, `uptime`, the CPU, the run's
output, GNU time's `-v` report). The same command (`--all --jobs 2`, `--no-progress`), from an empty folder, from a
clean clone of commit 5e8239d (the committed run's method, unchanged since), on a 2-core {cpu}:

| | |
|---|---|
| start / end (UTC) | {r['start']} / {r['end']} |
| wall clock | **{clock_text(r['wall_s'])}** ({r['wall_s']:,.0f} s) |
| CPU, user + system | **{r['cpu_s']:,.0f} s** (the committed run: 3,685 s) |
| peak resident memory of the largest process | {r['rss_gib']:.2f} GiB |
| load average (1, 5, 15 min) at the start / at the end | {load} / {end_load} |
| exit status | {r['exit']} |

Conditions: a shared machine (other sessions' tests and builds ran beside it throughout, loaded), so its wall clock
says little about the scale's time on a quiet 2-core machine; the CPU seconds compare better, and they also differ
with the CPU (AVX2 against AVX-512 and AMX kernels). Its results, number by number against the committed run's:
REPRODUCTION.md §2 (`laptop_rerun/`).
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="the re-run's output folder (--out)")
    ap.add_argument("--log", type=Path, required=True, help="the invocation's log")
    args = ap.parse_args()
    text = args.log.read_text()
    if "\nend " not in text or "Exit status:" not in text:
        raise SystemExit(f"{args.log}: no end stamp or no GNU time report: the run has not finished")
    if len(text.encode()) > MAX_LOG:
        raise SystemExit(f"{args.log}: {len(text.encode()):,} bytes, over {MAX_LOG:,}: not a log to commit whole")
    r = time_log(args.log)
    log = RESULTS / "laptop" / f"rerun_{(r['start'] or '')[:10]}.log"
    shutil.copyfile(args.log, log)
    RERUN.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in EXPERIMENT_NAMES:
        src = args.run / name / "result.json"
        if src.is_file():
            shutil.copyfile(src, RERUN / f"{name}.json")
        else:
            missing.append(name)
    mpp = json.loads((RERUN / "mpp.json").read_text())
    run = Pretrain("ViT", "B", steps=max(LAPTOP.mpp_steps), objective="mpp", seed=0, lr=mpp["mpp_lr"])
    metrics = RERUN / "mpp_pretraining_metrics.jsonl"
    shutil.copyfile(args.run / "pretrain" / run.name(LAPTOP) / "metrics.jsonl", metrics)
    mpp_pretraining_curves(read_metrics(metrics), CURVES, f"masked patch prediction (§4.6): the laptop ViT-B, "
                           f"{run.steps} MPP steps at lr {run.lr:g}, seed 0 (the re-run)", mpp["majority_colour"])
    recaption_history(run.steps)
    cpu = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name:")), "CPU")
    atomic_write_text(RESULTS / "laptop" / "timing.md", timing_note(log, cpu))
    print(f"{log} ({log.stat().st_size:,} bytes); {RERUN}: {len(EXPERIMENT_NAMES) - len(missing)} results"
          f"{f' (missing: {missing})' if missing else ''}; {metrics.name} from {run.name(LAPTOP)}; {CURVES}; timing.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
