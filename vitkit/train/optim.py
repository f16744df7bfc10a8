"""Optimisers and learning-rate schedules of the paper (§4.1, appendix B.1).

Pre-training: Adam(W) β1 0.9, β2 0.999, decoupled weight decay, linear warmup then linear or
cosine decay. Fine-tuning: SGD with momentum 0.9, no weight decay, cosine with a short warmup.
Biases, norms, position embeddings and the class token are not decayed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import torch
from torch import nn

from vitkit.utils.hardware import fused_adam_ok

_BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.")
_EMBED = re.compile(r"(?:^|\.)(?:patch_embed|cls_token|pos_embed|mask_token)")


def layer_id(name: str, depth: int) -> int:
    """Depth of a parameter for layer-wise lr decay: 0 for the embeddings (patch projection, class token,
    position embeddings), i + 1 for encoder block i, depth + 1 for the final norm and the head."""
    m = _BLOCK.search(name)
    if m:
        return int(m.group(1)) + 1
    return 0 if _EMBED.search(name) else depth + 1


def freeze(model: nn.Module, train_blocks: int) -> int:
    """Freeze all but the top of a ViT for fine-tuning: `train_blocks` = 0 trains the head alone (a linear
    probe); k > 0 also the last k encoder blocks and the final norm; -1 trains everything. Returns the number
    of parameters left trainable."""
    if train_blocks < 0:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    named = list(model.named_parameters())
    depth = 1 + max((int(m.group(1)) for n, _ in named if (m := _BLOCK.search(n))), default=-1)
    if depth == 0:
        raise ValueError("freezing by blocks needs a model with encoder blocks (a ViT); this one has none")
    if train_blocks > depth:
        raise ValueError(f"train_blocks {train_blocks} is more than the model's {depth} blocks")
    for name, p in named:
        top = layer_id(name, depth) == depth + 1  # final norm, pre_logits, head
        m = _BLOCK.search(name)
        in_last_k = m is not None and int(m.group(1)) >= depth - train_blocks
        head = name.startswith("head.") or ".head." in name
        p.requires_grad_(head or (train_blocks > 0 and (top or in_last_k)))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float | None = None) -> list[dict]:
    """Decayed kernels and undecayed biases / norms / 1-D params / posemb / cls token; with `layer_decay`,
    one such pair per depth, each with an `lr_scale`: block i (0-based) of L trains at lr x decay^(L - i),
    the embeddings at decay^(L + 1) (the smallest), the final norm and the head at the full lr (BEiT / timm)."""
    skip: set[str] = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    depth = 1 + max((int(m.group(1)) for n, _ in named if (m := _BLOCK.search(n))), default=-1)
    if layer_decay and depth == 0:
        raise ValueError("layer-wise lr decay needs a model with encoder blocks (a ViT); this one has none")
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in named:
        no_decay = p.ndim <= 1 or name in skip or name.endswith(".bias")
        lid = layer_id(name, depth) if layer_decay else 0
        g = groups.setdefault((lid, no_decay), {"params": [], "weight_decay": 0.0 if no_decay else weight_decay})
        if layer_decay:
            g["lr_scale"] = layer_decay ** (depth + 1 - lid)
        g["params"].append(p)
    if not layer_decay:  # the two classic groups, in their usual order (decayed first)
        return [groups.get((0, False), {"params": [], "weight_decay": weight_decay}),
                groups.get((0, True), {"params": [], "weight_decay": 0.0})]
    return [groups[k] for k in sorted(groups)]


def build_optimizer(
    params: Iterable | list[dict],
    name: str,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.9,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """`adamw` (decoupled decay), `adam` (L2 folded into the gradient, as the paper's Adam) or `sgd`. Adam(W) on
    parameters all on a CUDA device runs torch's fused kernel (`fused=True`: a few kernel launches update every
    parameter and its moments; `optimizer.defaults["fused"]` says so); elsewhere torch's default update, as before.
    `fused=True` asks for the fused update on the CPU too (one pass over each parameter and its two moments; the
    same step as the default to float32 rounding, tests/train/test_optim.py), refused where it cannot run;
    `fused=False` never fuses."""
    name = name.lower()
    params = list(params)
    if name in ("adamw", "adam"):
        if fused and not (fused_adam_ok(params) or _plain_cpu(params)):
            raise ValueError("the fused Adam(W) update needs every trained parameter a plain tensor on one CPU or "
                             "CUDA device (not an FSDP shard, not mixed devices, a floating dtype)")
        if fused is None:
            fused = True if fused_adam_ok(params) else None  # None: torch's default, exactly as before on the CPU
        fused = fused or None
        kind = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        return kind(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose adamw, adam or sgd")


def _plain_cpu(params: list) -> bool:
    """Every parameter (or param group's parameter) a plain floating tensor on the CPU: torch's fused Adam(W) runs."""
    flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    return bool(flat) and all(type(p.data) is torch.Tensor and p.device.type == "cpu" and p.is_floating_point()
                              for p in flat)


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
