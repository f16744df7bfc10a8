"""Knowledge distillation as DeiT trains (Touvron et al. 2021): a frozen teacher from any checkpoint vitkit loads
(a ViT, a hybrid, a BiT ResNet), soft (KL at a temperature) or hard (the teacher's argmax as a label).

The loss of a batch is (1 - alpha) x CE(student, labels) + alpha x KD, where KD is
    soft: tau^2 x KL(softmax(teacher / tau) || softmax(student / tau)), averaged over the batch (Hinton et al.)
    hard: CE(student, argmax teacher)                                   (DeiT's choice, alpha = 0.5)
With DeiT's distillation token the KD term supervises the distillation head and the CE term the class head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.preprocess import PreprocessConfig

KINDS = ("none", "soft", "hard")


class Teacher(nn.Module):
    """A frozen model fed the student's batch: un-normalised with the student's preprocessing, resized to the
    teacher's resolution and normalised as the teacher expects. Its classes must be the student's."""

    def __init__(self, model: nn.Module, student: PreprocessConfig, num_classes: int, name: str = "teacher") -> None:
        super().__init__()
        t_pre = model.preprocess
        k = model.config.num_classes
        if k != num_classes:
            raise ValueError(f"{name} predicts {k} classes, the student {num_classes}: a teacher must be fine-tuned "
                             "on the student's classes")
        if t_pre.labels and student.labels and list(t_pre.labels) != list(student.labels):
            diff = next(i for i, (a, b) in enumerate(zip(t_pre.labels, student.labels)) if a != b)
            raise ValueError(f"{name}'s classes are not the student's (class {diff}: {t_pre.labels[diff]!r} vs "
                             f"{student.labels[diff]!r}); fine-tune the teacher on the same label set")
        if t_pre.channels != student.channels:
            raise ValueError(f"{name} takes {t_pre.channels}-channel images, the student {student.channels}")
        self.model = model.eval().requires_grad_(False)
        self.student, self.pre = student, t_pre
        self.matched_by = "name" if t_pre.labels and student.labels else "index (one of the two has no class names)"

    def train(self, mode: bool = True) -> "Teacher":  # always evaluated as at inference
        return super().train(False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, t = self.student, self.pre
        x01 = x * torch.tensor(s.std, dtype=x.dtype).view(1, -1, 1, 1) + torch.tensor(s.mean, dtype=x.dtype).view(1, -1, 1, 1)
        if tuple(x.shape[-2:]) != tuple(t.img_size):
            x01 = F.interpolate(x01, size=tuple(t.img_size), mode="bilinear", align_corners=False, antialias=True)
        return self.model(t.normalize(x01.clamp(0.0, 1.0))).float()


def distillation_loss(logits: torch.Tensor, dist_logits: torch.Tensor | None, teacher_logits: torch.Tensor,
                      target: torch.Tensor, kind: str, alpha: float, tau: float,
                      label_smoothing: float = 0.0) -> torch.Tensor:
    """(1 - alpha) CE(logits, target) + alpha KD(dist_logits or logits, teacher); see the module docstring.
    `target` is class indices or (Mixup / CutMix) soft targets."""
    if kind not in ("soft", "hard"):
        raise ValueError(f"distillation must be soft or hard, got {kind!r}")
    base = F.cross_entropy(logits.float(), target, label_smoothing=label_smoothing)
    student = (dist_logits if dist_logits is not None else logits).float()
    if kind == "soft":
        kd = F.kl_div(F.log_softmax(student / tau, -1), F.log_softmax(teacher_logits / tau, -1), reduction="batchmean",
                      log_target=True) * tau * tau
    else:
        kd = F.cross_entropy(student, teacher_logits.argmax(-1))
    return (1.0 - alpha) * base + alpha * kd
