"""`open_splits`: the train / test (/ dev) data sets a config section or a `--data` value names.

Sources: the bundled digits and lfw_subset, procedurally drawn glyphs (glyphs.py), WebDataset-style tar
shards (shards.py), Hugging Face `datasets` on disk (hfdatasets.py: save_to_disk folders, Parquet), image
folders, list files and CIFAR python batches (the types are in base.py). Nothing is downloaded.
`SOURCES` is the registry of sources by `data.name`: **add a data source** with `@register_source(name)` here
(and its name in config.py's `DATA_NAMES`, which validates recipes before any import of the data; a test checks the
two agree).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vitkit.data.base import ArrayDataset, Dataset, FileDataset, Subset, holdout, synthetic
from vitkit.data.cifar import find_cifar, load_cifar
from vitkit.data.config import DATA_NAMES, DataConfig
from vitkit.data.digits import load_digits_split
from vitkit.data.folders import image_folder, list_file
from vitkit.data.glyphs import GlyphStream, glyph_test_size, glyph_test_stream, glyph_words, glyphs
from vitkit.data.hfdatasets import HFImageDataset, is_hf_path, splits_of
from vitkit.data.lfw import load_lfw_subset
from vitkit.data.preprocess import max_image_pixels
from vitkit.data.shards import ShardDataset, is_shard_pattern, split_patterns

__all__ = ["ArrayDataset", "DataConfig", "Dataset", "FileDataset", "Subset", "detect_kind", "holdout", "open_splits",
           "synthetic"]

def detect_kind(path: str) -> str:
    """cifar10 / cifar100 / shards / hf / folder / list for a user-supplied path."""
    p = Path(path)
    if is_shard_pattern(path) or path.endswith(".tar") or (p.is_dir() and any(p.glob("*.tar"))):
        return "shards"
    if is_hf_path(path):
        return "hf"
    if not p.exists():
        raise FileNotFoundError(f"no data at {p}")
    if p.is_file():
        return "list"
    found = find_cifar(p)
    return found[0] if found else "folder"


def _hf_splits(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    """A saved DatasetDict gives train = data.split (default "train") and test = data.test_split (default
    "test", else "validation", else none: then a holdout); a single Dataset or Parquet gives train = data.path
    and test = data.test_path."""
    kw = {"channels": cfg.channels, "max_pixels": cfg.pixel_limit, "image_column": cfg.image_column or None,
          "label_column": cfg.label_column or None, "cache_dir": cfg.hf_cache or None}
    names = splits_of(path)
    if names:
        train = HFImageDataset(path, split=cfg.split or "train", **kw)
        test_split = cfg.test_split or next((s for s in ("test", "validation") if s in names), None)
        test = HFImageDataset(path, classes=train.classes, split=test_split, **kw) if test_split else None
        return train, test
    train = HFImageDataset(path, **kw)
    test_path = cfg.test_path
    return train, (HFImageDataset(test_path, classes=train.classes, **kw) if test_path else None)


def _carved(train: Dataset, fraction: float) -> tuple[Subset, Subset]:
    """A source without a test split: a stratified holdout, marked `carved` (so `vitkit eval` knows the source
    itself has no test split and scores all of it unless a split is asked for)."""
    kept, held = holdout(train, fraction)
    kept.carved = held.carved = True
    return kept, held


#: an opener: (the [data] section, data.path) -> (train, test), test None where the source has no test split
Opener = Callable[[DataConfig, str], tuple[Dataset, Dataset | None]]
#: data.name -> (opener, needs data.path)
SOURCES: dict[str, tuple[Opener, bool]] = {}


def register_source(name: str, needs_path: bool = False) -> Callable[[Opener], Opener]:
    """Register `opener` as the data source `name` (a value of `data.name` / `--data`)."""
    def add(opener: Opener) -> Opener:
        if name in SOURCES:
            raise ValueError(f"data source {name!r} is registered twice")
        SOURCES[name] = (opener, needs_path)
        return opener
    return add


@register_source("digits")
def _digits(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    return load_digits_split()


@register_source("lfw")
def _lfw(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    return holdout(load_lfw_subset(), 0.25)


@register_source("glyphs")
def _glyphs(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    n, k, size, seed = cfg.glyph_images, cfg.glyph_classes, cfg.glyph_size, cfg.glyph_seed
    test = glyph_test_size(n, cfg.glyph_test_images)
    if cfg.glyph_stream:  # the test split: one held object per process (every run reads it in full)
        return GlyphStream(n, k, size, seed, "train"), glyph_test_stream(test, k, size, seed)
    return glyphs(n, k, size, seed, "train"), glyphs(test, k, size, seed, "test")


@register_source("glyph_words")
def _glyph_words(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    """Words of 1-4 glyphs at their own aspect ratios (glyphs.GlyphWords): data.glyph_classes words,
    data.glyph_images training images, data.glyph_size px a letter."""
    n, k, size, seed = cfg.glyph_images, cfg.glyph_classes, cfg.glyph_size, cfg.glyph_seed
    return glyph_words(n, k, size, seed, "train"), glyph_words(glyph_test_size(n, cfg.glyph_test_images), k, size,
                                                               seed, "test")


def _cifar(kind: str, cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    return load_cifar(path, kind)


for _kind in ("cifar10", "cifar100"):
    register_source(_kind, needs_path=True)(functools.partial(_cifar, _kind))


@register_source("folder", needs_path=True)
def _folder(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    return image_folder(path, cfg.channels, cfg.pixel_limit)


@register_source("list", needs_path=True)
def _list(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    train = list_file(path, cfg.channels, max_pixels=cfg.pixel_limit)
    test = list_file(cfg.test_path, cfg.channels, train.classes, cfg.pixel_limit) if cfg.test_path else None
    return train, test


@register_source("shards", needs_path=True)
def _shards(cfg: DataConfig, path: str) -> tuple[Dataset, Dataset | None]:
    """data.path / test_path are patterns (dir/train-{0..9}.tar), or a folder of `vitkit data pack` output (its
    train-*.tar and test-*.tar)."""
    path, packed_test = split_patterns(path)
    test_path = cfg.test_path or packed_test or ""
    train = ShardDataset(path, cfg.channels, max_pixels=cfg.pixel_limit)
    return train, (ShardDataset(test_path, cfg.channels, train.classes, cfg.pixel_limit) if test_path else None)


register_source("hf", needs_path=True)(_hf_splits)


def open_splits(cfg: DataConfig) -> dict[str, Dataset]:
    """{"train", "test", and "dev" when data.dev_fraction > 0} for a [data] section (see DataConfig's keys): the
    source's own test split, else a stratified holdout of data.holdout; data.subset trains on a random subset of
    that many training images (the paper's Fig. 4; subsets of one seed nest); files over data.max_pixels are
    skipped as unreadable (0 = $VITKIT_MAX_IMAGE_PIXELS or Pillow's limit)."""
    if not isinstance(cfg, DataConfig):
        raise TypeError(f"open_splits takes a DataConfig, got {type(cfg).__name__}")
    name, path = cfg.name, cfg.path
    max_image_pixels(cfg.pixel_limit)  # a bad $VITKIT_MAX_IMAGE_PIXELS fails here, once
    if name == "auto":
        if not path:
            raise ValueError("data.path is not set: point at an image folder, a CIFAR folder or a list file")
        name = detect_kind(path)
    if name not in SOURCES:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATA_NAMES)}")
    if SOURCES[name][1] and not path:
        raise ValueError(f"data.name is {name!r} but data.path is not set (e.g. --set data.path=/data/{name})")
    opener, _ = SOURCES[name]
    train, test = opener(cfg, path)
    if test is None:  # a source without its own test split: a stratified holdout of data.holdout
        train, test = _carved(train, cfg.holdout)
    out: dict[str, Dataset] = {"train": train, "test": test}
    subset = cfg.subset
    if subset:
        if subset > len(train):
            raise ValueError(f"data.subset is {subset} but the training split has only {len(train)} images")
        order = np.random.default_rng(cfg.subset_seed).permutation(len(train))
        train = out["train"] = Subset(train, np.sort(order[:subset]))  # the dev split below is carved from it
    frac = cfg.dev_fraction
    if frac > 0:
        out["train"], out["dev"] = holdout(train, frac)
    return out
