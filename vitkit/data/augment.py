"""Batched, seeded image augmentation on tensors (no torchvision).

Every random draw comes from an explicit `torch.Generator`, so a training step's augmentation is a
pure function of (seed, step): that is what makes an interrupted run resume bit-for-bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


def random_affine(
    x: torch.Tensor,
    gen: torch.Generator | list[torch.Generator],
    degrees: float = 10.0,
    translate: float = 0.1,
    scale: tuple[float, float] = (0.9, 1.1),
    out_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Random rotation / translation (fraction of the side) / zoom of a (B, C, H, W) batch, zero fill.

    With `out_size` the result is resampled to that size in the same bilinear step. `gen` is one generator
    for the batch, or one per image (each image's draws then come from its own generator, so a batch gives
    bitwise what its images give one by one).
    """
    B = x.shape[0]
    if isinstance(gen, list):
        u = torch.cat([torch.rand(1, 4, generator=g) for g in gen])
    else:
        u = torch.rand(B, 4, generator=gen)
    ang = (u[:, 0] * 2 - 1) * math.radians(degrees)
    s = scale[0] + u[:, 1] * (scale[1] - scale[0])
    tx, ty = (u[:, 2] * 2 - 1) * translate * 2, (u[:, 3] * 2 - 1) * translate * 2  # grid units span 2
    cos, sin = torch.cos(ang) / s, torch.sin(ang) / s
    theta = torch.stack([torch.stack([cos, -sin, tx], 1), torch.stack([sin, cos, ty], 1)], 1).to(x.dtype)
    H, W = out_size or x.shape[-2:]
    grid = F.affine_grid(theta, [B, x.shape[1], H, W], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def horizontal_flip(x: torch.Tensor, gen: torch.Generator | list[torch.Generator], p: float = 0.5) -> torch.Tensor:
    """Flip each image left-right with probability p (one generator, or one per image)."""
    if isinstance(gen, list):
        flip = torch.cat([torch.rand(1, generator=g) for g in gen]) < p
    else:
        flip = torch.rand(x.shape[0], generator=gen) < p
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def inception_crop(
    img: torch.Tensor,
    gen: torch.Generator,
    out_size: tuple[int, int],
    area: tuple[float, float] = (0.05, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    attempts: int = 10,
) -> torch.Tensor:
    """Inception-style random crop of one (C, H, W) image, resized (bilinear) to `out_size`.

    The crop covers a uniform fraction of the area in `area` with a log-uniform aspect ratio in
    `ratio` (the paper's pre-processing, 5-100% and 3/4-4/3); after `attempts` failures to fit,
    the whole image is used.
    """
    H, W = img.shape[-2:]
    u = torch.rand(attempts, 4, generator=gen, dtype=torch.float64)
    top, left, h, w = 0, 0, H, W
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for a, r, ty, tx in u.tolist():
        target = H * W * (area[0] + a * (area[1] - area[0]))
        aspect = math.exp(lo + r * (hi - lo))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= W and 0 < ch <= H:
            top, left, h, w = int(ty * (H - ch + 1)), int(tx * (W - cw + 1)), ch, cw
            break
    crop = img[None, :, top : top + h, left : left + w]
    out = F.interpolate(crop, size=tuple(out_size), mode="bilinear", align_corners=False, antialias=True)
    return out[0].clamp_(0, 1)


@dataclass(frozen=True)
class Mix:
    """What `mix_images` did to a batch: image i was blended with image B-1-i, keeping `lam` of itself."""

    lam: float = 1.0
    kind: str = "none"  # none | mixup | cutmix

    def targets(self, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        """Soft targets (B, K) that sum to 1: lam x onehot(y_i) + (1 - lam) x onehot(y_{B-1-i})."""
        onehot = F.one_hot(y, num_classes).float()
        return onehot if self.kind == "none" else self.lam * onehot + (1.0 - self.lam) * onehot.flip(0)


def mix_images(
    x: torch.Tensor,
    gen: torch.Generator,
    mixup_alpha: float = 0.0,
    cutmix_alpha: float = 0.0,
    switch_prob: float = 0.5,
    prob: float = 1.0,
) -> tuple[torch.Tensor, Mix]:
    """Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019) of a (B, C, H, W) batch with its own reverse.

    One lambda per batch from Beta(alpha, alpha); with both alphas set, CutMix is chosen with probability
    `switch_prob`; the batch is left as it is with probability 1 - `prob`. CutMix pastes a box of about
    (1 - lambda) of the area from image B-1-i into image i and corrects lambda to the box's exact area.
    Every draw comes from `gen` (a Beta draw through a NumPy generator seeded from it), so the result is a
    function of (seed, step): exact resume holds."""
    u = torch.rand(3, generator=gen, dtype=torch.float64).tolist()
    rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=gen)))
    if u[0] >= prob or (mixup_alpha <= 0 and cutmix_alpha <= 0):
        return x, Mix()
    cutmix = cutmix_alpha > 0 and (mixup_alpha <= 0 or u[1] < switch_prob)
    lam = float(rng.beta(cutmix_alpha, cutmix_alpha) if cutmix else rng.beta(mixup_alpha, mixup_alpha))
    if not cutmix:
        return lam * x + (1.0 - lam) * x.flip(0), Mix(lam, "mixup")
    H, W = x.shape[-2:]
    cut = math.sqrt(1.0 - lam)
    ch, cw = int(H * cut), int(W * cut)
    cy, cx = int(rng.integers(H)), int(rng.integers(W))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, H)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, W)
    out = x.clone()
    out[..., y0:y1, x0:x1] = x.flip(0)[..., y0:y1, x0:x1]
    return out, Mix(1.0 - (y1 - y0) * (x1 - x0) / (H * W), "cutmix")
