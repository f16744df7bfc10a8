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


# the ranges of an image's random values (module docstring): uniform (low, high), or normal (0, std)
UNIFORM = {"angle": (-0.35, 0.35), "scale": (0.8, 1.1), "shift": (-0.08, 0.08), "width": (0.04, 0.075),
           "ink": (0.6, 1.0), "paper": (0.0, 0.25)}
JITTER_STD, NOISE_STD = 0.05, 0.04


def _draw_chunk(protos: tuple[np.ndarray, np.ndarray], n: int, size: int, rng: np.random.Generator,
                out: np.ndarray) -> np.ndarray:
    """The first len(out) of the n images of one random stream (the in-memory set) into `out`; returns all n labels.

    Every random value of the chunk comes from `rng` in one order (labels, jitter, pose, style for all n, then the
    pixel noise image by image), so the images do not depend on how many are drawn or in how many blocks."""
    labels = rng.integers(0, len(protos[0]), size=n)
    jitter = rng.normal(0.0, JITTER_STD, size=(n, 3, 3, 2))
    ang, scale = rng.uniform(*UNIFORM["angle"], n), rng.uniform(*UNIFORM["scale"], n)
    shift = rng.uniform(*UNIFORM["shift"], (n, 2))
    style = [rng.uniform(*UNIFORM[k], (n, 1)) for k in ("width", "ink", "paper")]
    for b in _blocks(len(out), size):
        noise = rng.normal(0.0, NOISE_STD, (b.stop - b.start, size * size))  # the stream's next rows of noise
        out[b] = _render(protos, labels[b], jitter[b], ang[b], scale[b], shift[b], [v[b] for v in style], noise, size)
    return labels


# bytes of one (images, pixels, segments) float32 temporary of `_render`; it holds about six at once
RENDER_BLOCK_BYTES = 32 << 20


