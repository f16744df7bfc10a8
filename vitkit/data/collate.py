"""Batches of images at their own resolution and aspect ratio, packed into rows of a token budget (NaViT: Dehghani et
al., "Patch n' Pack", 2023; the model side is vitkit/models/packing.py).

`NativePacker` turns a list of (image, label) samples -- what every vitkit data source's `get` returns (folders,
shards, Hugging Face datasets, arrays) -- into one `PackedRows`:

1. each image is resized, aspect ratio kept and no crop, to the largest whole-patch size of at most `max_patches`
   patches (`--max-patches`; timm NaFlex's `max_seq_len`); with `min_patches` each image's cap is drawn uniformly
   from [min_patches, max_patches] first (NaViT §3.1 "variable resolution": the resolution sampled per image);
2. optionally a random share of each image's patches is dropped (NaViT §3.3 token dropping; "continuous" rates:
   `drop_rate`, or the resolution-dependent schedule `drop_range` = (rate of a one-patch image, rate of a
   `max_patches` image), linear in the image's patch count); each image keeps at least one patch;
3. the images' patch sequences are packed greedily, first fit in the order given, into rows of `budget` patches
   (NaViT §2.3); no image is split across rows, none is dropped: a batch needs as many rows as first fit makes.

Randomness comes only from the generators passed to each call (a batch is a pure function of its samples and the
generators: the StepLoader's contract). A `StepLoader` given a `NativePacker` as its transform loads `PackedRows`'
batch as `Batch.x` (vitkit/data/loader.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vitkit.models.packing import PackedBatch, first_fit, patchify, raster_coords
from vitkit.models.preprocess import PreprocessConfig


@dataclass
class PackedRows:
    """A packed batch and its labels: `batch` (models/packing.py's `PackedBatch`, image i of `labels` is image id i),
    `labels` (n_images,), and each image's kept and full patch counts (`kept`, `full`)."""

    batch: PackedBatch
    labels: torch.Tensor
    kept: list[int]
    full: list[int]


class NativePacker:
    """Samples -> `PackedRows` (see the module docstring): resize under `max_patches` (drawn from
    [`min_patches`, `max_patches`] when `min_patches` is given), token dropping (`drop_rate`, or `drop_range`'s
    resolution-dependent rates), first-fit packing into rows of `budget` patches; `flip`: a random horizontal flip
    of each training image. `preprocess` normalises (its mean and std, its interpolation); `patch` is the model's
    patch size."""

    def __init__(self, preprocess: PreprocessConfig, patch: int, max_patches: int, budget: int | None = None,
                 min_patches: int | None = None, drop_rate: float = 0.0,
                 drop_range: tuple[float, float] | None = None, flip: bool = False) -> None:
        budget = max_patches if budget is None else budget
        if patch < 1 or max_patches < 1:
            raise ValueError(f"patch ({patch}) and max_patches ({max_patches}) must be >= 1")
        if budget < max_patches:
            raise ValueError(f"a row's budget of {budget} patches cannot hold an image of max_patches={max_patches}; "
                             "the budget must be >= max_patches")
        if min_patches is not None and not 1 <= min_patches <= max_patches:
            raise ValueError(f"min_patches must be in [1, max_patches={max_patches}], got {min_patches}")
        rates = [drop_rate, *(drop_range or ())]
        if any(not 0.0 <= r < 1.0 for r in rates):
            raise ValueError(f"token drop rates must be in [0, 1), got {rates}")
        if drop_range is not None and drop_rate:
            raise ValueError("give drop_rate (one rate) or drop_range (resolution-dependent rates), not both")
        self.preprocess, self.patch, self.max_patches, self.budget = preprocess, patch, max_patches, budget
        self.min_patches, self.drop_rate, self.drop_range = min_patches, drop_rate, drop_range
        self.flip = flip

    def cap(self, gen: torch.Generator | None) -> int:
        """This image's patch cap: max_patches, or drawn from [min_patches, max_patches]."""
        if self.min_patches is None or gen is None:  # (a training call without a generator is refused)
            return self.max_patches
        return int(torch.randint(self.min_patches, self.max_patches + 1, (1,), generator=gen))

    def rate(self, n: int) -> float:
        """The drop rate of an image of `n` patches."""
        if self.drop_range is None:
            return self.drop_rate
        lo, hi = self.drop_range
        return lo + (hi - lo) * (n - 1) / max(self.max_patches - 1, 1)

    def __call__(self, samples: Sequence[tuple[torch.Tensor, int]],
                 gen: torch.Generator | Sequence[torch.Generator] | None = None, train: bool = True) -> PackedRows:
        """Pack `samples` ((C, H, W) images in [0, 1] or uint8, labels); `gen`: one generator for all, or one per
        sample (the StepLoader's: an image's draws then depend on its place in the global batch alone);
        `train=False` (evaluation) draws nothing: every image at max_patches, no token dropped."""
        if not samples:
            raise ValueError("no samples to pack")
        if train and gen is None and (self.min_patches is not None or self.drop_rate or self.drop_range or self.flip):
            raise ValueError("resolution sampling (min_patches), token dropping and flips draw from a generator: pass "
                             "gen")
        gens = list(gen) if isinstance(gen, Sequence) else [gen] * len(samples)
        if len(gens) != len(samples):
            raise ValueError(f"{len(samples)} samples but {len(gens)} generators")
        patches, coords, grids, kept, full = [], [], [], [], []
        for i, ((img, _), g) in enumerate(zip(samples, gens)):
            if img.ndim != 3 or img.shape[0] != self.preprocess.channels:
                raise ValueError(f"sample {i}: expected an image ({self.preprocess.channels}, H, W), got shape "
                                 f"{tuple(img.shape)}")
            cap = self.cap(g) if train else self.max_patches
            if train and self.flip and float(torch.rand((), generator=g)) < 0.5:  # a horizontal flip, p = 0.5
                img = img.flip(-1)
            x = self.preprocess.native(img[None], self.patch, cap)[0]
            grid = (x.shape[1] // self.patch, x.shape[2] // self.patch)
            p, c = patchify(x, self.patch), raster_coords(grid)
            n = len(p)
            rate = self.rate(n) if train else 0.0
            if rate > 0 and g is not None:  # (train without gen refused above)
                keep = torch.randperm(n, generator=g)[: max(1, round(n * (1 - rate)))].sort().values
                p, c = p[keep], c[keep]
            patches.append(p)
            coords.append(c)
            grids.append(grid)
            kept.append(len(p))
            full.append(n)
        rows = first_fit(kept, self.budget)
        batch = PackedBatch.from_patches(patches, coords, grids, rows, length=self.budget)
        labels = torch.tensor([int(y) for _, y in samples], dtype=torch.long)
        return PackedRows(batch, labels, kept, full)
