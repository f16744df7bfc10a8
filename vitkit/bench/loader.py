"""The input pipeline's speed beside the model's: loader img/s (decode + Inception crop + flip, with and without
RandAugment) through the step-indexed loader with 0, 1, ... loader workers, and the training-step img/s of a ViT at
the same batch on the same machine, so whichever bounds training is visible (`vitkit bench --data PATH`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from vitkit.bench.suite import Case, make_step
from vitkit.bench.timing import time_interleaved
from vitkit.data.base import Dataset
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import TrainTransform
from vitkit.models import create_model
from vitkit.models.preprocess import PreprocessConfig


def loader_rate(ds: Dataset, tf: TrainTransform, batch: int, workers: int, steps: int) -> float:
    """Images per second the loader delivers over `steps` batches (worker start-up and the first batch excluded)."""
    if steps < 1:
        raise ValueError(f"{len(ds)} images give no timed batch of {batch} after the first: use a smaller batch")
    loader = StepLoader(ds, batch, tf, seed=0, num_workers=workers)
    it = loader.iterate(0, steps + 1)
    next(it)
    t0 = time.perf_counter()
    n = sum(len(b.y) for b in it)
    return n / (time.perf_counter() - t0)


def train_rate(model_name: str, batch: int, img_size: int = 224, num_classes: int = 1000, steps: int = 3) -> float:
    """Training-step img/s (forward, backward, AdamW step; fp32) of `model_name` on random inputs: the median of
    `steps` timed steps after one untimed (the benchmark suite's training step)."""
    model = create_model(model_name, img_size=img_size, num_classes=num_classes)
    step, _ = make_step(model, Case(model_name, img_size, batch, "train"), "fp32", torch.device("cpu"), num_classes)
    return batch / time_interleaved({"train": step}, warmup=1, repeats=steps)["train"].median


def measure_pipeline(ds: Dataset, img_size: int = 224, batch: int = 64, workers: Sequence[int] | None = None,
                     randaugment: Sequence[tuple[int, float]] = ((0, 0.0), (2, 10.0)),
                     steps: int | None = None) -> list[dict[str, Any]]:
    """Loader img/s for each RandAugment setting and worker count (default: 0, 1 and every core)."""
    workers = list(workers) if workers is not None else sorted({0, 1, os.cpu_count() or 1})
    steps = steps if steps is not None else min(10, len(ds) // batch - 1)
    pre = PreprocessConfig(img_size=(img_size, img_size), mean=(0.5,) * 3, std=(0.5,) * 3)
    rows = []
    for ra in randaugment:
        tf = TrainTransform(pre, "inception", flip=True, randaugment=ra)
        for w in workers:
            rate = loader_rate(ds, tf, batch, w, steps)
            rows.append({"randaugment": list(ra), "workers": w, "img_per_s": rate,
                         "img_per_s_per_worker": rate / max(w, 1)})
    return rows


def format_pipeline(rows: list[dict[str, Any]], model_name: str, model_rate: float) -> str:
    """The loader rows and the model's training rate, with which one bounds a training run."""
    lines = [f"{'RandAugment':>12s} {'workers':>7s} {'img/s':>9s} {'per worker':>10s}  bound"]
    for r in rows:
        bound = "loader" if r["img_per_s"] < model_rate else "model"
        lines.append(f"{str(r['randaugment']):>12s} {r['workers']:7d} {r['img_per_s']:9.1f} "
                     f"{r['img_per_s_per_worker']:10.1f}  {bound}")
    lines.append(f"{model_name} training step (fp32, same batch): {model_rate:.1f} img/s")
    return "\n".join(lines)
