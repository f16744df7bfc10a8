"""Reading only what was asked for, and never two writers on one folder.

`read_regular_file` opens a path without blocking (a FIFO or `/dev/zero` named as an image is refused, not read
forever), checks that it is a regular file and that its size is under a cap before reading a byte.
`FolderLock` is an exclusive lock on a folder for the life of a job (a run folder, a pack destination): a
second job on the same folder is refused with the holder's pid. `inside` / `overlapping` tell whether one path
lies in another, so an output can be refused where it would overwrite or delete an input. `scratch_dir` is a
temporary folder that is deleted when the process exits (a script's exported graphs never pile up in /tmp).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from vitkit.utils.atomic import atomic_path

LOCK_NAME = ".vitkit.lock"

# The lock fds this process took (fd -> pid). A flock belongs to the open file, which fork() shares: a forked child
# (a DataLoader worker) would keep a run folder locked after its job was SIGKILLed, until the orphan noticed and
# exited, and a resume would be refused naming a dead pid. A forked child closes its copies at once (closing
# releases nothing while the job still holds the file), so a lock lives exactly as long as the process that took it.
_HELD: dict[int, int] = {}


def _forget_locks_in_child() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _open_regular(path: str | os.PathLike[str], max_bytes: int, what: str) -> int:
    """An fd open on `path` (read-only, never blocking on a FIFO), which is checked to be a regular file of at most
    `max_bytes` before anything is read; a ValueError naming the file otherwise (the fd closed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror or e}") from e
    st = os.fstat(fd)
    problem = ""
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a special file")
        problem = f"it is {kind}, not a regular file"
    elif st.st_size > max_bytes:
        problem = f"{st.st_size:,} bytes is over the limit of {max_bytes:,}"
    if problem:
        os.close(fd)
        raise ValueError(f"cannot read {what} {path}: {problem}")
    return fd


