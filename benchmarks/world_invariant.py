"""What `train.world_invariant` costs: the demo's recipe trained by 2 gloo processes (1 thread each) with DDP's
all-reduce and with the world-invariant reduction (per-micro-batch gradients gathered and summed in order), in
alternating rounds; seconds per step (from the img/s each run logs over its steps) as the median over rounds, and whether the two runs' weights are bitwise
equal to a 1-process run of the same recipe.

    .venv/bin/python benchmarks/world_invariant.py [--steps 40] [--rounds 3] [--grad-accum 4] [--set KEY=VALUE ...]
    (e.g. ViT-S/16's width and depth on the digits: --set model.width=384 --set model.depth=12 ...)

Writes benchmarks/results/world_invariant[_NAME].json (--name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from vitkit import distributed as dist
from vitkit.train.config import load_config
from vitkit.train.metrics import read_metrics
from vitkit.train.run import run_experiment


def _sets(steps: int, grad_accum: int, invariant: bool, extra: list[str]) -> list[str]:
    return [*extra, f"schedule.steps={steps}", "schedule.warmup_steps=5", f"train.grad_accum={grad_accum}",
            f"train.world_invariant={str(invariant).lower()}", "train.log_every=1000", "train.tensorboard=false",
            "model.dropout=0.1", "train.mixup=0.2", "train.cutmix=1.0"]


def _rank(rank: int, world: int, store: str, out: str, cfg: dict) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        run_experiment(cfg, out, progress=False, save=True)
    finally:
        dist.shutdown()


def _train(tmp: Path, name: str, sets: list[str], world: int) -> tuple[float, dict]:
    """(seconds per training step, as the run logged it: the whole run's steps, no evaluation; the weights)."""
    out, cfg = tmp / name, load_config("digits_demo", sets)
    if world == 1:
        torch.set_num_threads(1)
        run_experiment(cfg, out, progress=False, save=True)
    else:
        mp.start_processes(_rank, args=(world, str(tmp / f"{name}.store"), str(out), cfg), nprocs=world,
                           start_method="spawn", join=True)
    last = [r for r in read_metrics(out / "metrics.jsonl") if "img_per_s" in r][-1]
    return cfg.train.batch_size / last["img_per_s"], load_file(out / "model" / "model.safetensors")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], help="recipe overrides (model size, batch size)")
    ap.add_argument("--name", default="", help="suffix of the results file")
    args = ap.parse_args()
    per_step: dict[str, list[float]] = {"ddp": [], "world_invariant": []}
    same: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for r in range(args.rounds):
            for kind in per_step:
                s, w = _train(tmp, f"{kind}{r}", _sets(args.steps, args.grad_accum, kind != "ddp", args.set), 2)
                per_step[kind].append(s)
                if r == 0:
                    _, one = _train(tmp, f"one_{kind}", _sets(args.steps, args.grad_accum, kind != "ddp", args.set), 1)
                    same[kind] = all(torch.equal(w[k], one[k]) for k in one)
    res = {
        "recipe": "digits_demo", "overrides": args.set, "steps": args.steps, "grad_accum": args.grad_accum, "processes": 2,
        "threads_per_process": 1, "rounds": args.rounds,
        "s_per_step": {k: statistics.median(v) for k, v in per_step.items()},
        "samples": per_step, "bitwise_equal_to_1_process": same,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    res["cost"] = res["s_per_step"]["world_invariant"] / res["s_per_step"]["ddp"]
    path = Path(__file__).parent / "results" / f"world_invariant{'_' + args.name if args.name else ''}.json"
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
