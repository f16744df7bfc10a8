"""Procedural glyphs: a labelled pre-training set made on the spot, for runs that cannot download one.

`vitkit reproduce` needs a pre-training set of 10^5+ images whose size can be varied, and nothing can be
downloaded, so it draws one. Class c is a random prototype of 1 to 3 strokes (quadratic Bezier curves
with control points anywhere in the central 70% of the canvas). An image of class c is that prototype
with every control point jittered, in a random pose (rotation +-20 degrees, scale 0.8-1.1, shift +-8% of
the side), a random stroke width and contrast, drawn anti-aliased (a Gaussian profile of the distance to
the curve) on a grey canvas with pixel noise. Nothing in it is tuned for one model family: there are no
textures, no fixed positions, no colour; it is a many-class shape-recognition task in the spirit of
formula-driven pre-training (FractalDB, Kataoka et al. 2020).

Every image is a function of (seed, split, index): the first n images of a set are the same whatever
its size, so subsets nest.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from vitkit.data.base import ArrayDataset
from vitkit.utils import check_int

CHUNK = 1000  # images drawn per random stream: image i comes from stream (seed, split, i // CHUNK)
POINTS_PER_STROKE = 9  # each Bezier curve is drawn as 8 straight segments
SPLIT_IDS = {"train": 0, "test": 1}


def _prototypes(classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(control points (K, 3 strokes, 3 points, 2), stroke present (K, 3)).

    A stroke runs 0.3-0.6 of the side from a start point in the central 70%, bent by its middle control
    point (an offset across the chord); no class is a dot."""
    rng = np.random.default_rng([seed, 7919])
    start = rng.uniform(0.15, 0.85, size=(classes, 3, 2))
    ang = rng.uniform(0, 2 * np.pi, size=(classes, 3))
    chord = rng.uniform(0.3, 0.6, size=(classes, 3, 1)) * np.stack([np.cos(ang), np.sin(ang)], -1)
    end = np.clip(start + chord, 0.1, 0.9)
    normal = np.stack([-chord[..., 1], chord[..., 0]], -1)
    mid = (start + end) / 2 + rng.normal(0.0, 0.6, size=(classes, 3, 1)) * normal
    pts = np.stack([start, np.clip(mid, 0.05, 0.95), end], axis=2)
    n_strokes = rng.choice([1, 2, 3], size=classes, p=[0.2, 0.45, 0.35])
    present = np.arange(3)[None, :] < n_strokes[:, None]
    return pts, present


def _draw_chunk(protos: tuple[np.ndarray, np.ndarray], n: int, size: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    pts, present = protos
    k = len(pts)
    labels = rng.integers(0, k, size=n)
    p = pts[labels] + rng.normal(0.0, 0.05, size=(n, 3, 3, 2))  # jittered control points
    ang = rng.uniform(-0.35, 0.35, n)
    scale = rng.uniform(0.8, 1.1, n)
    shift = rng.uniform(-0.08, 0.08, (n, 2))
    rot = np.stack([np.stack([np.cos(ang), -np.sin(ang)], -1), np.stack([np.sin(ang), np.cos(ang)], -1)], -2)
    rot = rot * scale[:, None, None]
    p = np.einsum("nij,nspj->nspi", rot, p - 0.5) + 0.5 + shift[:, None, None, :]
    t = np.linspace(0.0, 1.0, POINTS_PER_STROKE)[:, None]
    curve = ((1 - t) ** 2)[None, None] * p[:, :, None, 0] + (2 * t * (1 - t))[None, None] * p[:, :, None, 1] \
        + (t**2)[None, None] * p[:, :, None, 2]  # (n, 3, points, 2)
    a = curve[:, :, :-1].reshape(n, -1, 2)  # segment starts (n, S, 2)
    v = (curve[:, :, 1:] - curve[:, :, :-1]).reshape(n, -1, 2)
    seg_present = np.repeat(present[labels], POINTS_PER_STROKE - 1, axis=1)  # (n, S)
    c = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(c, c, indexing="ij")
    pix = torch.stack([xx.reshape(-1), yy.reshape(-1)], -1)  # (P, 2) as (x, y)
    a_t, v_t = torch.from_numpy(a).float(), torch.from_numpy(v).float()
    rx = pix[None, :, None, 0] - a_t[:, None, :, 0]  # (n, P, S), x and y kept apart (no size-2 reductions)
    ry = pix[None, :, None, 1] - a_t[:, None, :, 1]
    vx, vy = v_t[:, None, :, 0], v_t[:, None, :, 1]
    tt = ((rx * vx + ry * vy) / (vx * vx + vy * vy + 1e-12)).clamp_(0.0, 1.0)
    d2 = (rx - tt * vx).square_() + (ry - tt * vy).square_()
    d2 = d2.masked_fill_(~torch.from_numpy(seg_present)[:, None, :], torch.inf).amin(-1).double().numpy()  # (n, P)
    width = rng.uniform(0.04, 0.075, (n, 1))
    ink = rng.uniform(0.6, 1.0, (n, 1))
    paper = rng.uniform(0.0, 0.25, (n, 1))
    img = paper + (ink - paper) * np.exp(-0.5 * d2 / width**2) + rng.normal(0.0, 0.04, (n, size * size))
    img = np.clip(np.rint(img * 255), 0, 255).astype(np.uint8).reshape(n, 1, size, size)
    return img, labels


@lru_cache(maxsize=4)
def _draw(images: int, classes: int, size: int, seed: int, split: str) -> tuple[torch.Tensor, np.ndarray]:
    protos = _prototypes(classes, seed)
    imgs, labels = [], []
    for c in range(-(-images // CHUNK)):
        rng = np.random.default_rng([seed, SPLIT_IDS[split], c])
        x, y = _draw_chunk(protos, CHUNK, size, rng)
        imgs.append(x)
        labels.append(y)
    return torch.from_numpy(np.concatenate(imgs)[:images]), np.concatenate(labels)[:images]


def glyphs(images: int, classes: int = 1000, size: int = 16, seed: int = 0, split: str = "train") -> ArrayDataset:
    """`images` procedural glyph images (1 channel, size x size, uint8) of `classes` classes.

    The test split draws from other random streams than train (same prototypes, other images)."""
    check_int("glyph images", images)
    check_int("glyph classes", classes, low=2)
    check_int("glyph size", size, low=4)
    if split not in SPLIT_IDS:
        raise ValueError(f"glyph split must be train or test, got {split!r}")
    x, y = _draw(images, classes, size, seed, split)
    names = [f"glyph{c:04d}" for c in range(classes)]
    return ArrayDataset(x, y, names, f"glyphs/{split}")


def glyph_test_size(train_images: int) -> int:
    """Size of the glyph test split that goes with a training set: 10%, between 1,000 and 10,000."""
    return min(10_000, max(1_000, train_images // 10))
