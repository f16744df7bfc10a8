"""glibc's mmap threshold on a small model: time and peak memory of the README's digits LoRA fine-tune.

`vitkit finetune --grad-checkpoint` fixes glibc's mmap threshold (`vitkit.utils.memory.mmap_large_blocks`) so that
freed activations go back to the OS. This script runs that fine-tune (LoRA r = 16 on q, k, v, proj, fc1, fc2,
16 px) for `--steps` steps in a fresh process per configuration, rounds interleaved, with the threshold at each of
`--modes` (MiB, or glibc's default, "glibc"), and records each run's wall time and peak RSS. ViT-B/16's side of the same
question is `lora_memory.py` (BENCHMARKS.md, "Fine-tuning on a laptop").

    python benchmarks/malloc_threshold.py --rounds 2 --json benchmarks/results/malloc_threshold_digits.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys, time
import vitkit.train.run as run
from vitkit.cli import main
from vitkit.utils.memory import mmap_large_blocks, peak_rss_mb
mode, model, out, steps = sys.argv[1:5]
if mode == "glibc":  # the run's own call replaced: glibc's default (its threshold rises with each freed block)
    run.mmap_large_blocks = lambda: "malloc: glibc's default"
else:
    run.mmap_large_blocks = lambda: mmap_large_blocks(int(mode) << 20)
t = time.perf_counter()
rc = main(["finetune", "--model", model, "--config", "digits_finetune", "--img-size", "16", "--lora", "16",
           "--lora-targets", "q,k,v,proj,fc1,fc2", "--grad-checkpoint", "--steps", steps, "--out", out,
           "--no-progress", "--overwrite"])
print(f"RESULT {rc} {time.perf_counter() - t:.3f} {peak_rss_mb():.1f}", flush=True)
"""


def pretrained(folder: Path) -> Path:
    """A digits model pre-trained by the shipped recipe (about 45 s on 2 cores), the fine-tune's start."""
    subprocess.run([sys.executable, "-m", "vitkit", "train", "--config", "digits_pretrain", "--out", str(folder),
                    "--no-progress"], check=True, capture_output=True)
    return folder / "model"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None, help="a digits model to fine-tune (default: pre-train one)")
    p.add_argument("--modes", default="glibc,1,2,4", help="glibc, or thresholds in MiB")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    # a TemporaryDirectory, not vitkit's scratch_dir: this process then never imports vitkit (torch), only its children
    with tempfile.TemporaryDirectory(prefix="vitkit-malloc-") as scratch:
        tmp = Path(scratch)
        model = a.model or pretrained(tmp / "pre")
        modes = a.modes.split(",")
        runs: dict[str, list[dict[str, float | str]]] = {m: [] for m in modes}
        for r in range(a.rounds):
            for m in modes:
                out = subprocess.run([sys.executable, "-c", CHILD, m, str(model), str(tmp / f"ft_{m}"), str(a.steps)],
                                     capture_output=True, text=True, check=True).stdout
                rc, wall, peak = out.strip().splitlines()[-1].split()[1:]
                assert rc == "0", out
                said = next((ln.strip(" -") for ln in out.splitlines() if "malloc:" in ln), "")  # the run's header
                runs[m].append({"wall_s": float(wall), "peak_rss_mib": float(peak), "malloc": said})
                print(f"round {r} {m}: {float(wall):.1f} s, peak {float(peak):.0f} MiB", flush=True)
    summary = {m: {"median_wall_s": statistics.median(x["wall_s"] for x in v),
                   "median_peak_rss_mib": statistics.median(x["peak_rss_mib"] for x in v)} for m, v in runs.items()}
    for m, s in summary.items():
        print(f"{m:>6}: {s['median_wall_s']:.1f} s, {s['median_peak_rss_mib']:.0f} MiB")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                      "load_average_at_end": os.getloadavg(), "steps": a.steps,
                                      "rounds": a.rounds, "runs": runs, "median": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
