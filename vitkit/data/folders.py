"""Image folders (`root/class_x/*.jpg`, optionally under `train/` and `val/`) and list files (`path label`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from vitkit.data.base import FileDataset, class_names
from vitkit.utils.files import inside, read_text_file

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}


def _scan(root: Path, channels: int, classes: list[str] | None = None, max_pixels: int | None = None) -> FileDataset:
    dirs = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not dirs:
        raise ValueError(f"{root}: no class folders (expected {root}/<class>/<image files>)")
    if classes is None:
        classes = dirs
    elif set(dirs) - set(classes):
        raise ValueError(f"{root}: class folders {sorted(set(dirs) - set(classes))} are not among the training classes")
    paths, labels = [], []
    for c in dirs:
        if (root / c).is_symlink():
            check_inside(root / c, root)
        for f in sorted((root / c).rglob("*")):
            if f.suffix.lower() in IMAGE_EXTENSIONS and f.is_file():
                if f.is_symlink():
                    check_inside(f, root)
                paths.append(str(f))
                labels.append(classes.index(c))
    if not paths:
        raise ValueError(f"{root}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) in the class folders")
    present = set(labels)
    empty = [c for c in dirs if classes.index(c) not in present]
    if empty:
        warnings.warn(f"{root}: class folder(s) {', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''} hold no "
                      "image files: those classes have no examples here", UserWarning, stacklevel=3)
    return FileDataset(paths, labels, classes, channels, max_pixels)


def check_inside(link: Path, root: Path) -> None:
    """A symlink in a data folder must point inside it: one that leaves it would read files nobody asked for."""
    if not inside(link, root):
        raise ValueError(f"{link} is a symlink to {link.resolve()}, outside the data folder {root}: vitkit reads only "
                         "files inside the folder it is given; copy the data in, or point at the real folder")


def image_folder(
    root: str | Path, channels: int = 3, max_pixels: int | None = None
) -> tuple[FileDataset, FileDataset | None]:
    """(train, test): `root/train` + `root/val` (or `root/test`) when present, else (`root`, None)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no image folder at {root}")
    if (root / "train").is_dir():
        train = _scan(root / "train", channels, max_pixels=max_pixels)
        for name in ("val", "test"):
            if (root / name).is_dir():
                return train, _scan(root / name, channels, train.classes, max_pixels)
        return train, None
    return _scan(root, channels, max_pixels=max_pixels), None


def list_file(
    path: str | Path, channels: int = 3, classes: list[str] | None = None, max_pixels: int | None = None
) -> FileDataset:
    """A text file of `path label` lines (label: an integer or a class name; relative paths are
    relative to the list file; blank lines and `#` comments are ignored)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no list file at {path}")
    rows: list[tuple[str, str]] = []
    for n, line in enumerate(read_text_file(path, "list file").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2:
            raise ValueError(f"{path}:{n}: expected 'path label', got {line!r}")
        f = Path(parts[0])
        rows.append((str(f if f.is_absolute() else path.parent / f), parts[1]))
    if not rows:
        raise ValueError(f"{path}: no 'path label' lines")
    names = [r[1] for r in rows]
    if classes is None:
        if all(s.lstrip("-").isdigit() for s in names):
            try:
                ints = np.array([int(s) for s in names], dtype=np.int64)
            except OverflowError as e:
                raise ValueError(f"{path}: a label is too large to be a class index ({e})") from e
            classes = class_names(None, ints, str(path), f"{path} gives class indices, not names")
        else:
            classes = sorted(set(names))
    index = {c: i for i, c in enumerate(classes)}
    labels = []
    for f, s in rows:
        if s not in index:
            raise ValueError(f"{path}: label {s!r} of {f} is not a known class ({len(classes)} classes)")
        labels.append(index[s])
    return FileDataset([r[0] for r in rows], labels, classes, channels, max_pixels)
