"""bf16 paths' accuracy against fp32 (the names are vitkit's one precision vocabulary, `vitkit.utils.precision`).

Two ways to run a model in bf16 (both work on CPU and CUDA):

* `"bf16"`: weights and inputs cast to bfloat16 (`model.to(torch.bfloat16)`): no per-call casts,
  half the weight memory. For inference.
* `"bf16-autocast"`: fp32 weights, matmuls in bf16 under `torch.autocast`; LayerNorm, softmax and
  the loss stay fp32. The training path (fp32 master weights, the optimizer updates fp32).

bf16 is only faster where the hardware multiplies bf16 natively (CUDA GPUs from Ampere on; CPUs with
AVX512_BF16 or AMX). On a CPU without those, oneDNN emulates bf16 and it is slower than fp32 —
see `vitkit.bench.machine.cpu_has_native_bf16`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from vitkit.utils.options import TORCH_PRECISIONS
from vitkit.utils.precision import autocast, get, input_dtype

BENCH_PRECISIONS = TORCH_PRECISIONS  # the torch precisions `vitkit bench` times


@torch.inference_mode()
def predict_logits(
    model: nn.Module, batches: Iterable[torch.Tensor], precision: str = "fp32", device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Logits (fp32) of `model` on every batch, run under `precision`."""
    dtype = input_dtype(precision)
    outs = []
    with autocast(precision, device):
        for x in batches:
            outs.append(model(x.to(device=device, dtype=dtype)).float().cpu())
    return torch.cat(outs)


@dataclass
class Agreement:
    """How a reduced-precision model's predictions compare with the fp32 reference."""

    precision: str
    n: int
    max_abs_logit_diff: float
    mean_abs_logit_diff: float
    top1_agreement: float  # fraction of samples with the same argmax as fp32
    accuracy: float | None = None  # top-1 accuracy against labels, when given
    reference_accuracy: float | None = None


def compare_precisions(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    precisions: Iterable[str] = ("bf16", "bf16-autocast"),
    batch_size: int = 256,
    device: torch.device | str = "cpu",
) -> list[Agreement]:
    """Run `model` on `images` in fp32 and in each of `precisions`; report logit and top-1 agreement.

    `model` is not modified (bf16 weights go to a copy).
    """
    model = model.eval()
    batches = list(images.split(batch_size))
    ref = predict_logits(model, batches, "fp32", device)
    ref_acc = (ref.argmax(-1) == labels).float().mean().item() if labels is not None else None
    out = []
    for p in precisions:
        m = get(p).cast(model)
        logits = predict_logits(m, batches, p, device)
        diff = (logits - ref).abs()
        out.append(
            Agreement(
                precision=p,
                n=len(images),
                max_abs_logit_diff=diff.max().item(),
                mean_abs_logit_diff=diff.mean().item(),
                top1_agreement=(logits.argmax(-1) == ref.argmax(-1)).float().mean().item(),
                accuracy=(logits.argmax(-1) == labels).float().mean().item() if labels is not None else None,
                reference_accuracy=ref_acc,
            )
        )
    return out
