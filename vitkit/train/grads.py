"""The world-invariant gradient (`train.world_invariant`): the global batch's gradient summed in micro-batch
order, so any world size that divides `grad_accum` gives the same bits as one process (BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from vitkit import distributed as dist
from vitkit.data.augment import Mix
from vitkit.utils.hardware import manual_seed


def world_invariant_grads(trainer: Any, step: int, x: torch.Tensor, y: torch.Tensor,
                      positions: list[int] | None) -> tuple[float, float]:
    """Set the gradient of the global batch's mean loss so that it does not depend on the world size.

    Micro-batch k of the global batch (positions k*m.., m = batch_size / grad_accum) lies whole on one rank
    (the loader gives each rank a contiguous block). Its gradient is computed alone, with dropout drawn
    from (seed, step, k) and Mixup/CutMix within the micro-batch, and the rows of all ranks are gathered
    and summed in the order k = 0, 1, ... -- the floating-point sum a single process accumulating the same
    micro-batches forms. Costs grad_accum gradient copies per rank; returns this rank's (loss, correct).
    `trainer` is the engine's Trainer (its config, rank, world, model and micro-batch step)."""
    cfg = trainer.cfg
    if positions is None or len(positions) != len(y):
        raise ValueError("train.world_invariant needs the position of every row of the batch in the global batch")
    m = cfg.batch_size // cfg.grad_accum
    local = cfg.grad_accum // trainer.world
    micro = torch.tensor(positions) // m
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    dtypes = {p.dtype for p in params}
    if len(dtypes) > 1:
        raise ValueError(f"train.world_invariant needs the trained parameters in one dtype, got "
                         f"{sorted(map(str, dtypes))}")
    # this rank's micro-batch gradients, one zeroed row each; backward adds straight into views of its row
    mine = torch.zeros(local, sum(p.numel() for p in params), dtype=params[0].dtype, device=cfg.device)
    n_global = int(dist.sum_across([float(len(y))], cfg.device)[0])
    total_loss, correct = 0.0, 0.0
    no_sync = getattr(trainer.forward_model, "no_sync", contextlib.nullcontext)  # the reduction is ours
    for i in range(local):
        k = trainer.rank * local + i
        sel = (micro == k).nonzero().flatten()
        if len(sel) == 0:  # every image of this micro-batch was unreadable: it adds nothing
            continue
        manual_seed(cfg.seed * 1_000_003 + step + 104_729 * k)  # dropout / drop-path draws
        xm, ym, mix = x[sel], y[sel], Mix()
        if cfg.mixup or cfg.cutmix:
            xm, mix = trainer._mix(xm, step, -1 - k)
        xm, ym = xm.to(cfg.device), ym.to(cfg.device)
        point_grads(params, mine[i])
        with no_sync():
            loss, right = trainer._forward_backward(xm, ym, mix, ym, 0, len(ym) / n_global)
        total_loss += loss * len(ym) / len(y)
        correct += right
    parts = [mine]
    if trainer.world > 1:
        parts = [mine if r == trainer.rank else torch.empty_like(mine) for r in range(trainer.world)]
        torch.distributed.all_gather(parts, mine)
    rows = [row for part in parts for row in part]  # rank r holds micro-batches r*local.. : k order
    grad = rows[0]
    for row in rows[1:]:
        grad += row
    point_grads(params, grad)
    return total_loss, correct


def point_grads(params: list[nn.Parameter], flat: torch.Tensor) -> None:
    """Make each parameter's .grad a view of its slice of `flat` (a backward pass then adds into it)."""
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
