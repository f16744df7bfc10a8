"""The training loop (vitkit.train.engine): what stops a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitkit.cli import main
from vitkit.train.engine import Trainer

TINY = ["--no-progress", "--set", "model.width=16", "--set", "model.depth=1", "--set", "model.num_heads=2", "--set",
        "model.mlp_dim=32", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
        "train.batch_size=8", "--set", "train.tensorboard=false", "--set", "data.num_workers=0"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_loss_stops_the_run_naming_it(tmp_path: Path, monkeypatch, capsys, bad: float) -> None:  # noqa: ANN001
    """Before: only NaN stopped a run; an infinite loss (LoRA's alpha = 1e30 scaling the update) trained on."""
    real = Trainer.train_step

    def step(self, *a):  # noqa: ANN001, ANN002, ANN202 - the real step, its loss replaced
        _, acc, n = real(self, *a)
        return bad, acc, n

    monkeypatch.setattr(Trainer, "train_step", step)
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "run"), *TINY]) == 2
    err = capsys.readouterr().err
    assert f"loss became {bad} at step 0 (non-finite)" in err and "lora.alpha" in err, err
