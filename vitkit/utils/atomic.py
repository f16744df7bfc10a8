"""Atomic file writes: write to a temporary name in the same folder, fsync, then rename.

The file gets the mode a plain `open(path, "w")` would give under the user's umask (not mkstemp's
0600). A failed write (disk full, read-only folder) raises an OSError that names the target file.
Temporary files left by a killed process are named `.NAME.XXXX.tmp` (folders too, for a checkpoint folder being
replaced); `clean_stale_temps` removes them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_failure(target: Path, e: BaseException) -> OSError:
    """An OSError naming `target` for a failed write (torch reports a full disk as a RuntimeError)."""
    code = e.errno if isinstance(e, OSError) and e.errno else errno.EIO
    reason = (e.strerror if isinstance(e, OSError) and e.strerror else " ".join(str(e).split())[:200]) or type(e).__name__
    hint = "" if code in (errno.EACCES, errno.EPERM) else "; is the disk full or the folder read-only?"
    err = OSError(code, f"could not write the file ({reason}){hint}")
    err.filename = str(target)
    return err


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it is fsynced and renamed onto `path`.

    A crash at any point leaves either the old file or the new one, never a torn file.
    """
    target = Path(path)
    if target.is_dir():  # named before anything is written (the rename would name the temporary file instead)
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
            os.chmod(tmp_path, 0o666 & ~_umask())
            with open(tmp_path, "rb+") as f:
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise _write_failure(target, e) from e
        except Exception as e:  # noqa: BLE001 - libraries report a failed write in their own types
            text = str(e)
            markers = ("inline_container", "PytorchStreamWriter", "write failed", "No space left", "Disk quota",
                       "basic_ios::clear", "unexpected pos")
            if type(e).__name__ == "SafetensorError" or any(m in text for m in markers):
                raise _write_failure(target, e) from e
            raise
        os.replace(tmp_path, target)
        _fsync_dir(target.parent)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def clean_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files `atomic_path` leaves in `folder` when a process is killed mid-write.

    Call it only where no other process is writing to `folder` (at the start of a run)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in folder.glob(f".*{TEMP_SUFFIX}"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
        elif p.is_dir() and not p.is_symlink():  # a checkpoint folder being replaced (formats.replace_folder)
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: str | os.PathLike[str], writer: Callable[[Path], None]) -> None:
    """Atomically create `path` with `writer(tmp_path)`, for libraries that write by file name."""
    with atomic_path(path) as tmp:
        writer(tmp)


@contextlib.contextmanager
def staged_files(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield `path`'s name inside a new hidden folder beside it (`.NAME.XXXX.tmp/NAME`) for a writer that makes
    several files by one name (an ONNX graph and its external weights, OpenVINO's `.xml` and `.bin`, a `.pt2` and
    its sidecar). On success every file written there is renamed into `path`'s folder — `path` itself last, the
    file a reader opens — so a killed or failed export leaves the earlier files in place, never a torn or empty one
    (torch's exporter and OpenVINO's writer open their output truncating). The hidden folder is removed either way
    (`clean_stale_temps` removes one left by a kill)."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent))
    try:
        try:
            yield stage / target.name
        except OSError as e:
            raise _write_failure(target, e) from e
        files = sorted((f for f in stage.iterdir() if f.is_file()), key=lambda f: (f.name == target.name, f.name))
        if not any(f.name == target.name for f in files):
            raise RuntimeError(f"{target}: the writer made no such file (wrote {[f.name for f in files]})")
        mask = _umask()
        for f in files:
            with open(f, "rb+") as fh:
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(f, 0o666 & ~mask)
            os.replace(f, target.parent / f.name)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
