"""CIFAR-10 / CIFAR-100 in their published python-pickle batch format (cifar-10-batches-py, cifar-100-python).

The batches are pickles, and a pickle can run code. They are read by `SafeUnpickler`, which admits
only what the published files hold (dicts, lists, bytes/str, numbers and plain NumPy arrays) and
refuses anything else with a message naming the file; a folder is taken for CIFAR only when every
batch file is there and the first one is, by its content, a CIFAR batch (not by its name alone).
"""

from __future__ import annotations

import pickle
import pickletools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.data.base import ArrayDataset

_LAYOUT = {  # kind: (train files, test files, meta file, label key, names key)
    "cifar10": ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "batches.meta", b"labels", b"label_names"),
    "cifar100": (["train"], ["test"], "meta", b"fine_labels", b"fine_label_names"),
}
_SUBDIRS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}

# The only globals a CIFAR batch refers to: NumPy's array reconstruction (NumPy 1 and 2 module names,
# pickle protocols 2-5) and, for bytes pickled by Python 3 at protocol 2, `_codecs.encode`.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds only containers, strings, numbers and NumPy arrays; anything else
    (a class, a function, `os.system`, ...) is refused before it is looked up."""

    def __init__(self, f: Any, source: Path) -> None:
        super().__init__(f, encoding="bytes")
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(
                f"{self.source}: refusing to unpickle {module}.{name}: a CIFAR batch holds only arrays, "
                "lists, strings and numbers (this file could run code)"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"{self.source}: refusing a persistent reference in a CIFAR batch")


MAX_DEPTH = 8  # a CIFAR batch is a dict of lists: depth 2
MAX_NODES = 10_000_000  # CIFAR-100's train batch holds ~150k values


def _check_plain(obj: Any, source: Path, max_nodes: int = MAX_NODES) -> None:
    """Refuse object arrays (and anything else that is not plain data) anywhere in the loaded tree, walked without
    recursion and within bounds: at most `max_nodes` values, MAX_DEPTH levels, and no container met twice (a
    "billion laughs" pickle shares one list many times over, so a few KB would unfold into 2^60 values)."""
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
    nodes = 0
    while stack:
        x, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise ValueError(f"{source}: more than {max_nodes:,} values in a CIFAR batch")
        if isinstance(x, np.ndarray):
            if x.dtype.hasobject:
                raise ValueError(f"{source}: an array of Python objects (dtype {x.dtype}) is not CIFAR data")
        elif isinstance(x, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"{source}: containers nested over {MAX_DEPTH} deep; a CIFAR batch is a dict of lists")
            if id(x) in seen:
                raise ValueError(f"{source}: one container referenced twice (a self-expanding pickle?); a CIFAR batch "
                                 "holds plain lists")
            seen.add(id(x))
            items = [v for kv in x.items() for v in kv] if isinstance(x, dict) else x
            stack.extend((v, depth + 1) for v in items)
        elif not isinstance(x, (bytes, str, int, float, bool, np.generic, type(None))):
            raise ValueError(f"{source}: unexpected {type(x).__name__} in a CIFAR batch")


def safe_unpickle(path: Path) -> dict:
    """A CIFAR batch file as a dict, read by `SafeUnpickler`; ValueError naming the file otherwise."""
    try:
        with open(path, "rb") as f:
            obj = SafeUnpickler(f, path).load()
    except pickle.UnpicklingError as e:
        msg = str(e)
        raise ValueError(msg if str(path) in msg else f"{path}: not a readable CIFAR batch file: {msg}") from e
    except (OSError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise ValueError(f"{path}: not a readable CIFAR batch file: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: a CIFAR batch is a dict, this file holds a {type(obj).__name__}")
    _check_plain(obj, path)
    return obj


def _has_keys(path: Path, want: set[bytes], max_ops: int = 200_000) -> bool:
    """Whether a pickle file names all of `want` as strings, read opcode by opcode without executing
    anything (a CIFAR batch: a dict whose keys include `data` and the label key)."""
    found: set[bytes] = set()
    try:
        with open(path, "rb") as f:
            if f.read(1) != b"\x80":  # every CIFAR batch starts with a protocol >= 2 header
                return False
            f.seek(0)
            for i, (_op, arg, _pos) in enumerate(pickletools.genops(f)):
                if isinstance(arg, (bytes, str)) and len(arg) < 32:
                    found.add(arg.encode("latin-1") if isinstance(arg, str) else arg)
                    if want <= found:
                        return True
                if i >= max_ops:
                    break
    except Exception:  # noqa: BLE001 - not a well-formed pickle: not a CIFAR batch
        return False
    return False


def find_cifar(root: str | Path, kind: str | None = None) -> tuple[str, Path] | None:
    """(kind, folder) of the CIFAR batches at `root` or in its standard sub-folder, else None.

    A folder counts as CIFAR when all its batch files are regular files and the first one is a pickle
    whose first entries name CIFAR's keys (`data` and the label key): a stray file named `train` or
    `data_batch_1` does not change how a folder is read."""
    root = Path(root)
    for k in [kind] if kind else list(_LAYOUT):
        train_files, test_files, _, label_key, _ = _LAYOUT[k]
        for d in (root, root / _SUBDIRS[k]):
            if not all((d / f).is_file() for f in train_files + test_files):
                continue
            if _has_keys(d / train_files[0], {b"data", label_key}):
                return k, d
    return None


def _read(files: list[Path], label_key: bytes) -> tuple[torch.Tensor, np.ndarray]:
    xs, ys = [], []
    for f in files:
        d = safe_unpickle(f)
        if b"data" not in d or label_key not in d:
            raise ValueError(f"{f}: missing 'data' or {label_key.decode()!r} in the CIFAR batch")
        data = np.asarray(d[b"data"])
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"{f}: 'data' is {data.dtype} {data.shape}, expected uint8 (N, 3072)")
        labels = np.asarray(d[label_key])
        if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"{f}: {len(labels)} labels of type {labels.dtype} for {len(data)} images")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(labels.astype(np.int64))
    return torch.from_numpy(np.concatenate(xs)), np.concatenate(ys)


def load_cifar(root: str | Path, kind: str = "cifar10") -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) from a folder holding the python batches (nothing is downloaded)."""
    if kind not in _LAYOUT:
        raise ValueError(f"unknown CIFAR kind {kind!r}; choose cifar10 or cifar100")
    found = find_cifar(root, kind)
    train_files, test_files, meta, label_key, names_key = _LAYOUT[kind]
    if found is None:
        d = next((c for c in (Path(root), Path(root) / _SUBDIRS[kind]) if (c / train_files[0]).is_file()), None)
        missing = [] if d is None else [f for f in train_files + test_files if not (d / f).is_file()]
        if d is not None and not missing:  # all files there, but the first is not a CIFAR batch
            safe_unpickle(d / train_files[0])  # raises with what is wrong
            raise ValueError(f"{d / train_files[0]}: not a CIFAR batch (no 'data' / {label_key.decode()!r} keys)")
        if missing:
            raise FileNotFoundError(f"{d}: missing CIFAR batch files {missing}")
        want = train_files[0]
        raise FileNotFoundError(f"{root}: no {kind} python batches (expected {want} there or in {_SUBDIRS[kind]}/)")
    _, d = found
    n_classes = 10 if kind == "cifar10" else 100
    classes = [str(i) for i in range(n_classes)]
    if (d / meta).is_file():
        names = safe_unpickle(d / meta).get(names_key)
        if names:
            if len(names) != n_classes:
                raise ValueError(f"{d / meta}: {len(names)} class names, {kind} has {n_classes}")
            classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    xtr, ytr = _read([d / f for f in train_files], label_key)
    xte, yte = _read([d / f for f in test_files], label_key)
    for y, what in ((ytr, "train"), (yte, "test")):
        if len(y) and (y.min() < 0 or y.max() >= n_classes):
            raise ValueError(f"{d}: {kind} {what} labels range over {y.min()}..{y.max()}, expected 0..{n_classes - 1}")
    return ArrayDataset(xtr, ytr, classes, f"{kind}/train"), ArrayDataset(xte, yte, classes, f"{kind}/test")
