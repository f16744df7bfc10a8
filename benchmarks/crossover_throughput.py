"""Does drawing the glyph stream keep up with training, and how many crossover runs at once fill a machine?

Two measurements, side by side in one process (BENCHMARKS.md / REPRODUCTION.md quote them):

1. `draw`: images per second of the stream's vectorised draw (`GlyphStream.draw`, one thread) and of the loader
   (draw + preprocessing, one process), against the images per second one pre-training run consumes.
2. `jobs`: pre-training steps per second of the whole machine when `--jobs` runs train at once (`Workbench.
   pretrain_all`: worker processes, each run a real crossover run of `--steps` steps with its few-shot
   evaluations), for ViT-B and ResNet-B, on the in-memory glyphs and on the stream.

    python benchmarks/crossover_throughput.py --device cpu --jobs 1 2 --steps 200
    python benchmarks/crossover_throughput.py --device cuda --jobs 1 8 16 --steps 300
    python benchmarks/crossover_throughput.py --device cuda --jobs 8 --loader-workers 0 1 --stream-only --steps 300
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vitkit.bench.machine import machine_info
from vitkit.data.glyphs import GlyphStream
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import TrainTransform
from vitkit.models.preprocess import PreprocessConfig
from vitkit.reproduce.crossover import CROSSOVER_SCALES
from vitkit.reproduce.plan import Pretrain
from vitkit.reproduce.runs import Workbench


def draw_rate(batch: int, seconds: float = 3.0) -> dict[str, float]:
    torch.set_num_threads(1)
    g = GlyphStream(1_000_000)
    rng = np.random.default_rng(0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        g.draw(rng.integers(0, len(g), batch))
        n += batch
    draw = n / (time.perf_counter() - t0)
    tf = TrainTransform(PreprocessConfig((16, 16), (0.5,), (0.5,)), augment="none", flip=False)
    loader = StepLoader(g, batch, tf, seed=0)
    n, t0, step = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        n += len(loader.load(step).y)
        step += 1
    return {"draw_img_s": draw, "loader_img_s": n / (time.perf_counter() - t0)}


def jobs_rate(device: str, jobs: int, steps: int, stream: bool, out: Path, workers: int = 0) -> dict[str, float]:
    base = CROSSOVER_SCALES["laptop"].scale
    scale = dataclasses.replace(base, name=f"throughput-{stream}", glyph_stream=stream,
                                glyph_images=1_000_000 if stream else 100_000, num_workers=workers)
    wb = Workbench(out / f"{device}_{jobs}_{stream}_{workers}", scale, progress=False, device=device, jobs=jobs)
    runs = [Pretrain(f, "B", images=scale.glyph_images, steps=steps, seed=s) for s in range(jobs)
            for f in ("ViT", "ResNet")]
    t0 = time.perf_counter()
    sums = wb.pretrain_all(runs)
    wall = time.perf_counter() - t0
    return {"steps_per_s": len(runs) * steps / wall, "wall_s": wall,
            "run_train_s": float(np.mean([s["train_s"] for s in sums]))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--stream-only", action="store_true", help="skip the in-memory glyphs")
    p.add_argument("--loader-workers", type=int, nargs="+", default=[0],
                   help="loader processes per run (Scale.num_workers): drawing overlaps training")
    p.add_argument("--out", default="benchmarks/results/crossover_throughput.jsonl")
    args = p.parse_args()
    threads = torch.get_num_threads()
    rows = [{"what": "machine", **machine_info(args.device), "date": time.strftime("%Y-%m-%d"), "device": args.device,
             "cuda": torch.cuda.get_device_name() if args.device.startswith("cuda") else None}]
    rows.append({"what": "draw", "batch": 128, **draw_rate(128)})
    print(json.dumps(rows[-1]), flush=True)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs:
            for workers in args.loader_workers:
                for stream in (True,) if args.stream_only else (False, True):
                    rows.append({"what": "jobs", "device": args.device, "jobs": jobs, "stream": stream,
                                 "loader_workers": workers, "steps": args.steps, "batch": 128,
                                 **jobs_rate(args.device, jobs, args.steps, stream, Path(tmp), workers)})
                    print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
