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
import os
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.data.base import class_names
from vitkit.data.preprocess import max_file_bytes, max_image_pixels, read_image
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import read_json

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".gif")
CLASSES_FILE = "classes.json"
MANIFEST_FILE = "manifest.json"  # written last by `vitkit data pack`: its absence marks an interrupted pack
_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_DIGITS = re.compile(r"[0-9]{1,12}")
MAX_LABEL_BYTES = 4096  # a .cls / .json label member
MAX_TAR_META_BYTES = 16 << 10  # a PAX / GNU long-name header


def is_shard_pattern(path: str) -> bool:
    """Whether `path` holds a shard range such as `{000000..000009}` (not merely a `..` of a parent folder)."""
    return _BRACE.search(path) is not None


MAX_SHARDS = 1 << 20


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
        if int(hi) - int(lo) >= MAX_SHARDS:  # checked before a path is built (10^8 of them would take gigabytes)
            raise ValueError(f"shard pattern {pattern!r}: {int(hi) - int(lo) + 1:,} shards, over the limit of "
                             f"{MAX_SHARDS:,} (ImageNet-21k packs into ~1,500); a typo in the range?")
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
    else is the training shards alone. A pack folder must hold its manifest (written last): one without it is
    an interrupted pack and is refused, and shards that differ from the manifest are refused by name."""
    p = Path(path)
    if p.is_dir() and any(p.glob("train-*.tar")):
        if (p / CLASSES_FILE).is_file():  # written by `vitkit data pack`, so it must be complete
            check_manifest(p)
        return str(p / "train-*.tar"), (str(p / "test-*.tar") if any(p.glob("test-*.tar")) else None)
    return path, None


def check_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a pack folder, checked against the shards there (names and byte sizes)."""
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise ValueError(f"{folder}: no {MANIFEST_FILE}, so its `vitkit data pack` did not finish (killed or failed "
                         "mid-pack); pack it again (--overwrite), or name the shards by pattern to read them anyway")
    try:
        doc = read_json(path, "pack manifest")
        listed = {str(k): int(v) for k, v in doc["shards"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a pack manifest ({type(e).__name__}: {e})") from e
    present = {f.name: f.stat().st_size for f in folder.glob("*.tar")}
    for name, size in listed.items():
        if name not in present:
            raise ValueError(f"{folder}: shard {name} of {MANIFEST_FILE} is missing")
        if present[name] != size:
            raise ValueError(f"{folder / name}: {present[name]:,} bytes, the manifest says {size:,} (cut short or "
                             "changed since it was packed)")
    extra = sorted(set(present) - set(listed))
    if extra:
        raise ValueError(f"{folder}: shards not in {MANIFEST_FILE}: {', '.join(extra[:5])}")
    return doc


def _split_key(name: str) -> tuple[str, str]:
    """`dir/n0144_0001.jpg` -> ("dir/n0144_0001", ".jpg"): WebDataset's key is the name up to the first dot of
    the base name."""
    head, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{head}/{stem}" if head else stem), (dot + ext).lower()


def _identity(f: Any) -> tuple[int, ...]:
    """What tells one shard file from another at the same path (a re-pack writes a new file and renames it over)."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class ShardDataset:
    """The samples of one or more tar shards as a data set (the interface of vitkit.data.base)."""

    def __init__(self, pattern: str, channels: int = 3, classes: list[str] | None = None,
                 max_pixels: int | None = None) -> None:
        self.shards = expand_pattern(pattern)
        self.channels, self.max_pixels = channels, max_pixels
        entries: list[tuple[int, int, int, str]] = []  # (shard, offset, size, member name)
        identities: list[tuple[int, ...]] = []  # each shard file as indexed (`_identity`)
        labels: list[int] = []
        max_image = max_file_bytes(max_image_pixels(max_pixels))
        for si, shard in enumerate(self.shards):
            samples: dict[str, dict[str, Any]] = {}
            check_tar_headers(shard)  # before tarfile parses anything: bounded headers, no sparse, not cut short
            try:
                with open(shard, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:  # read by offset later
                    identities.append(_identity(fh))
                    for info in tar:
                        if not info.isfile():
                            continue
                        if info.issparse():
                            raise ValueError(f"{shard}:{info.name}: a sparse member; shards hold plain files")
                        key, ext = _split_key(info.name)
                        rec = samples.setdefault(key, {})
                        if ext in IMAGE_EXTS:
                            if info.size > max_image:
                                raise ValueError(f"{shard}:{info.name}: {info.size:,} bytes is over the image file "
                                                 f"limit of {max_image:,} (raise the pixel limit to admit it)")
                            rec["image"] = (info.offset_data, info.size, info.name)
                        elif ext in (".cls", ".json"):
                            if info.size > MAX_LABEL_BYTES:
                                raise ValueError(f"{shard}:{info.name}: a label of {info.size:,} bytes (at most "
                                                 f"{MAX_LABEL_BYTES:,})")
                            rec[ext] = tar.extractfile(info).read(MAX_LABEL_BYTES)
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
        self.entries, self.labels, self.identities = entries, np.asarray(labels, dtype=np.int64), identities
        names = classes if classes is not None else _read_classes(self.shards[0].parent)
        self.named = names is not None  # else an assumption, stated (never silent)
        self.classes = class_names(names, self.labels, str(self.shards[0].parent / CLASSES_FILE),
                                   f"no {CLASSES_FILE} beside {self.shards[0]}")
        self._files: dict[int, Any] = {}

    @staticmethod
    def _label(rec: dict[str, Any], shard: Path, key: str) -> int:
        """The class index of a sample: `.cls` holds plain decimal digits; `.json` an integer "label" (not 1.9,
        not true, not -100: an ignore index would silently drop the sample from the loss)."""
        if ".cls" in rec:
            text = rec[".cls"].decode("ascii", errors="replace").strip()
            if not _DIGITS.fullmatch(text):
                raise ValueError(f"{shard}:{key}.cls: the label {text[:40]!r} is not a class index (0, 1, ...)")
            return int(text)
        if ".json" in rec:
            try:
                label = json.loads(rec[".json"])["label"]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{shard}:{key}.json: no readable \"label\" ({type(e).__name__}: {e})") from e
            if not isinstance(label, int) or isinstance(label, bool) or label < 0:
                raise ValueError(f"{shard}:{key}.json: the label {label!r} is not a class index (0, 1, ...)")
            return label
        raise ValueError(f"{shard}:{key}: an image without a label (.cls or .json with \"label\")")

    def __len__(self) -> int:
        return len(self.entries)

    def fingerprint_parts(self) -> list[str]:
        """Each shard's path and size."""
        return [f"{p}:{p.stat().st_size}" for p in self.shards]

    def __getstate__(self) -> dict[str, Any]:  # open files stay in their process (loader workers reopen)
        return {**self.__dict__, "_files": {}}

    def _read(self, i: int) -> bytes:
        si, off, size, _ = self.entries[i]
        f = self._files.get(si)
        if f is None:
            f = open(self.shards[si], "rb")  # noqa: SIM115 - kept open for the next reads
            if _identity(f) != self.identities[si]:  # offsets and labels were read from another file
                f.close()
                raise ValueError(f"{self.shards[si]}: the shard changed since its samples were indexed (re-packed or "
                                 "rewritten while being read); its labels would not match its images: open the data "
                                 "again")
            self._files[si] = f  # an open file keeps reading the file indexed, even if it is replaced later
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


def _tar_number(field: bytes, where: str) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # GNU base-256
        n = int.from_bytes(field[1:], "big")
        return -n if field[:1] == b"\xff" else n
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError as e:
        raise ValueError(f"{where}: a tar header with an unreadable size field {field!r}") from e


def check_tar_headers(shard: Path, max_meta: int = MAX_TAR_META_BYTES) -> None:
    """Walk the 512-byte headers of an uncompressed tar without parsing them with `tarfile`: refuse extended
    headers (PAX, GNU long names) over `max_meta` bytes (Python 3.11's tarfile parses PAX headers in quadratic
    time, CVE-2024-6232), GNU sparse members, a member whose data runs past the end of the file, and a file without
    the end-of-archive block (a shard cut at a member boundary, which `tarfile` reads as shorter without a word)."""
    total = shard.stat().st_size
    with open(shard, "rb") as f:
        off = 0
        while True:
            f.seek(off)
            header = f.read(512)
            if len(header) < 512:
                raise ValueError(f"{shard}: the tar ends without its end-of-archive block after {off:,} bytes (cut "
                                 "short: copied or written incompletely?)")
            if header == b"\0" * 512:
                return
            where = f"{shard} (header at byte {off:,})"
            size = _tar_number(header[124:136], where)
            kind = header[156:157]
            if size < 0:
                raise ValueError(f"{where}: a negative member size")
            if kind in (b"x", b"g", b"L", b"K") and size > max_meta:
                raise ValueError(f"{where}: an extended header of {size:,} bytes (at most {max_meta:,}; real shards "
                                 "need a few hundred)")
            if kind == b"S":
                raise ValueError(f"{where}: a GNU sparse member; shards hold plain files")
            if off + 512 + size > total:
                raise ValueError(f"{where}: a member of {size:,} bytes runs past the end of the file ({total:,} "
                                 "bytes): the shard is cut short")
            off += 512 + (size + 511) // 512 * 512


def _read_classes(folder: Path) -> list[str] | None:
    path = folder / CLASSES_FILE
    if not path.is_file():
        return None
    names = read_json(path, "class list")
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
