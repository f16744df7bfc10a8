"""Fixtures shared by the whole suite: torch's thread count, a fixed seed per test, and one trained digits
checkpoint (built once per session, once per worker under pytest-xdist)."""

import os
from pathlib import Path

import pytest
import torch

from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

# One intra-op thread, here and in the CLI processes the tests start (they inherit the environment): the suite's
# models take microseconds per op, so a second thread only waits for a scheduler slice (on a busy 2-core machine the
# demo's 120 steps took 400 s on two threads, about 80 s on one), and `make test` runs one pytest-xdist worker per core.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"
torch.set_num_threads(1)


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
