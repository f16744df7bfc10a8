"""The [data] section of a run config, typed: every key, its default and its validation in one place.

`open_splits(DataConfig)` (vitkit.data.datasets) reads it; `DataConfig.from_flag` is a command's `--data` value.
AUGREG holds the augmentation presets of "How to train your ViT" (Steiner et al. 2022), which `data.augreg` names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vitkit.data.collate import NativePacker
from vitkit.data.glyphs import STREAM_MAX_IMAGES, WORD_ALPHABET, WORD_MAX_LETTERS
from vitkit.data.transforms import AUGMENTS, TrainTransform
from vitkit.models.config import MAX_TOKENS
from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils import check_choice, check_int, check_range
from vitkit.utils.recipe import RecipeSection, key

DATA_NAMES = ("digits", "lfw", "glyphs", "glyph_words", "shards", "hf", "cifar10", "cifar100", "folder", "list",
              "auto")
GLYPH_MEMORY = 4 << 30  # bytes of glyph images a run may draw and hold
# glyphs are drawn at most this size (each pixel's distance to every stroke segment: a 1,024 px image costs 64x a
# 128 px one, and a stream of them never kept up with a step); the model resizes them to its input size
GLYPH_MAX_SIZE = 256
GLYPH_MAX_CLASSES = 100_000  # above every benchmark's label set (JFT-300M: 18,291; ImageNet-21k: 21,843)

# AugReg's augmentation presets (Steiner et al. 2022, as big_vision's vit_i1k config): RandAugment and Mixup alpha
AUGREG: dict[str, dict[str, Any]] = {
    "none": {"randaugment": [0, 0], "mixup": 0.0},
    "light1": {"randaugment": [2, 0], "mixup": 0.0},
    "light2": {"randaugment": [2, 10], "mixup": 0.2},
    "medium1": {"randaugment": [2, 15], "mixup": 0.2},
    "medium2": {"randaugment": [2, 15], "mixup": 0.5},
    "strong1": {"randaugment": [2, 20], "mixup": 0.5},
    "strong2": {"randaugment": [2, 20], "mixup": 0.8},
}


@dataclass
class DataConfig(RecipeSection):
    """Where the images come from, how the training images are augmented and how they are loaded."""

    name: str = key("data.name", "auto", "digits | lfw | glyphs | glyph_words | shards | hf | cifar10 | "
                    "cifar100 | folder | list | auto (from the path)")
    path: str = key("data.path", "")
    test_path: str = key("data.test_path", "", "list files: a separate test list; shards: the test shards' pattern; "
                         "hf: test Parquet")
    split: str = key("data.split", "", "hf: the training split of a saved DatasetDict ('' = train)")
    test_split: str = key("data.test_split", "", "hf: its test split ('' = test, else validation, else a holdout)")
    image_column: str = key("data.image_column", "", "hf: the image column ('' = the one Image feature)")
    label_column: str = key("data.label_column", "", "hf: the label column ('' = the one ClassLabel, else label)")
    hf_cache: str = key("data.hf_cache", "", "hf: where Parquet is converted to Arrow ('' = the datasets cache)")
    holdout: float = key("data.holdout", 0.1, "test fraction for sources without a test split")
    dev_fraction: float = key("data.dev_fraction", 0.0, "a dev split carved from train (evaluation during "
                              "training, sweeps)")
    eval_split: str = key("data.eval_split", "dev", "the split evaluated every train.eval_every steps: dev | test")
    augment: str = key("data.augment", "inception", "inception | affine | none (vitkit.data.transforms.AUGMENTS; "
                       "register_augment adds one)")
    area: list[float] = key("data.area", [0.05, 1.0])
    ratio: list[float] = key("data.ratio", [0.75, 1.3333333333333333])
    flip: bool = key("data.flip", True)
    crop_pct: float = key("data.crop_pct", 0.0, "evaluation: 0 = resize to the final size without a crop (the "
                          "original)")
    mean: Any = key("data.mean", [0.5], "one value per channel, or one for all; [-1, 1] scaling by default")
    std: Any = key("data.std", [0.5])
    channels: int = key("data.channels", 3)
    num_workers: int = key("data.num_workers", 2)
    eval_batch_size: int = key("data.eval_batch_size", 256)
    max_pixels: int = key("data.max_pixels", 0, "images with more pixels are skipped as unreadable; 0 = Pillow's "
                          "limit (179M)")
    randaugment: list[float] = key("data.randaugment", [0, 0], "RandAugment [num_ops, magnitude] (AugReg: [2, 10] "
                                   ".. [2, 20]); 0 ops = off")
    random_erasing: float = key("data.random_erasing", 0.0, "probability of erasing one random rectangle (DeiT: "
                                "0.25)")
    augreg: str = key("data.augreg", "", "an AugReg preset (AUGREG): sets data.randaugment and train.mixup")
    subset: int = key("data.subset", 0, "train on a random subset of this many training images (0 = all; Fig. 4)")
    subset_seed: int = key("data.subset_seed", 0, "which subset (the subsets of one seed nest)")
    glyph_images: int = key("data.glyph_images", 100000, "data.name = glyphs: procedurally drawn training images")
    glyph_classes: int = key("data.glyph_classes", 1000)
    glyph_size: int = key("data.glyph_size", 16, "pixels per side")
    glyph_seed: int = key("data.glyph_seed", 0)
    glyph_test_images: int = key("data.glyph_test_images", 0, "glyphs / glyph_words: the test split's images (0 = a "
                                 "tenth of data.glyph_images, between 1,000 and 10,000)")
    max_patches: int = key("data.max_patches", 0, "native resolution (NaViT): each image resized, aspect kept and "
                           "no crop, to at most this many patches, images packed into rows (training and "
                           "evaluation); 0 = the model's square input")
    min_patches: int = key("data.min_patches", 0, "native resolution, training: each image's cap drawn from "
                           "[min_patches, max_patches] (0 = every image at max_patches)")
    token_drop: float = key("data.token_drop", 0.0, "native resolution, training: the share of each image's patches "
                            "dropped at random (NaViT's token dropping)")
    pack_budget: int = key("data.pack_budget", 0, "native resolution: patches per packed row (0 = max_patches)")
    glyph_stream: bool = key("data.glyph_stream", False, "draw each glyph when it is loaded, not up front: any "
                             "number of images up to 10^8, nothing held but labels (other images than the in-memory "
                             "set's: a counter-based random stream per image)")

    def __post_init__(self) -> None:
        """Checked on construction, before any data is read; a ValueError names the first bad key."""
        check_choice("data.name", self.name, DATA_NAMES)
        for k in ("path", "test_path", "split", "test_split", "image_column", "label_column", "hf_cache"):
            if not isinstance(getattr(self, k), str):
                raise ValueError(f"data.{k} must be a string, got {getattr(self, k)!r}")
        check_range("data.holdout", self.holdout, 0.0, 1.0, low_open=True)
        check_range("data.dev_fraction", self.dev_fraction, 0.0, 1.0)
        check_choice("data.eval_split", self.eval_split, ("dev", "test"))
        check_choice("data.augment", self.augment, tuple(AUGMENTS))
        for k, lo, hi in (("area", 0.0, 1.0), ("ratio", 0.0, math.inf)):
            pair = getattr(self, k)
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"data.{k} must be two numbers [low, high], got {pair!r}")
            a = check_range(f"data.{k}[0]", pair[0], lo, hi, high_open=False, low_open=True)
            b = check_range(f"data.{k}[1]", pair[1], lo, hi, high_open=False, low_open=True)
            if a > b:
                raise ValueError(f"data.{k} must be [low, high] with low <= high, got {pair!r}")
        if not isinstance(self.flip, bool):
            raise ValueError(f"data.flip must be true or false, got {self.flip!r}")
        check_range("data.crop_pct", self.crop_pct, 0.0, 1.0, high_open=False)
        if 0 < self.crop_pct < 0.05:
            raise ValueError(f"data.crop_pct must be 0 (no crop) or in [0.05, 1], got {self.crop_pct!r}")
        for k in ("mean", "std"):
            vals = getattr(self, k) if isinstance(getattr(self, k), (list, tuple)) else [getattr(self, k)]
            for v in vals:
                check_range(f"data.{k}[]", v, -math.inf if k == "mean" else 0.0, math.inf, low_open=k == "std")
        check_choice("data.channels", self.channels, (1, 3))
        check_int("data.num_workers", self.num_workers, low=0)
        check_int("data.eval_batch_size", self.eval_batch_size)
        check_int("data.max_pixels", self.max_pixels, low=0)
        check_int("data.subset", self.subset, low=0)
        check_int("data.subset_seed", self.subset_seed, low=0)
        check_int("data.glyph_images", self.glyph_images)
        check_int("data.glyph_classes", self.glyph_classes, low=2, high=GLYPH_MAX_CLASSES)
        if self.name == "glyphs" and self.glyph_classes > self.glyph_images:
            raise ValueError(f"data.glyph_classes = {self.glyph_classes:,} is more than data.glyph_images = "
                             f"{self.glyph_images:,}: most classes would have no image")
        check_int("data.glyph_size", self.glyph_size, low=4, high=GLYPH_MAX_SIZE)
        if self.name == "glyph_words" and not 2 <= self.glyph_classes <= WORD_ALPHABET * WORD_MAX_LETTERS:
            raise ValueError(f"data.glyph_classes = {self.glyph_classes:,}: glyph_words has at most "
                             f"{WORD_ALPHABET * WORD_MAX_LETTERS} classes (words of 1-{WORD_MAX_LETTERS} letters of "
                             f"{WORD_ALPHABET})")
        if not isinstance(self.glyph_stream, bool):
            raise ValueError(f"data.glyph_stream must be true or false, got {self.glyph_stream!r}")
        if self.glyph_stream and self.name == "glyph_words":
            raise ValueError("data.glyph_stream draws single glyphs when loaded; glyph_words are drawn up front: set "
                             "data.glyph_stream = false")
        if self.glyph_stream:
            check_int("data.glyph_images", self.glyph_images, high=STREAM_MAX_IMAGES)
        elif self.glyph_images * self.glyph_size**2 > GLYPH_MEMORY:  # drawn up front and held in memory
            raise ValueError(f"data.glyph_images = {self.glyph_images:,} images of {self.glyph_size}x{self.glyph_size}"
                             f" px need {self.glyph_images * self.glyph_size ** 2:,} bytes in memory, over the "
                             f"{GLYPH_MEMORY:,} allowed (at most {GLYPH_MEMORY // self.glyph_size ** 2:,} images; data.glyph_stream = true draws "
                             "them when loaded)")
        check_int("data.glyph_seed", self.glyph_seed, low=0)
        check_int("data.glyph_test_images", self.glyph_test_images, low=0, high=STREAM_MAX_IMAGES)
        if not self.glyph_stream and self.glyph_test_images * self.glyph_size**2 > GLYPH_MEMORY:
            raise ValueError(f"data.glyph_test_images = {self.glyph_test_images:,} images of {self.glyph_size}x"
                             f"{self.glyph_size} px need {self.glyph_test_images * self.glyph_size ** 2:,} bytes in "
                             f"memory, over the {GLYPH_MEMORY:,} allowed")
        ra = self.randaugment
        if not isinstance(ra, (list, tuple)) or len(ra) != 2:
            raise ValueError(f"data.randaugment must be [num_ops, magnitude], got {ra!r}")
        check_int("data.randaugment[0]", ra[0], low=0, high=16)  # RandAugment applies 1-3 operations
        check_range("data.randaugment[1]", ra[1], 0.0, 30.0, high_open=False)
        check_range("data.random_erasing", self.random_erasing, 0.0, 1.0, high_open=False)
        check_int("data.max_patches", self.max_patches, low=0, high=MAX_TOKENS)  # before a table of that length
        check_int("data.min_patches", self.min_patches, low=0)
        check_int("data.pack_budget", self.pack_budget, low=0, high=MAX_TOKENS)
        check_range("data.token_drop", self.token_drop, 0.0, 1.0)
        if not self.max_patches and (self.min_patches or self.token_drop or self.pack_budget):
            raise ValueError("data.min_patches, data.token_drop and data.pack_budget apply to native resolution: set "
                             "data.max_patches")
        check_int("data.min_patches", self.min_patches, low=0, high=self.max_patches)
        if self.max_patches and (self.augment != "none" or self.randaugment[0] or self.random_erasing):
            raise ValueError(f"data.max_patches (native resolution) resizes each image whole, no crop: set "
                             f"data.augment = none (got {self.augment!r}), data.randaugment [0, 0] and "
                             "data.random_erasing 0 (data.flip is applied)")
        if self.augreg and self.augreg not in AUGREG:
            raise ValueError(f"data.augreg must be one of {', '.join(AUGREG)} (or empty), got {self.augreg!r}")

    def train_transform(self, preprocess: PreprocessConfig) -> TrainTransform:
        """The training transform this section describes, for a model's preprocessing (its size and normalisation)."""
        return TrainTransform(preprocess, self.augment, tuple(self.area), tuple(self.ratio), self.flip,
                              tuple(self.randaugment), float(self.random_erasing))

    def native_packer(self, preprocess: PreprocessConfig, patch: int, train: bool = True) -> NativePacker | None:
        """The packing collator of native resolution (data.max_patches > 0; vitkit/data/collate.py) for a model's
        preprocessing and patch size, None for square images; evaluation (`train=False`) draws nothing."""
        if not self.max_patches:
            return None
        if self.pack_budget and self.pack_budget < self.max_patches:
            raise ValueError(f"data.pack_budget = {self.pack_budget} cannot hold an image of data.max_patches = "
                             f"{self.max_patches} patches")
        if not train:
            return NativePacker(preprocess, patch, self.max_patches, self.pack_budget or None)
        return NativePacker(preprocess, patch, self.max_patches, self.pack_budget or None, self.min_patches or None,
                            float(self.token_drop), flip=bool(self.flip))

    @property
    def pixel_limit(self) -> int | None:
        """data.max_pixels, None for the default limit."""
        return self.max_pixels or None

    @classmethod
    def from_flag(cls, data: str, channels: int, num_workers: int = 0, eval_batch_size: int = 256,
                  max_pixels: int | None = None) -> DataConfig:
        """The data a command-line `--data` value names: `digits`, `lfw`, or a path (its kind detected)."""
        named = data in ("digits", "lfw")
        return cls(name=data if named else "auto", path="" if named else data, channels=channels,
                   num_workers=num_workers, eval_batch_size=eval_batch_size, max_pixels=max_pixels or 0)
