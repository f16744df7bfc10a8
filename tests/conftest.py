"""Fixtures shared by the whole suite: torch's thread count, a fixed seed per test, and one trained digits
checkpoint (built once per session)."""

import os
from pathlib import Path

import pytest
import torch

from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """A small digits model trained well enough that its accuracy means something (about 90%)."""
    out = tmp_path_factory.mktemp("digits")
    cfg = load_config("digits_demo", ["model.width=32", "model.depth=2", "model.num_heads=2", "model.mlp_dim=64",
                                      "schedule.steps=300", "schedule.warmup_steps=15", "train.batch_size=64",
                                      "optim.lr=5e-3", "optim.label_smoothing=0.0", "train.log_every=50"])
    res = run_experiment(cfg, out / "run", progress=False)
    assert res["test"]["top1"] > 0.8
    return out / "run" / "model"
