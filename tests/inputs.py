"""Crafted inputs for the hardening and trust tests: hostile and odd files (bombs, payloads, shards, headers), tiny
runs (TINY recipe overrides, as values and as --set flags), and the paths of the fixtures timm wrote."""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from vitkit.data.digits import load_digits_split

TINY = ["model.width=16", "model.depth=1", "model.num_heads=2", "model.mlp_dim=32", "schedule.steps=2",
        "schedule.warmup_steps=1", "train.batch_size=8", "train.tensorboard=false", "data.num_workers=0"]


def digit_folder(root: Path, digits: list[int], n: int = 60) -> Path:
    _, test = load_digits_split()
    for i in range(len(test)):
        d = int(test.labels[i])
        if d in digits and len(list((root / str(d)).glob("*.png"))) < n // len(digits):
            (root / str(d)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.round(test.images[i, 0].numpy() * 255).astype(np.uint8)).save(root / str(d) / f"{i}.png")
    return root


def top_k_percent(out: str, k: int) -> float | None:
    m = re.search(rf"top-{k}: (\d+\.\d\d)%", out)
    return float(m.group(1)) if m else None


class Payload:
    """Unpickling this writes the marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def png_file(path: Path, value: int = 128, size=(12, 12), mode: str = "L") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def bomb_png(path: Path, side: int = 40_000) -> Path:
    """A valid PNG header announcing side x side 8-bit pixels (1.6 gigapixels), with a few bytes of data."""
    return png_header_only(path, side, 8)


TINY_LOGGED = [*TINY, "schedule.steps=3", "train.log_every=1"]  # three steps, each logged


def run_cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vitkit", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kw)


def run_main(*args: str) -> subprocess.CompletedProcess:
    """`vitkit ARGS` through `vitkit.cli.main` in this process (no interpreter start-up), read as `run_cli`'s result:
    the exit code and what went to stdout / stderr, warnings and logged warnings included as the command line prints
    them (a process without logging handlers prints WARNING records' messages to stderr: logging.lastResort);
    argparse's exit (SystemExit) read as the process's exit code."""
    import contextlib
    import logging
    import warnings

    from vitkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    logged = logging.StreamHandler(err)
    logged.setLevel(logging.WARNING)
    logging.getLogger().addHandler(logged)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("default")
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's mistakes: its message is on stderr, the exit code the process's
                code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        logging.getLogger().removeHandler(logged)
    return subprocess.CompletedProcess(["vitkit", *args], code, out.getvalue(), err.getvalue())


def assert_one_line_error(r: subprocess.CompletedProcess, *must: str) -> None:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-1500:]
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, r.stderr[-1500:]
    for m in must:
        assert m in errors[0], (m, errors[0])


TINY_FLAGS = [flag for item in TINY for flag in ("--set", item)]  # TINY as command-line flags


def noise_folder(root: Path, n: int = 12, classes: int = 3) -> Path:
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / f"c{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (10, 10), dtype=np.uint8)).save(d / f"{i:03d}.png")
    return root


def file_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def pickle_bytes(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def pax_bomb(path: Path, size: int) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("a.cls")
        info.pax_headers = {"comment": "x" * size}
        info.size = 1
        tar.addfile(info, io.BytesIO(b"0"))
    return path


def shard_file(path: Path, members: dict[str, bytes], end: bool = True) -> Path:
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT)
    for name, data in members.items():
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()  # before close(): no end-of-archive blocks yet
    tar.close()
    path.write_bytes(buf.getvalue() if end else raw)
    return path


def png_bytes(value: int = 100) -> bytes:
    b = io.BytesIO()
    Image.new("L", (8, 8), value).save(b, format="PNG")
    return b.getvalue()


def png_header_only(path: Path, side: int, bit_depth: int) -> Path:
    """A valid PNG header announcing side x side grey pixels of `bit_depth` bits, with a few bytes of data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", side, side, bit_depth, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


PHOTOS = ("wide.jpg", "large.png", "small.png", "grey.png", "rgba.png", "rotated.jpg")  # photo_files', in its order


def photo_files(root: Path) -> list[Path]:
    """Non-square, large, small, grey, RGBA and EXIF-rotated files made from scikit-image's photos (`PHOTOS`; the
    session's shared copy, read only: the `photos` fixture of tests/suite_fixtures.py)."""
    skd = pytest.importorskip("skimage.data")
    root.mkdir()
    coffee, chelsea, astro = skd.coffee(), skd.chelsea(), skd.astronaut()
    files = []
    f = root / "wide.jpg"
    Image.fromarray(coffee).save(f, quality=92)  # 600 x 400
    files.append(f)
    f = root / "large.png"  # 2048 x 2048: far larger than the model, where reduced decoding could act
    Image.fromarray(astro).resize((2048, 2048), Image.BICUBIC).save(f)
    files.append(f)
    f = root / "small.png"
    Image.fromarray(chelsea).resize((20, 13), Image.BILINEAR).save(f)
    files.append(f)
    f = root / "grey.png"
    Image.fromarray(chelsea).convert("L").save(f)
    files.append(f)
    rgba = Image.fromarray(chelsea).convert("RGBA")
    alpha = np.full(rgba.size[::-1], 255, np.uint8)
    alpha[:, : alpha.shape[1] // 2] = 0  # half transparent
    rgba.putalpha(Image.fromarray(alpha))
    f = root / "rgba.png"
    rgba.save(f)
    files.append(f)
    exif = Image.Exif()
    exif[0x0112] = 6
    f = root / "rotated.jpg"
    Image.fromarray(coffee).save(f, exif=exif.tobytes(), quality=92)
    files.append(f)
    assert tuple(f.name for f in files) == PHOTOS, files
    return files


TIMM_FIXTURE = Path(__file__).parent / "fixtures" / "timm_preprocess"  # tests/reference/make_timm_preprocess_reference.py


FAMILIES = Path(__file__).parent / "fixtures" / "timm_families"  # tests/reference/make_timm_family_reference.py


_STATUS = """
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
"""
PEAK_PROBE = "\nimport resource, sys" + _STATUS + """{setup}
_base, _vm = _status("VmRSS:"), _status("VmSize:")
resource.setrlimit(resource.RLIMIT_AS, (_vm + {limit}, resource.RLIM_INFINITY))
{work}
print("PEAK", _status("VmHWM:") - _base)
"""


def peak_memory(setup: str, work: str, limit: int = 2 << 30) -> int:
    """Peak resident bytes that `work` adds, run in a fresh interpreter after `setup` (imports, inputs): its
    address space is capped at `limit` bytes above what setup left, so a blow-up fails fast (MemoryError) instead
    of swapping the machine. The assertion names the failure."""
    code = PEAK_PROBE.format(setup=setup, work=work, limit=limit)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "PEAK" in r.stdout, r.stderr[-1500:]
    return int(r.stdout.split("PEAK")[-1])


FORKED_PEAK_PROBE = "\nimport os, resource, sys" + _STATUS + """{setup}
for _work in {works!r}:
    _pid = os.fork()
    if _pid == 0:
        try:
            with open("/proc/self/clear_refs", "w") as _f:
                _f.write("5")  # this child's VmHWM restarts from its VmRSS
            _base, _vm = _status("VmRSS:"), _status("VmSize:")
            resource.setrlimit(resource.RLIMIT_AS, (_vm + {limit}, resource.RLIM_INFINITY))
            exec(_work)
            print("PEAK", _status("VmHWM:") - _base, flush=True)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    if os.waitpid(_pid, 0)[1] != 0:
        sys.exit(f"the probe failed: {{_work!r}}")
"""


def peak_memories(setup: str, works: Sequence[str], limit: int = 2 << 30, preloaded: Any = None,
                  preload: Sequence[str] = ()) -> list[int]:
    """`peak_memory` of each of `works`, for one interpreter start-up: it runs `setup` once and forks a child per
    work, which starts from setup's state with its peak reset to its resident size (/proc/self/clear_refs). A
    stricter measure than a fresh interpreter's: the pages of setup's that a child touches count as its own (fork
    maps a library's code anew; 8 MiB more for a 16-bit PNG's decode). The assertion names the failure. Given
    `preloaded` (tests/suite_fixtures.py's), setup runs in a process forked from it once `preload` is imported
    (no interpreter start-up: the peaks are measured the same way, from each work's child)."""
    code = FORKED_PEAK_PROBE.format(setup=setup, works=list(works), limit=limit)
    if preloaded is not None:
        r = preloaded.run(code, preload=preload)
    else:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    peaks = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("PEAK ")]
    assert r.returncode == 0 and len(peaks) == len(works), r.stderr[-1500:]
    return peaks
