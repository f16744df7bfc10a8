"""WebDataset-style tar shards: `train-{000000..001023}.tar`, each sample `key.jpg` / `.png` (any image) +
`key.cls` (the class index as text) or `key.json` (with a "label" field), written and read with the standard
`tarfile` module.

Reading builds an index of member offsets from the tar headers (no image is decoded or read for it), so the
shards behave as one random-access data set: the step-indexed loader then gives every rank and loader worker
its own part of each global batch, shuffles reproducibly, reads every sample exactly once per epoch and
resumes exactly after a kill, also with another number of processes (the loader's guarantees, unchanged).
Class names come from `classes.json` beside the shards (written by `vitkit data pack`); without it the
classes are the indices and the data set says so. A member that does not decode is skipped and named
(`shard.tar:key.jpg`), as for image folders.
"""

from __future__ import annotations

import glob
import io
import json
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.data.base import class_names
from vitkit.data.preprocess import read_image
from vitkit.utils.atomic import atomic_write_text

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".gif")
CLASSES_FILE = "classes.json"
_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def is_shard_pattern(path: str) -> bool:
    """Whether `path` holds a shard range such as `{000000..000009}` (not merely a `..` of a parent folder)."""
    return _BRACE.search(path) is not None


def expand_pattern(pattern: str) -> list[Path]:
    """`dir/train-{000000..000009}.tar` -> the 10 paths (zero padding kept); `dir/train-*.tar` -> the matching
    files in name order; a plain path is itself; a folder is its *.tar files in name order. Every listed shard
    must exist."""
    p = Path(pattern)
    m = _BRACE.search(pattern)
    if m:
        lo, hi = m.group(1), m.group(2)
        if int(hi) < int(lo):
            raise ValueError(f"shard pattern {pattern!r}: the range {lo}..{hi} is empty")
        width = len(lo)
        paths = [Path(pattern[: m.start()] + str(i).zfill(width) + pattern[m.end() :]) for i in range(int(lo), int(hi) + 1)]
    elif "*" in pattern:
        paths = sorted(Path(x) for x in glob.glob(pattern))
        if not paths:
            raise FileNotFoundError(f"no shards match {pattern!r}")
    elif p.is_dir():
        paths = sorted(p.glob("*.tar"))
        if not paths:
            raise FileNotFoundError(f"no .tar shards in {p}")
    else:
        paths = [p]
    missing = [str(x) for x in paths if not x.is_file()]
    if missing:
        raise FileNotFoundError(f"shard pattern {pattern!r}: {len(missing)} shard(s) missing, e.g. {missing[0]}")
    return paths


def split_patterns(path: str) -> tuple[str, str | None]:
    """(train pattern, test pattern or None) for a `data.path` of shards: a folder written by `vitkit data pack`
    (train-*.tar and test-*.tar side by side) gives both, so the test shards are never trained on; anything
    else is the training shards alone."""
    p = Path(path)
    if p.is_dir() and any(p.glob("train-*.tar")):
        return str(p / "train-*.tar"), (str(p / "test-*.tar") if any(p.glob("test-*.tar")) else None)
    return path, None


def _split_key(name: str) -> tuple[str, str]:
    """`dir/n0144_0001.jpg` -> ("dir/n0144_0001", ".jpg"): WebDataset's key is the name up to the first dot of
    the base name."""
    head, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{head}/{stem}" if head else stem), (dot + ext).lower()