def check_regular_file(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> int:
    """The size of `path`, after the checks of `read_regular_file` (a regular file, at most `max_bytes`), for a
    reader that opens the file itself (safetensors memory-maps it): a FIFO, a device or a `/dev/zero` link is
    refused before that reader can block on it or read it forever."""
    fd = _open_regular(path, max_bytes, what)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> bytes:
    """The bytes of `path`, which must be a regular file of at most `max_bytes`; a ValueError naming the file
    otherwise (a device, a FIFO, a folder, or a file over the cap, which is checked before anything is read)."""
    fd = _open_regular(path, max_bytes, what)
    chunks: list[bytes] = []
    got = 0
    try:  # read what the file holds, in bounded chunks: `read(max_bytes + 1)` would allocate the cap itself (a
        # --max-pixels of 10^15 asked for 8 PB: MemoryError; 2^62 an OverflowError) before reading a byte
        size = os.fstat(fd).st_size
        with os.fdopen(fd, "rb", closefd=False) as f:
            while got <= max_bytes:
                chunk = f.read(min(max(size + 1 - got, 1 << 16), max_bytes + 1 - got))  # a stable file: one read
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
    except OSError as e:  # a file that will not be read (/proc/self/mem: EIO), named like any other unreadable file
        raise ValueError(f"cannot read {what} {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)
    if got > max_bytes:  # grew while being read
        raise ValueError(f"cannot read {what} {path}: more than {max_bytes:,} bytes")
    return b"".join(chunks)


def scratch_dir(prefix: str = "vitkit-") -> Path:
    """A new temporary folder, removed with everything in it when the interpreter exits (normally or by an
    exception; a SIGKILL leaves it). For scripts whose temporary files outlive one function's scope."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def inside(child: str | os.PathLike[str], parent: str | os.PathLike[str]) -> bool:
    """Whether `child` is `parent` or lies under it (both resolved: symlinks and `..` followed)."""
    c, p = Path(child).resolve(), Path(parent).resolve()
    return c == p or p in c.parents


def overlapping(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether one of the two paths is, contains or lies inside the other."""
    return inside(a, b) or inside(b, a)


def _lock_file(path: Path, subject: str) -> int:
    """An open fd holding an exclusive, non-blocking flock on the regular file `path` (created if absent, never
    through a link, never blocking on a FIFO); a second holder gets a `BlockingIOError` naming `subject` and the
    holder's pid. The holder's pid is written into the file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ValueError(f"{path} is not a regular file (a symlink): vitkit's lock file is never written "
                         "through a link; remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path} is not a regular file: vitkit's lock file must be one; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = ""
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise BlockingIOError(errno.EWOULDBLOCK, f"{subject} is in use by another vitkit job (pid {holder or 'unknown'})"
                              "; wait for it to finish or choose another") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[fd] = os.getpid()
    return fd


def _unlock(fd: int | None) -> None:
    """Release and close a lock taken by `_lock_file` (nothing for None, nor in a forked child, which closed its copy
    of the fd at the fork: the number may name another file there); returns None for the holder's field."""
    if fd is not None and _HELD.pop(fd, None) == os.getpid():
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def claim_lock(lock: Path, subject: str) -> int:
    """An exclusive lock on the lock file `lock` for one destination (`.NAME.lock` beside it), held until
    `release_lock`, which removes the file: a second claimant gets a `BlockingIOError` naming `subject` and the
    holder's pid."""
    while True:  # the lock file may be removed by its last holder between our open and our flock: retry
        fd = _lock_file(lock, subject)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        _HELD.pop(fd, None)
        os.close(fd)


def release_lock(lock: Path, fd: int | None) -> None:
    """Remove and release a lock taken by `claim_lock` (nothing for None, nor in a forked child: the lock is its
    parent's); returns None for the holder's field."""
    if fd is not None and _HELD.get(fd) == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # while still held: a newcomer's open of the old inode is retried
    return _unlock(fd)


class FolderLock:
    """An exclusive advisory lock (flock) on `folder/.vitkit.lock`, held until `release()` or process exit.

    A second holder is refused with a `BlockingIOError` naming the folder and the holder's pid. The lock file
    stays behind (an empty lock is harmless); the kernel drops the lock when its process dies, even by SIGKILL."""

    def __init__(self, folder: str | os.PathLike[str], what: str = "folder") -> None:
        self.folder, self.what = Path(folder), what
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = _lock_file(self.path, f"{what} {self.folder}")

    def release(self) -> None:
        self._fd = _unlock(self._fd)

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class OutputFile:
    """The one rule for a file a command writes for the user (`--output`, `--json`, an export): claimed before any
    work, written whole or not at all.

    - consent: an existing file is refused unless `overwrite` (the message names the file and the flag);
    - one writer per destination: an exclusive lock on `.NAME.lock` beside it, held from the claim to `release()`,
      so a second job writing the same file is refused with the first one's pid (two `--overwrite` runs never
      silently replace each other's result); the lock file is removed on release;
    - the old file stays until the new one is complete (`atomic_path`: temporary name, fsync, rename), so a failed
      or killed job leaves the old file, never a torn or empty one.
    """

    def __init__(self, path: str | os.PathLike[str], overwrite: bool = False, flag: str = "--output") -> None:
        self.path, self.overwrite, self.flag = Path(path), overwrite, flag
        self._check()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = self.path.parent / f".{self.path.name}.lock"
        self._fd: int | None = claim_lock(self.lock, f"{flag} {self.path}")
        self._check()  # created by someone else between the first check and the lock

    def _check(self) -> None:
        if self.path.is_dir():
            raise IsADirectoryError(errno.EISDIR, f"{self.flag} {self.path} is a folder; name a file", str(self.path))
        if (self.path.exists() or self.path.is_symlink()) and not self.overwrite:
            raise FileExistsError(f"{self.flag} {self.path} exists; remove it, name another file or pass --overwrite")

    def replacing(self) -> contextlib.AbstractContextManager[Path]:
        """A context yielding a temporary path beside the file; on success it replaces the file atomically."""
        if self._fd is None:
            raise RuntimeError(f"{self.path}: the claim on this output was released; claim it again")
        return atomic_path(self.path)

    def release(self) -> None:
        self._fd = release_lock(self.lock, self._fd)

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


MAX_JSON_BYTES = 64 << 20
MAX_TEXT_BYTES = 1 << 30  # a list file of ImageNet's 1.28M training images is ~80 MB


def read_text_file(path: str | os.PathLike[str], what: str = "text file", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes` (a recipe, a list file); a ValueError naming the
    file when it is not one, or not UTF-8 text (a binary file, a UTF-16 one), instead of a bare codec error."""
    data = read_regular_file(path, max_bytes, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        hint = " (it looks like UTF-16: save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ValueError(f"{path}: the {what} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start}"
                         f"{hint}") from None


def read_json(path: str | os.PathLike[str], what: str = "JSON file", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON document from a regular file of at most `max_bytes`; a ValueError naming the file when it is not
    readable JSON, including one nested too deep to parse (never a RecursionError from deep inside json)."""
    return parse_json(read_regular_file(path, max_bytes, what), path, what)


def parse_json(data: str | bytes, where: str | os.PathLike[str], what: str = "JSON document") -> Any:
    """JSON text as a document, or a ValueError naming `where` (a file, or a file's metadata key) when it is not
    readable JSON, including one nested too deep to parse (never a RecursionError from deep inside json)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{where}: cannot read the {what} (nested too deep to be a config)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read the {what} ({e})") from e


def claim_output(target: str | os.PathLike[str] | OutputFile, overwrite: bool = False, flag: str = "--output"
                 ) -> contextlib.AbstractContextManager[OutputFile]:
    """A context holding the claim on `target`: a new `OutputFile` released at the end, or the caller's own claim
    (an `OutputFile` made before the work began), left to the caller."""
    return contextlib.nullcontext(target) if isinstance(target, OutputFile) else OutputFile(target, overwrite, flag)
