"""`vitkit data pack`: any source vitkit reads written as tar shards (shards.py), safely.

The destination is locked for the job and may not be, hold or lie inside the source (packing there would delete
or mix in the data being read); old shards are removed only with `overwrite`, after the source has opened; the
manifest (every shard's name and size, the sample counts) is written last, atomically, so a pack killed midway
leaves a folder that readers refuse instead of training on part of the data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from vitkit.data.datasets import DataConfig, open_splits
from vitkit.data.shards import CLASSES_FILE, MANIFEST_FILE, pack
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import FolderLock, inside, overlapping, read_json


def _source_root(src: str) -> Path | None:
    """The file or folder a `data pack` source reads from (None for a named set such as digits)."""
    if src in ("digits", "lfw"):
        return None
    cut = min([i for i in (src.find("{"), src.find("*")) if i >= 0], default=-1)
    return Path(src[:cut]).parent if cut >= 0 else Path(src)


def _own_shards(out: Path) -> list[Path]:
    """The shards a pack wrote in `out`: those its manifest lists, and any named as a pack names them
    (`train-000000.tar`, `test-000003.tar`; a killed pack leaves them without a manifest). Another `.tar` in the
    folder (a user's `backup.tar`) is not a pack's and is never removed."""
    listed: set[str] = set()
    try:
        doc = read_json(out / MANIFEST_FILE, "pack manifest")
        if isinstance(doc, dict) and isinstance(doc.get("shards"), dict):
            listed = {n for n in doc["shards"] if isinstance(n, str) and "/" not in n and n.endswith(".tar")}
    except (OSError, ValueError):
        pass
    return sorted(f for f in out.glob("*.tar") if f.is_file() and not f.is_symlink() and (
        f.name in listed or re.fullmatch(r"(train|test)-\d{6}\.tar", f.name)))


def pack_source(src: str, out: str | Path, shard_size: int, channels: int = 3, overwrite: bool = False,
                progress: bool = True, log: Any = print) -> list[str]:
    """`vitkit data pack`: write the train and test splits of any source vitkit reads as shards in `out`, then
    the manifest (last, atomically). The destination is locked for the job; one that is, contains or lies inside
    the source is refused before anything is touched. Returns the names of the skipped unreadable images."""
    out = Path(out)
    root = _source_root(src)
    if root is not None and root.exists() and (overlapping(out, root) if root.is_dir() else inside(root, out)):
        raise ValueError(f"the destination {out} is, holds or lies inside the source {src}: packing there would "
                         "delete or mix in the data being read; choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(20, "the pack destination is a file", str(out))
    with FolderLock(out, "pack destination"):
        old = _own_shards(out)
        if old and not overwrite:
            raise FileExistsError(f"{out} already holds {len(old)} shard(s); choose another folder or pass --overwrite")
        splits = open_splits(DataConfig.from_flag(src, channels))
        (out / MANIFEST_FILE).unlink(missing_ok=True)  # first: a pack killed from here on leaves no manifest
        for f in old:
            f.unlink()
        skipped: list[str] = []
        written: dict[str, int] = {}
        counts: dict[str, int] = {}
        for split in ("train", "test"):
            ds = splits[split]
            bar = tqdm(range(len(ds)), desc=f"pack {split}", unit="img", disable=not progress)
            before = len(skipped)
            shards = pack(ds, out, split, shard_size, bar, skipped)
            counts[split] = len(ds) - (len(skipped) - before)
            written.update({f.name: f.stat().st_size for f in shards})
            names = f"{shards[0].name}" + (f" .. {shards[-1].name}" if len(shards) > 1 else "") if shards else ""
            log(f"{split}: {counts[split]} samples -> {len(shards)} shard(s) {names}")
        manifest = {"format": "vitkit-shards", "shards": written, "samples": counts,
                    "classes": len(splits["train"].classes), "source": str(src)}
        atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
        log(f"classes: {out / CLASSES_FILE} ({len(splits['train'].classes)} classes)")
    return skipped
