"""Optimisers and learning-rate schedules of the paper (§4.1, appendix B.1).

Pre-training: Adam(W) β1 0.9, β2 0.999, decoupled weight decay, linear warmup then linear or
cosine decay. Fine-tuning: SGD with momentum 0.9, no weight decay, cosine with a short warmup.
Biases, norms, position embeddings and the class token are not decayed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed kernels, and undecayed biases / norms / 1-D params / posemb / cls token."""
    skip: set[str] = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name in skip or name.endswith(".bias"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    params: Iterable | list[dict],
    name: str,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.9,
) -> torch.optim.Optimizer:
    """`adamw` (decoupled decay), `adam` (L2 folded into the gradient, as the paper's Adam) or `sgd`."""
    name = name.lower()
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose adamw, adam or sgd")


SCHEDULES = ("cosine", "linear", "constant")


def lr_at(step: int, base_lr: float, total_steps: int, warmup_steps: int, schedule: str, min_lr: float = 0.0) -> float:
    """Learning rate at `step` (0-based): linear warmup to base_lr, then `cosine`, `linear` or `constant`."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "cosine":
        return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "linear":
        return min_lr + (base_lr - min_lr) * (1.0 - progress)
    raise ValueError(f"unknown schedule {schedule!r}; choose cosine, linear or constant")


class EMA:
    """Polyak averaging of the weights (appendix B.1.1: factor 0.9999 for ImageNet fine-tuning)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.shadow = {k: v.detach().clone().float() for k, v in model.state_dict().items() if v.is_floating_point()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for k, v in model.state_dict().items():
            if k in self.shadow:
                self.shadow[k].mul_(self.decay).add_(v.detach().float(), alpha=1.0 - self.decay)

    def copy_to(self, model: nn.Module) -> None:
        state = model.state_dict()
        model.load_state_dict({k: self.shadow[k].to(v.dtype) if k in self.shadow else v for k, v in state.items()})
