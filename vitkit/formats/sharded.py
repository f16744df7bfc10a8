"""Weights in transformers' safetensors layout, one file or sharded: written and read for the folder formats.

A model above `max_shard_size` (transformers' default, 50GB; an int of bytes or "5GB" / "500MB" / "2GiB") is
written as shards `model-00001-of-0000N.safetensors` beside `model.safetensors.index.json` ({"metadata":
{"total_size": bytes, "total_parameters": n}, "weight_map": {tensor: shard}}), tensors kept whole and in order, a
new shard begun when the next tensor would pass the size (one larger than it gets a shard of its own), as
huggingface_hub's `split_torch_state_dict_into_shards` does. Every ViT published above that size (ViT-H, DINOv2-g,
SigLIP-so400m) ships so. Sharded saves are read back shard by shard (safetensors memory-mapped), every tensor
checked against the shard the index names. Callers write into a folder that then replaces the old one as a whole
(formats.replace_folder), so a reader never sees shards of two saves.

The fingerprint of a folder vitkit writes: every safetensors file of one save carries the save's random id in its
header metadata, and config.json records that id and the files (`FINGERPRINT_KEY`: cheap, only the headers are
read). A reader that finds config.json beside weights of another save (a folder replaced while it was read, files
copied from two saves) refuses, naming both files (`check_fingerprint`); a folder without the record (written by
transformers or timm), or weights without a save id (saved again by another tool), is read as it is.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from pathlib import Path

import torch
from safetensors.torch import save_file

from vitkit.formats.common import read_tensors
from vitkit.utils.atomic import atomic_write_text, atomic_write_with
from vitkit.utils.files import read_json

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = WEIGHTS_NAME + ".index.json"
DEFAULT_MAX_SHARD_SIZE = "50GB"  # transformers 5's save_pretrained default
FINGERPRINT_KEY = "vitkit_weights"  # config.json: {"save_id": the save's id, "files": its weights files}
SAVE_ID_KEY = "vitkit_save_id"  # safetensors metadata: the save the file belongs to
MAX_HEADER_BYTES = 100 << 20  # safetensors' own bound on a header
SHARD_PATTERN = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 1 << 10, "MIB": 1 << 20,
          "GIB": 1 << 30, "TIB": 1 << 40}


def parse_size(size: int | str) -> int:
    """Bytes of a `max_shard_size`: an int, or a number with a unit as transformers writes it ("5GB", "2GiB")."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B|B)\s*", str(size).upper()) if isinstance(size, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"max_shard_size={size!r}: give a number of bytes or a size such as '5GB', '500MB', '2GiB'")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def shard(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """`tensors` in groups of at most `max_bytes` (a tensor larger than that alone), in order."""
    groups: list[dict[str, torch.Tensor]] = []
    size = 0
    for k, t in tensors.items():
        n = t.numel() * t.element_size()
        if not groups or (size + n > max_bytes and groups[-1]):
            groups.append({})
            size = 0
        groups[-1][k] = t
        size += n
    return groups


def write_weights(folder: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str],
                  max_shard_size: int | str | None = None) -> list[Path]:
    """Write `tensors` into `folder` as `model.safetensors`, or as shards and their index above `max_shard_size`;
    each file atomically. Returns the files written (the index last)."""
    limit = parse_size(max_shard_size if max_shard_size is not None else DEFAULT_MAX_SHARD_SIZE)
    metadata = {**metadata, SAVE_ID_KEY: uuid.uuid4().hex}  # one id per save, in every file's header
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if total <= limit:
        atomic_write_with(folder / WEIGHTS_NAME, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
        return [folder / WEIGHTS_NAME]
    groups = shard(tensors, limit)
    written, weight_map = [], {}
    for i, group in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        atomic_write_with(folder / name, lambda tmp, g=group: save_file(g, str(tmp), metadata=metadata))
        weight_map.update(dict.fromkeys(group, name))
        written.append(folder / name)
    index = {"metadata": {"total_size": total, "total_parameters": sum(t.numel() for t in tensors.values())},
             "weight_map": weight_map}
    atomic_write_text(folder / INDEX_NAME, json.dumps(index, indent=2) + "\n")
    return [*written, folder / INDEX_NAME]


def shard_files(index: Path) -> dict[str, set[str]]:
    """shard file name -> the tensors the index puts in it; names must be plain files beside the index."""
    doc = read_json(index, "sharded-save index")
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: no 'weight_map' of tensor names to shard files")
    shards: dict[str, set[str]] = {}
    for key, name in weight_map.items():
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{index}: tensor {key!r} is mapped to {name!r}, not a shard file beside the index")
        shards.setdefault(name, set()).add(key)
    return shards


def read_sharded(index: Path) -> dict[str, torch.Tensor]:
    """A sharded save read shard by shard (safetensors memory-mapped): every tensor the index names must be in the
    shard it names, and a shard may hold no other; shards are plain file names beside the index."""
    state: dict[str, torch.Tensor] = {}
    for name, keys in sorted(shard_files(index).items()):
        f = index.parent / name
        if not f.is_file():
            raise ValueError(f"{index}: shard {name} is missing ({len(keys)} tensors, e.g. {sorted(keys)[0]!r})")
        part = read_tensors(f)
        if set(part) != keys:
            odd = sorted(keys - set(part)) or sorted(set(part) - keys)
            raise ValueError(f"{f}: holds other tensors than {index.name} says (e.g. {odd[0]!r})")
        state.update(part)
    return state


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder's weights: `model.safetensors`, or the shards its index names."""
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    if (folder / INDEX_NAME).is_file():
        return [folder / n for n in sorted(shard_files(folder / INDEX_NAME))]
    return []


def read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """(tensors, the file to name in messages) of a folder's `model.safetensors` or sharded save."""
    if (folder / WEIGHTS_NAME).is_file():
        return read_tensors(folder / WEIGHTS_NAME), folder / WEIGHTS_NAME
    return read_sharded(folder / INDEX_NAME), folder / INDEX_NAME


def has_weights(folder: Path) -> bool:
    return (folder / WEIGHTS_NAME).is_file() or (folder / INDEX_NAME).is_file()


def is_weights_file(name: str) -> bool:
    """Whether a file name is one of a folder's safetensors weights (the whole file, a shard or the index)."""
    return name in (WEIGHTS_NAME, INDEX_NAME) or SHARD_PATTERN.fullmatch(name) is not None



def save_id(path: Path) -> str | None:
    """The vitkit save id in a safetensors file's header metadata (None: not written by vitkit), read with a bound;
    a damaged header is named."""
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= MAX_HEADER_BYTES:
            raise ValueError(f"{path}: not a readable safetensors file (header length {n})")
        body = f.read(n)
    try:
        meta = json.loads(body).get("__metadata__") or {}
    except (ValueError, UnicodeDecodeError, RecursionError, AttributeError):
        raise ValueError(f"{path}: not a readable safetensors file (damaged header)") from None
    found = meta.get(SAVE_ID_KEY) if isinstance(meta, dict) else None
    return found if isinstance(found, str) else None


def fingerprint(files: list[Path]) -> dict[str, object]:
    """config.json's record of the safetensors files `files` of one save (written by `write_weights`)."""
    names = [f.name for f in files if f.name.endswith(".safetensors")]
    return {"save_id": save_id(files[0].parent / names[0]), "files": names}


def check_fingerprint(folder: Path, doc: dict[str, object], config: str = "config.json") -> None:
    """Refuse a folder whose config.json and vitkit-written weights come from two saves (see the module docstring).
    Nothing to check when config.json records none, or for weights without a vitkit save id (saved again by
    transformers, which keeps config.json's unknown keys: the record is then stale, not a mix)."""
    record = doc.get(FINGERPRINT_KEY)
    if record is None:
        return
    ok = isinstance(record, dict) and isinstance(record.get("save_id"), str) and isinstance(record.get("files"), list)
    if not ok or not all(isinstance(n, str) and Path(n).name == n for n in record["files"]):  # type: ignore[index]
        raise ValueError(f"{folder / config}: {FINGERPRINT_KEY} is {record!r}, expected {{'save_id': id, 'files': "
                         "[weights files]}")
    want = record["save_id"]  # type: ignore[index]
    try:
        present = [p for p in weight_files(folder) if p.is_file()]
    except ValueError:
        present = []
    ids = {f: save_id(f) for f in present}  # each header read once
    for f, got in ids.items():
        if got is not None and got != want:
            raise ValueError(f"{folder / config} and {f} do not belong together: they are from two saves (save "
                             f"{str(want)[:12]} and {got[:12]}: files of two folders mixed, or the folder replaced "
                             "while it was read); load it again, or write it again")
    if any(got is not None for got in ids.values()) and sorted(p.name for p in present) != sorted(record["files"]):
        raise ValueError(f"{folder / config} records the weights files {record['files']}, but {folder} holds "  # type: ignore[index]
                         f"{sorted(p.name for p in present)}: the config and the weights are not from one save; load "
                         "it again, or write it again")
