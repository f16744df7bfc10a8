"""Glyph words (vitkit/data/glyphs.py GlyphWords): a mixed-aspect data set whose aspect ratio is a word's length,
drawn reproducibly, opened by data.name = glyph_words."""

from __future__ import annotations

import pytest
import torch

from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.data.glyphs import WORD_MAX_LETTERS, GlyphWords


def test_glyph_words_are_words_of_their_class_at_their_own_aspect() -> None:
    """Each image is size px high and size px a letter wide (aspect 1:1 .. 4:1, the class's word length); spellings
    are distinct; the set is a pure function of its arguments and the test split draws other images."""
    ds = GlyphWords(60, classes=8, size=12, seed=3)
    assert len(set(ds.words)) == 8 and {len(w) for w in ds.words} == set(range(1, WORD_MAX_LETTERS + 1))
    for i in range(len(ds)):
        x, y = ds.get(i)
        assert x.shape == (1, 12, 12 * len(ds.words[y])) and x.dtype == torch.float32 and 0 <= x.min() <= x.max() <= 1
    again = GlyphWords(60, classes=8, size=12, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(ds.images, again.images)) and (ds.labels == again.labels).all()
    test = GlyphWords(60, classes=8, size=12, seed=3, split="test")
    assert test.words == ds.words and not all(torch.equal(a, b) for a, b in zip(ds.images, test.images))
    # letters of one word differ from the letters of another: two images of one class are closer than two classes
    one = [ds.get(i)[0] for i in range(len(ds)) if ds.labels[i] == 0][:2]
    other = next(ds.get(i)[0] for i in range(len(ds)) if len(ds.words[ds.labels[i]]) == 1 and ds.labels[i] != 0)
    assert (one[0] - one[1]).abs().mean() < (one[0] - other).abs().mean()


def test_glyph_words_open_as_a_data_source_and_refuse_too_many_classes() -> None:
    splits = open_splits(DataConfig(name="glyph_words", glyph_images=40, glyph_classes=4, glyph_size=8))
    assert len(splits["train"]) == 40 and splits["test"].classes == splits["train"].classes
    with pytest.raises(ValueError, match="data.glyph_classes = 41: glyph_words has at most 40 classes"):
        DataConfig(name="glyph_words", glyph_classes=41)
    with pytest.raises(ValueError, match="data.glyph_stream draws single glyphs"):
        DataConfig(name="glyph_words", glyph_classes=4, glyph_stream=True)
    with pytest.raises(ValueError, match="41 classes need 11 distinct one-letter words"):
        GlyphWords(4, classes=41)


def test_the_glyph_test_split_has_data_glyph_test_images_the_first_of_the_default_split() -> None:
    """data.glyph_test_images sizes the test split (the smoke reproduction's 250, not 1,000): the first images of the
    default split (a pure function of seed, split and index), held in memory or drawn from a stream; 0 keeps the
    default (a tenth of the training set, at least 1,000)."""
    base = {"name": "glyphs", "glyph_images": 1_200, "glyph_classes": 20, "glyph_size": 8}
    default, small = (open_splits(DataConfig(**base, glyph_test_images=n))["test"] for n in (0, 250))
    assert len(default) == 1_000 and len(small) == 250
    assert torch.equal(small.images, default.images[:250]) and (small.labels == default.labels[:250]).all()
    streamed = open_splits(DataConfig(**base, glyph_stream=True, glyph_test_images=250))["test"]
    whole = open_splits(DataConfig(**base, glyph_stream=True))["test"]
    assert len(streamed) == 250 and len(whole) == 1_000
    assert all(torch.equal(streamed.get(i)[0], whole.get(i)[0]) for i in (0, 137, 249))
    words = open_splits(DataConfig(**{**base, "name": "glyph_words", "glyph_classes": 12}, glyph_test_images=30))
    assert len(words["test"]) == 30
    with pytest.raises(ValueError, match="data.glyph_test_images must be a whole number >= 0, got -1"):
        DataConfig(**base, glyph_test_images=-1)
    with pytest.raises(ValueError, match="data.glyph_test_images = 100,000,000 images of 8x8 px need"):
        DataConfig(**base, glyph_test_images=100_000_000)
