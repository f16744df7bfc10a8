"""Per-image transforms in the paper's style, each a picklable callable `(image, generator) -> tensor`, and the
registry of training augmentations by name (`data.augment`; add one with `register_augment`).

Training: Inception crop (area 5-100%, aspect 3/4-4/3) or a small affine jitter, optional horizontal
flip, resize to the training resolution, optional RandAugment, normalisation, optional random erasing. Evaluation: the model's stored
`PreprocessConfig` (resize to the final size without a crop, as the original; `crop_pct` for a crop).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vitkit.data.augment import horizontal_flip, inception_crop, random_affine
from vitkit.data.randaugment import rand_augment, random_erasing
from vitkit.models.preprocess import PreprocessConfig


def _one_kind(imgs: list[torch.Tensor]) -> bool:
    """Whether `imgs` can be stacked into one batch as they are: one shape and one pixel type. An 8-bit image
    (uint8, 0..255) stacked with a 16-bit one (float, 0..1) would be promoted to float without its division by
    255, so images of two kinds take the one-by-one path, each through its own conversion."""
    return len({(tuple(i.shape), i.dtype) for i in imgs}) == 1

@dataclass(frozen=True)
class Augment:
    """A geometric training augmentation: `one(img, gen, t)` takes one (C, H, W) image in [0, 1] to the training size
    of TrainTransform `t`; `many(x, gens, t)` does the same to a (B, C, H, W) batch of same-size images, image i
    drawing from gens[i] exactly as `one` would (None: one image at a time only); `crops`: it keeps a part of the
    image, so files are decoded larger (the smallest crop keeps full resolution)."""

    one: Callable[[torch.Tensor, torch.Generator, TrainTransform], torch.Tensor]
    many: Callable[[torch.Tensor, list[torch.Generator], TrainTransform], torch.Tensor] | None = None
    crops: bool = False


#: data.augment's names -> what they do (a table, as timm's register_model; workers see the module's own)
AUGMENTS: dict[str, Augment] = {}


def register_augment(name: str, one: Callable, many: Callable | None = None, crops: bool = False) -> None:
    """Make `name` a value of data.augment (see `Augment` for `one`, `many`, `crops`)."""
    if name in AUGMENTS:
        raise ValueError(f"augmentation {name!r} is registered already")
    AUGMENTS[name] = Augment(one, many, crops)


def _inception(img: torch.Tensor, gen: torch.Generator, t: TrainTransform) -> torch.Tensor:
    return inception_crop(img, gen, t.preprocess.img_size, t.area, t.ratio)


def _affine(x: torch.Tensor, gens: torch.Generator | list[torch.Generator], t: TrainTransform) -> torch.Tensor:
    return random_affine(x, gens, out_size=t.preprocess.img_size)


def _resize(x: torch.Tensor, gens: torch.Generator | list[torch.Generator], t: TrainTransform) -> torch.Tensor:
    return t.preprocess.resize(x)


register_augment("inception", _inception, crops=True)  # Inception crop, area 5-100%, aspect 3/4-4/3 (§B.1)
register_augment("affine", lambda img, gen, t: _affine(img[None], gen, t)[0], _affine)  # small rotations/shifts/zooms
register_augment("none", lambda img, gen, t: _resize(img[None], gen, t)[0], _resize)  # a resize only


@dataclass
class TrainTransform:
    preprocess: PreprocessConfig
    augment: str = "inception"
    area: tuple[float, float] = (0.05, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    randaugment: tuple[int, float] = (0, 0.0)  # RandAugment (num_ops, magnitude); 0 ops = off
    erasing: float = 0.0  # random-erasing probability (after normalisation)

    def __post_init__(self) -> None:
        if self.augment not in AUGMENTS:
            raise ValueError(f"unknown augmentation {self.augment!r}; choose one of {tuple(AUGMENTS)}")
        self.randaugment = (int(self.randaugment[0]), float(self.randaugment[1]))

    def _finish(self, x: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
        """RandAugment, normalisation and random erasing of a (B, C, H, W) batch in [0, 1], image i drawing
        from gens[i] (the same draws, in the same order, as one image at a time)."""
        n, m = self.randaugment
        if n:
            x = torch.stack([rand_augment(img, g, n, m) for img, g in zip(x, gens)])
        x = self.preprocess.normalize(x)
        if self.erasing:
            x = torch.stack([random_erasing(img, g, self.erasing) for img, g in zip(x, gens)])
        return x

    def decode_size(self) -> tuple[int, int]:
        """The least size a file must be decoded at so that the smallest crop keeps full resolution."""
        if not AUGMENTS[self.augment].crops:
            return self.preprocess.decode_size()
        f = 1.0 / math.sqrt(max(self.area[0], 1e-4))
        return (math.ceil(self.preprocess.img_size[0] * f), math.ceil(self.preprocess.img_size[1] * f))

    def batch(self, imgs: list[torch.Tensor], gens: list[torch.Generator]) -> torch.Tensor | None:
        """The transform of many same-size images at once, bitwise equal to calling it on each (every image
        draws from its own generator, in the same order); None where only the one-by-one path applies
        (Inception crops differ in size per image)."""
        many = AUGMENTS[self.augment].many
        if many is None or not _one_kind(imgs):
            return None
        x = many(torch.stack(imgs), gens, self)
        if self.flip:
            x = horizontal_flip(x, gens)
        return self._finish(x, gens)

    def __call__(self, img: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        x = AUGMENTS[self.augment].one(img, gen, self)
        if self.flip:
            x = horizontal_flip(x[None], gen)[0]
        return self._finish(x[None], [gen])[0]


@dataclass
class EvalTransform:
    preprocess: PreprocessConfig

    def decode_size(self) -> tuple[int, int]:
        return self.preprocess.decode_size()

    def batch(self, imgs: list[torch.Tensor], gens: list[torch.Generator]) -> torch.Tensor | None:
        """Many same-size images at once (None if their sizes or pixel types differ)."""
        if not _one_kind(imgs):
            return None
        return self.preprocess(torch.stack(imgs))

    def __call__(self, img: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        return self.preprocess(img[None])[0]

    def check(self, img: torch.Tensor) -> None:
        """A ValueError (the image is skipped and named) when its preprocessing would cost far more than its output."""
        self.preprocess.check_input_size(*img.shape[-2:])
