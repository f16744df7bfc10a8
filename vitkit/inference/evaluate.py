"""Evaluation, outside training: top-1 / top-5 accuracy and cross-entropy of a model on labelled data.

Used by `vitkit eval`, `fewshot`, `predict`, `sweep` and by the training engine's periodic evaluation;
nothing here imports the training package. Also: the evaluation loader
(resize without crop, paper §4.1 / the original code), and `align_classes`, which maps a data
set's class names onto a model's stored labels so a folder of some of the classes is scored correctly.
How a model runs for inference (runtime, precision) is `vitkit.inference.runtime`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitkit.data.datasets import Dataset
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import EvalTransform
from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils.precision import autocast


def eval_loader(ds: Dataset, preprocess: PreprocessConfig, batch_size: int = 256, num_workers: int = 0) -> StepLoader:
    """Sequential batches of `ds` with the model's evaluation preprocessing (every image once, in order)."""
    return StepLoader(ds, batch_size, EvalTransform(preprocess), shuffle=False, num_workers=num_workers)


@torch.no_grad()
def evaluate_batches(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    precision: str = "fp32",
    device: str = "cpu",
    classes_present: int | None = None,
) -> dict[str, float]:
    """Top-1, top-5 accuracy and mean cross-entropy over (model input, label) batches.

    `precision` names how the model runs (`vitkit.utils.precision`; a `Predictor` brings its own: leave fp32).
    Top-5 is reported only when it means something: more than 5 classes in the model's output and, if
    `classes_present` is given, more than 5 classes among the evaluated labels.
    A model that brings its own targets (masked patch prediction) returns (logits, targets); then
    accuracy and loss are over those targets, `n` still counts images and `patches` the targets.
    """
    was_training = model.training
    model.eval()
    n, m, top1, top5, loss = 0, 0, 0, 0, 0.0
    k5, own_targets = 0, False
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        n += len(y)
        with autocast(precision, device):
            out = model(x)
        own_targets = isinstance(out, tuple)
        logits, target = (out[0].float(), out[1]) if own_targets else (out.float(), y)
        check_finite(logits, "logits")
        m += len(target)
        loss += F.cross_entropy(logits, target, reduction="sum").item()
        top1 += (logits.argmax(-1) == target).sum().item()
        k5 = min(5, logits.shape[-1])
        top5 += (logits.topk(k5, -1).indices == target[:, None]).any(-1).sum().item()
        out_classes = logits.shape[-1]
    model.train(was_training)
    if n == 0:
        raise ValueError("evaluation got no examples")
    metrics = {"top1": top1 / m, "loss": loss / m, "n": float(n)}
    if own_targets:
        metrics["patches"] = float(m)
    elif out_classes > 5 and (classes_present is None or classes_present > 5):
        metrics["top5"] = top5 / m
    return metrics


def check_finite(t: torch.Tensor, what: str) -> torch.Tensor:
    """`t`, or a FloatingPointError when the model gave NaN or Inf: never a score or a prediction made of them."""
    if not bool(torch.isfinite(t).all()):
        raise FloatingPointError(f"the model gave non-finite {what} (NaN or Inf) for {int((~torch.isfinite(t)).any(-1).sum())} "
                                 "of the inputs: its weights or the inputs are broken (a diverged run?)")
    return t


def evaluate_loader(
    model: nn.Module,
    loader: StepLoader | Sequence[StepLoader],
    precision: str = "fp32",
    device: str = "cpu",
    skipped: list[str] | None = None,
    label_map: np.ndarray | None = None,
) -> dict[str, float]:
    """`evaluate_batches` over a sequential `StepLoader` (or several, one after the other, as one set).
    Unreadable images are left out and their names appended to `skipped`; `label_map[data label]` is the
    model's class index (see `align_classes`)."""
    loaders = [loader] if isinstance(loader, StepLoader) else list(loader)
    lut = torch.from_numpy(label_map) if label_map is not None else None
    present = len(np.unique(np.concatenate([ld.dataset.labels for ld in loaders])))

    def batches() -> Any:
        for ld in loaders:
            for b in ld.iterate(0, len(ld)):
                if skipped is not None:
                    skipped.extend(b.skipped)
                if len(b.y):
                    yield b.x, (lut[b.y] if lut is not None else b.y)

    return evaluate_batches(model, batches(), precision, device, classes_present=present)


def align_classes(model_labels: Sequence[str], num_classes: int, data_classes: Sequence[str], source: str,
                  model_name: str = "the model") -> tuple[np.ndarray, str]:
    """(label_map, how): `label_map[i]` is the model's output index for the data's class i.

    Classes are matched by name through the labels stored with the model. A model without stored labels
    is matched by index only when it predicts exactly as many classes as the data has (and `how` says
    so); otherwise, and for any data class the model does not know, a ValueError names the problem."""
    if num_classes <= 0:
        raise ValueError(f"{model_name} has no classifier head (num_classes=0): it gives features, not classes; "
                         "use `vitkit fewshot` for a linear evaluation of its features")
    if model_labels:
        index = {str(c): i for i, c in enumerate(model_labels)}
        unknown = [c for c in data_classes if str(c) not in index]
        if unknown:
            shown = ", ".join(map(repr, unknown[:8])) + (f" (+{len(unknown) - 8} more)" if len(unknown) > 8 else "")
            raise ValueError(f"{source}: class(es) {shown} are not among the {len(model_labels)} classes "
                             f"{model_name} was trained on ({', '.join(map(str, list(model_labels)[:10]))}"
                             f"{', ...' if len(model_labels) > 10 else ''})")
        return np.array([index[str(c)] for c in data_classes], dtype=np.int64), "matched by class name"
    if len(data_classes) != num_classes:
        raise ValueError(f"{model_name} stores no class names and predicts {num_classes} classes; {source} has "
                         f"{len(data_classes)} classes, so they cannot be matched")
    return np.arange(num_classes, dtype=np.int64), (
        f"{model_name} stores no class names: data classes matched by index (0..{num_classes - 1}, sorted names)")


@torch.inference_mode()
def compare_exports(model: nn.Module, paths: dict[str, Any], images: torch.Tensor,
                    labels: torch.Tensor) -> dict[str, dict[str, float]]:
    """Top-1 accuracy of `model` (fp32, "pytorch") and of each exported file of `paths` on normalised `images`, with
    each export's top-1 agreement and largest logit difference against the model."""
    from vitkit.inference.backends import exported_runner

    ref = model(images)
    out = {"pytorch": {"accuracy": (ref.argmax(-1) == labels).float().mean().item()}}
    for name, p in paths.items():
        run = exported_runner(p)
        logits = torch.cat([run(b) for b in images.split(256)])
        out[name] = {"accuracy": (logits.argmax(-1) == labels).float().mean().item(),
                     "agreement": (logits.argmax(-1) == ref.argmax(-1)).float().mean().item(),
                     "max_abs_diff": (logits - ref).abs().max().item()}
    return out