class ShardDataset:
    """The samples of one or more tar shards as a data set (the interface of vitkit.data.base)."""

    def __init__(self, pattern: str, channels: int = 3, classes: list[str] | None = None,
                 max_pixels: int | None = None) -> None:
        self.shards = expand_pattern(pattern)
        self.channels, self.max_pixels = channels, max_pixels
        entries: list[tuple[int, int, int, str]] = []  # (shard, offset, size, member name)
        labels: list[int] = []
        for si, shard in enumerate(self.shards):
            samples: dict[str, dict[str, Any]] = {}
            try:
                with tarfile.open(shard, "r:") as tar:  # uncompressed tar: members can be read by offset
                    for info in tar:
                        if not info.isfile():
                            continue
                        key, ext = _split_key(info.name)
                        rec = samples.setdefault(key, {})
                        if ext in IMAGE_EXTS:
                            rec["image"] = (info.offset_data, info.size, info.name)
                        elif ext in (".cls", ".json"):
                            rec[ext] = tar.extractfile(info).read()  # labels are a few bytes
            except tarfile.TarError as e:
                raise ValueError(f"{shard}: not a readable tar shard ({e})") from e
            for key, rec in samples.items():
                if "image" not in rec:
                    continue
                labels.append(self._label(rec, shard, key))
                off, size, name = rec["image"]
                entries.append((si, off, size, name))
        if not entries:
            raise ValueError(f"no image samples in the shards of {pattern!r}")
        self.entries, self.labels = entries, np.asarray(labels, dtype=np.int64)
        names = classes if classes is not None else _read_classes(self.shards[0].parent)
        self.named = names is not None  # else an assumption, stated (never silent)
        self.classes = class_names(names, self.labels, str(self.shards[0].parent / CLASSES_FILE),
                                   f"no {CLASSES_FILE} beside {self.shards[0]}")
        self._files: dict[int, Any] = {}

    @staticmethod
    def _label(rec: dict[str, Any], shard: Path, key: str) -> int:
        try:
            if ".cls" in rec:
                return int(rec[".cls"].decode().strip())
            if ".json" in rec:
                return int(json.loads(rec[".json"])["label"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{shard}:{key}: the label is not a class index ({e})") from e
        raise ValueError(f"{shard}:{key}: an image without a label (.cls or .json with \"label\")")

    def __len__(self) -> int:
        return len(self.entries)

    def __getstate__(self) -> dict[str, Any]:  # open files stay in their process (loader workers reopen)
        return {**self.__dict__, "_files": {}}

    def _read(self, i: int) -> bytes:
        si, off, size, _ = self.entries[i]
        f = self._files.get(si)
        if f is None:
            f = self._files[si] = open(self.shards[si], "rb")  # noqa: SIM115 - kept open for the next reads
        f.seek(off)
        return f.read(size)

    def get(self, i: int, min_size: tuple[int, int] | None = None) -> tuple[torch.Tensor, int]:
        img = read_image(io.BytesIO(self._read(i)), self.channels, min_size, self.max_pixels, name=self.describe(i))
        return img, int(self.labels[i])

    def describe(self, i: int) -> str:
        si, _, _, name = self.entries[i]
        return f"{self.shards[si]}:{name}"

    def raw(self, i: int) -> tuple[bytes, str]:
        """The member's bytes as stored, and its extension."""
        return self._read(i), _split_key(self.entries[i][3])[1]


def _read_classes(folder: Path) -> list[str] | None:
    path = folder / CLASSES_FILE
    if not path.is_file():
        return None
    try:
        names = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: expected a JSON list of class names")
    return names


def _encoded(ds: Any, i: int) -> tuple[bytes, str]:
    """The bytes of sample i as stored: an image file's own bytes (its format kept; a data set that keeps encoded
    images says so with `raw(i)`, held-out subsets included), else a lossless PNG."""
    raw = ds.raw(i) if hasattr(ds, "raw") else None
    if raw is not None and raw[1].lower() in IMAGE_EXTS:
        data, ext = raw
        read_image(io.BytesIO(data), ds.channels, name=ds.describe(i))  # an unreadable file is refused here
        return data, ext.lower()
    from PIL import Image

    x, _ = ds.get(i)
    arr = (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    im = Image.fromarray(arr[0] if arr.shape[0] == 1 else arr.transpose(1, 2, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue(), ".png"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # reproducible shards: the same input gives the same bytes
    tar.addfile(info, io.BytesIO(data))


def pack(ds: Any, out: str | Path, prefix: str, shard_size: int, indices: Iterable[int] | None = None,
         skipped: list[str] | None = None) -> list[Path]:
    """Write `ds` as `out/<prefix>-000000.tar, ...` with `shard_size` samples each (key.<ext> + key.cls) and
    `out/classes.json`; returns the shard paths. Unreadable samples are skipped and their names appended to
    `skipped`. `indices` (default: all, in order; wrap them in tqdm for a progress bar) picks the samples.
    Shards are written to a temporary name and renamed when complete."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CLASSES_FILE, json.dumps(list(ds.classes)) + "\n")
    shards: list[Path] = []
    tar, tmp, written = None, None, 0
    for i in indices if indices is not None else range(len(ds)):
        try:
            data, ext = _encoded(ds, i)
        except ValueError as e:
            if skipped is not None:
                skipped.append(str(e))
            continue
        if tar is None:
            path = out / f"{prefix}-{len(shards):06d}.tar"
            tmp = path.with_name(path.name + ".tmp")
            tar = tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115 - closed below
            shards.append(path)
        key = f"{prefix}_{i:09d}"
        _add(tar, key + ext, data)
        _add(tar, key + ".cls", str(int(ds.labels[i])).encode())
        written += 1
        if written % shard_size == 0:
            tar.close()
            tmp.replace(shards[-1])
            tar = None
    if tar is not None:
        tar.close()
        tmp.replace(shards[-1])
    return shards