def _blocks(n: int, size: int) -> list[slice]:
    """Row blocks of n images of side `size` whose rendering temporaries stay near RENDER_BLOCK_BYTES each
    (at least one image a block): the memory of a draw follows its output, not its image count."""
    per_image = size * size * 3 * (POINTS_PER_STROKE - 1) * 4  # pixels x segments x float32
    rows = max(1, RENDER_BLOCK_BYTES // per_image)
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def _render(protos: tuple[np.ndarray, np.ndarray], labels: np.ndarray, jitter: np.ndarray, ang: np.ndarray,
            scale: np.ndarray, shift: np.ndarray, style: list[np.ndarray], noise: np.ndarray, size: int) -> np.ndarray:
    """Images (n, 1, size, size) uint8 of classes `labels` from their random values: control-point `jitter`
    (n, 3, 3, 2), rotation `ang`, `scale` (n,), `shift` (n, 2), `style` [stroke width, ink, paper] (each (n, 1))
    and pixel `noise` (n, size^2)."""
    pts, present = protos
    n = len(labels)
    p = pts[labels] + jitter  # jittered control points
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
    width, ink, paper = style
    img = paper + (ink - paper) * np.exp(-0.5 * d2 / width**2) + noise
    return np.clip(np.rint(img * 255), 0, 255).astype(np.uint8).reshape(n, 1, size, size)


@lru_cache(maxsize=4)
def _draw(images: int, classes: int, size: int, seed: int, split: str) -> tuple[torch.Tensor, np.ndarray]:
    protos = _prototypes(classes, seed)
    imgs = np.empty((images, 1, size, size), np.uint8)
    labels = []
    for c in range(-(-images // CHUNK)):
        rng = np.random.default_rng([seed, SPLIT_IDS[split], c])
        labels.append(_draw_chunk(protos, CHUNK, size, rng, imgs[c * CHUNK:(c + 1) * CHUNK]))
    return torch.from_numpy(imgs), np.concatenate(labels)[:images]


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


# -- the stream: any number of images, each drawn when it is loaded ----------------------------------------

STREAM_MAX_IMAGES = 100_000_000  # a stream holds its labels and an epoch's order: 16 bytes an image
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijective scramble of uint64 values (Steele et al. 2014)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _counter_uniforms(seed: int, split: str, index: np.ndarray, count: int) -> np.ndarray:
    """(n, count) uniforms in [0, 1): the first `count` values of image `index`'s own counter-based stream, a pure
    function of (seed, split, index, value number) -- so an image does not depend on what else is drawn."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * np.uint64(_GOLDEN) + np.uint64(SPLIT_IDS[split] + 1))
        state = _mix(key ^ (np.asarray(index, dtype=np.uint64) * np.uint64(_GOLDEN)))[:, None]
        z = _mix(state + np.arange(1, count + 1, dtype=np.uint64)[None, :] * np.uint64(_GOLDEN))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _counter_normals(u: np.ndarray) -> np.ndarray:
    """Standard normals from an even number of uniforms per row (Box-Muller)."""
    r = np.sqrt(-2.0 * np.log1p(-u[:, 0::2]))
    return np.concatenate([r * np.cos(2 * np.pi * u[:, 1::2]), r * np.sin(2 * np.pi * u[:, 1::2])], 1)


class GlyphStream:
    """`images` glyphs drawn when they are loaded (`data.glyph_stream`): nothing is held but the labels (and, with
    `hold`, a small set's images once drawn), so the set can be far larger than memory (up to 10^8 images). Image i is a pure function of (seed, split, i) through a
    counter-based random stream, so any subset, batch or worker draws the same pixels; sets of different sizes
    nest. Same prototypes and ranges as `glyphs`, other random values (so other images than the in-memory set)."""

    # the random values of one image, in the order they are numbered in its stream
    _LAYOUT = (("label", 1), ("jitter", 18), ("angle", 1), ("scale", 1), ("shift", 2), ("width", 1), ("ink", 1),
               ("paper", 1))

    def __init__(self, images: int, classes: int = 1000, size: int = 16, seed: int = 0, split: str = "train",
                 hold: bool = False) -> None:
        check_int("glyph images", images, high=STREAM_MAX_IMAGES)
        check_int("glyph classes", classes, low=2)
        check_int("glyph size", size, low=4)
        if split not in SPLIT_IDS:
            raise ValueError(f"glyph split must be train or test, got {split!r}")
        self.size, self.seed, self.split, self.channels = size, seed, split, 1
        self.protos = _prototypes(classes, seed)
        self.classes = [f"glyph{c:04d}" for c in range(classes)]
        self.name = f"glyph-stream/{split}"
        step = 1 << 20  # labels in blocks, to bound the temporaries
        self.labels = np.concatenate([self._labels(np.arange(i, min(i + step, images))) for i in range(0, images, step)]
                                     or [np.empty(0, np.int64)])
        # `hold`: every image drawn at the first draw and kept, where they fit in HELD_BYTES (a set read in full
        # again and again: a test split); the pixels are those of any other draw
        self.hold = hold and images * size * size <= HELD_BYTES
        self._held: np.ndarray | None = None

    def _labels(self, index: np.ndarray) -> np.ndarray:
        u = _counter_uniforms(self.seed, self.split, index, 1)[:, 0]
        return np.minimum((u * len(self.classes)).astype(np.int64), len(self.classes) - 1)

    def __len__(self) -> int:
        return len(self.labels)

    def draw(self, index: np.ndarray) -> np.ndarray:
        """Images `index` as (n, 1, size, size) uint8, drawn together (one vectorised pass)."""
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"{self.name}: index out of range 0..{len(self) - 1}")
        if self.hold:
            if self._held is None:
                self._held = self._draw(np.arange(len(self)))
            return self._held[index]
        return self._draw(index)

    def _draw(self, index: np.ndarray) -> np.ndarray:
        out = np.empty((len(index), 1, self.size, self.size), np.uint8)
        for b in _blocks(len(index), self.size):  # bounded temporaries; every image is its own function
            out[b] = self._draw_block(index[b])
        return out

    def __getstate__(self) -> dict[str, object]:
        """A copy for a loader worker holds what this one holds: nothing yet, then it draws as a plain stream (each
        worker drawing every image would multiply the work)."""
        return {**self.__dict__, "hold": self._held is not None}

    def _draw_block(self, index: np.ndarray) -> np.ndarray:
        n, width = len(index), sum(c for _, c in self._LAYOUT)
        u = _counter_uniforms(self.seed, self.split, index, width + self.size**2 + self.size**2 % 2)
        at, v = 0, {}
        for name, count in self._LAYOUT:
            v[name], at = u[:, at:at + count], at + count
        z = _counter_normals(np.concatenate([v["jitter"], u[:, at:]], 1))
        jitter = JITTER_STD * z[:, :18].reshape(n, 3, 3, 2)
        noise = NOISE_STD * z[:, 18:18 + self.size**2]

        def ranged(name: str, x: np.ndarray) -> np.ndarray:
            lo, hi = UNIFORM[name]
            return lo + (hi - lo) * x

        style = [ranged(k, v[k]) for k in ("width", "ink", "paper")]
        return _render(self.protos, self.labels[index], jitter, ranged("angle", v["angle"][:, 0]),
                       ranged("scale", v["scale"][:, 0]), ranged("shift", v["shift"]), style, noise, self.size)

    def get_many(self, index: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """Images `index` (floats in [0, 1], (n, 1, size, size)) and their labels, drawn in one pass (the loader's
        batched path)."""
        index = np.asarray(index, dtype=np.int64)
        return torch.from_numpy(self.draw(index)).float().div_(255.0), self.labels[index]

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        x, y = self.get_many(np.array([i]))
        return x[0], int(y[0])

    def describe(self, i: int) -> str:
        return f"{self.name}[{i}]"


HELD_BYTES = 16 << 20  # a held stream's images at most (a 10,000-image test split up to 40 px)


@lru_cache(maxsize=4)
def glyph_test_stream(images: int, classes: int = 1000, size: int = 16, seed: int = 0) -> GlyphStream:
    """The test split of a glyph stream, one object per process: every run evaluates it in full at its end, so it is
    drawn once and held where it is small (`GlyphStream(hold=True)`), not drawn again for each run of a sweep."""
    return GlyphStream(images, classes, size, seed, "test", hold=True)


def glyph_test_size(train_images: int, asked: int = 0) -> int:
    """Size of the glyph test split that goes with a training set: `asked` where given (data.glyph_test_images),
    else 10%, between 1,000 and 10,000."""
    return asked or min(10_000, max(1_000, train_images // 10))


# -- words: strips of glyphs at their own aspect ratio (native resolution, NaViT) --------------------------

WORD_ALPHABET = 10  # letters: glyph prototypes of the same seed's first WORD_ALPHABET classes
WORD_MAX_LETTERS = 4  # words of 1..4 letters: images of aspect 1:1 .. 4:1


def _words(classes: int, seed: int) -> list[tuple[int, ...]]:
    """The spelling of each class: class c has 1 + c % WORD_MAX_LETTERS letters drawn from the alphabet, every
    spelling distinct (redrawn until it is)."""
    short = -(-classes // WORD_MAX_LETTERS)  # classes of one letter: at most the alphabet
    if short > WORD_ALPHABET:
        raise ValueError(f"glyph words: {classes} classes need {short} distinct one-letter words, the alphabet has "
                         f"{WORD_ALPHABET}; at most {WORD_ALPHABET * WORD_MAX_LETTERS} classes")
    rng = np.random.default_rng([seed, 54])
    words: list[tuple[int, ...]] = []
    for c in range(classes):
        while (w := tuple(int(v) for v in rng.integers(0, WORD_ALPHABET, 1 + c % WORD_MAX_LETTERS))) in words:
            pass
        words.append(w)
    return words


class GlyphWords:
    """`images` words of glyphs (1 channel, uint8), each `size` px high and `size` px a letter wide: a data set of
    mixed aspect ratios (1:1 to 4:1) in which the aspect ratio carries information (a word's length), for
    native-resolution training (NaViT; issue 54's native vs square-resize comparison).

    Class c is a word of 1 + c % 4 letters from an alphabet of 10 glyph prototypes (`glyphs`' first 10 classes of
    the same seed); an image of class c draws each letter as `glyphs` draws an image (control points jittered, its
    own pose and pixel noise), with one stroke width, ink and paper for the whole word, side by side. Resized to a
    square, a four-letter word's letters are squeezed to a quarter of a one-letter word's width; at its own aspect
    ratio every letter keeps its shape. The set is a pure function of (images, classes, size, seed, split); the test
    split draws from another stream than train (same words)."""

    def __init__(self, images: int, classes: int = 20, size: int = 16, seed: int = 0, split: str = "train") -> None:
        check_int("glyph word images", images)
        check_int("glyph word classes", classes, low=2)
        check_int("glyph size", size, low=4)
        if split not in SPLIT_IDS:
            raise ValueError(f"glyph split must be train or test, got {split!r}")
        self.words = _words(classes, seed)
        self.classes = ["-".join(map(str, w)) for w in self.words]
        self.channels, self.name = 1, f"glyph-words/{split}"
        rng = np.random.default_rng([seed, SPLIT_IDS[split], 54])
        self.labels = rng.integers(0, classes, images)
        letters = np.array([a for y in self.labels for a in self.words[y]], dtype=np.int64)
        owner = np.repeat(np.arange(images), [len(self.words[y]) for y in self.labels])  # the image of each letter
        n = len(letters)
        jitter = rng.normal(0.0, JITTER_STD, size=(n, 3, 3, 2))
        ang, scale = rng.uniform(*UNIFORM["angle"], n), rng.uniform(*UNIFORM["scale"], n)
        shift = rng.uniform(*UNIFORM["shift"], (n, 2))
        style = [rng.uniform(*UNIFORM[k], (images, 1))[owner] for k in ("width", "ink", "paper")]
        drawn = np.empty((n, 1, size, size), np.uint8)
        protos = _prototypes(WORD_ALPHABET, seed)
        for b in _blocks(n, size):
            noise = rng.normal(0.0, NOISE_STD, (b.stop - b.start, size * size))
            drawn[b] = _render(protos, letters[b], jitter[b], ang[b], scale[b], shift[b], [v[b] for v in style],
                               noise, size)
        starts = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=images))])
        self.images = [torch.from_numpy(np.concatenate(list(drawn[starts[i]:starts[i + 1]]), axis=-1))
                       for i in range(images)]

    def __len__(self) -> int:
        return len(self.labels)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        return self.images[i].float() / 255.0, int(self.labels[i])

    def describe(self, i: int) -> str:
        return f"{self.name}[{i}]"


@lru_cache(maxsize=4)
def glyph_words(images: int, classes: int = 20, size: int = 16, seed: int = 0, split: str = "train") -> GlyphWords:
    """`GlyphWords`, drawn once per process for the same arguments (runs on one data set share the draw)."""
    return GlyphWords(images, classes, size, seed, split)

