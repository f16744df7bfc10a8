"""Exported files (ONNX, OpenVINO IR, AOTInductor packages: the formats of `vitkit.inference.backends`) timed
beside PyTorch eager, interleaved."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn

from vitkit.bench.timing import Timing, time_interleaved
from vitkit.inference.backends import exported_runner


def bench_exports(
    model: nn.Module, paths: dict[str, str | Path], batch: int = 8, warmup: int = 1, repeats: int = 5
) -> dict[str, Timing]:
    """Time PyTorch eager and each exported file (see `exported_runner`) on one batch, interleaved."""
    cfg = model.config
    x = torch.randn(batch, cfg.in_chans, *cfg.img_size)
    model = model.eval()

    def torch_step() -> None:
        with torch.inference_mode():
            model(x)

    fns = {"pytorch": torch_step}
    for name, p in paths.items():  # onnxruntime does not spin: no busy-waiting into PyTorch's turn
        fns[name] = functools.partial(exported_runner(p, threads=torch.get_num_threads()), x)
    return time_interleaved(fns, warmup=warmup, repeats=repeats)
