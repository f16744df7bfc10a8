"""Per-image transforms in the paper's style, each a picklable callable `(image, generator) -> tensor`.

Training: Inception crop (area 5-100%, aspect 3/4-4/3) or a small affine jitter, optional horizontal
flip, resize to the training resolution, optional RandAugment, normalisation, optional random erasing. Evaluation: the model's stored
`PreprocessConfig` (resize to the final size without a crop, as the original; `crop_pct` for a crop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vitkit.data.augment import horizontal_flip, inception_crop, random_affine
from vitkit.data.randaugment import rand_augment, random_erasing
from vitkit.models.preprocess import PreprocessConfig

AUGMENTS = ("inception", "affine", "none")


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
            raise ValueError(f"unknown augmentation {self.augment!r}; choose one of {AUGMENTS}")
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
        if self.augment != "inception":
            return self.preprocess.decode_size()
        f = 1.0 / math.sqrt(max(self.area[0], 1e-4))
        return (math.ceil(self.preprocess.img_size[0] * f), math.ceil(self.preprocess.img_size[1] * f))

    def batch(self, imgs: list[torch.Tensor], gens: list[torch.Generator]) -> torch.Tensor | None:
        """The transform of many same-size images at once, bitwise equal to calling it on each (every image
        draws from its own generator, in the same order); None where only the one-by-one path applies
        (Inception crops differ in size per image)."""
        if self.augment == "inception" or len({tuple(i.shape) for i in imgs}) != 1:
            return None
        x = torch.stack(imgs)
        if self.augment == "affine":
            x = random_affine(x, gens, out_size=self.preprocess.img_size)
        else:
            x = self.preprocess.resize(x)
        if self.flip:
            x = horizontal_flip(x, gens)
        return self._finish(x, gens)

    def __call__(self, img: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        size = self.preprocess.img_size
        if self.augment == "inception":
            x = inception_crop(img, gen, size, self.area, self.ratio)
        elif self.augment == "affine":
            x = random_affine(img[None], gen, out_size=size)[0]
        else:
            x = self.preprocess.resize(img[None])[0]
        if self.flip:
            x = horizontal_flip(x[None], gen)[0]
        return self._finish(x[None], [gen])[0]


@dataclass
class EvalTransform:
    preprocess: PreprocessConfig

    def decode_size(self) -> tuple[int, int]:
        return self.preprocess.decode_size()

    def batch(self, imgs: list[torch.Tensor], gens: list[torch.Generator]) -> torch.Tensor | None:
        """Many same-size images at once (None if their sizes differ)."""
        if len({tuple(i.shape) for i in imgs}) != 1:
            return None
        return self.preprocess(torch.stack(imgs))

    def __call__(self, img: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        return self.preprocess(img[None])[0]

    def check(self, img: torch.Tensor) -> None:
        """A ValueError (the image is skipped and named) when its preprocessing would cost far more than its output."""
        self.preprocess.check_input_size(*img.shape[-2:])
