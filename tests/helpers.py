"""Shared test helpers: the demo's digits ViT (smaller with overrides) and a Trainer over the digits through
the one loader (`StepLoader` + `TrainTransform`), as `vitkit demo` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitkit import distributed as dist
from vitkit.data.digits import LABELS, load_digits_split
from vitkit.data.loader import StepLoader
from vitkit.data.preprocess import PreprocessConfig
from vitkit.data.transforms import TrainTransform
from vitkit.models import create_model
from vitkit.train.engine import TrainConfig, Trainer

DEMO_ARCH = dict(img_size=16, patch_size=4, in_chans=1, num_classes=10, width=96, depth=4, num_heads=4, mlp_dim=192)


def digits_model(**overrides: Any):
    """The demo's architecture (recipe digits_demo) with `overrides`, with the digits' preprocessing."""
    model = create_model("vit", **{**DEMO_ARCH, **overrides})
    model.preprocess = PreprocessConfig(img_size=model.config.img_size, mean=(0.5,), std=(0.5,), labels=list(LABELS))
    return model


def digits_loader(model, cfg: TrainConfig) -> StepLoader:
    """The digits training split, augmented as the demo does (small affine jitter, no flips), this rank's shard."""
    train, _ = load_digits_split()
    tf = TrainTransform(model.preprocess, "affine", flip=False)
    return StepLoader(train, cfg.batch_size, tf, cfg.seed, rank=dist.rank(), world=dist.world_size())


def digits_trainer(model, cfg: TrainConfig, out: str | Path, **kw: Any) -> Trainer:
    return Trainer(model, cfg, digits_loader(model, cfg), out, **{"progress": False, **kw})
