"""One crafted input that used to hang vitkit or exhaust its memory, read in this process (run by
benchmarks/crash_safety.py under a time limit):

    python benchmarks/bounded_input.py SCRATCH_FOLDER CASE

Prints one JSON line: the case, whether it was refused (and the message), the seconds it took and the process's
peak resident memory (ru_maxrss, MB).
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import sys
import tarfile
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np

CASES = ("cifar_billion_laughs", "cifar_deep_nesting", "tar_pax_header_1MB", "list_dev_zero", "list_fifo",
         "label_300M", "png_16bit_13000px", "npz_zip_bomb_16GB", "config_json_nested_200k", "depth_10000",
         "randaugment_1e6", "glyph_images_1e9", "crop_pct_1e-4", "threads_100000")
SETS = {"depth_10000": "model.depth=10000", "randaugment_1e6": "data.randaugment=[1000000, 10]",
        "glyph_images_1e9": "data.glyph_images=1000000000", "crop_pct_1e-4": "data.crop_pct=0.0001"}


def _png_header(path: Path, side: int, depth: int) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", side, side, depth, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def run_case(root: Path, case: str) -> None:  # noqa: C901 - one branch per crafted input
    if case == "cifar_billion_laughs":
        from vitkit.data.cifar import safe_unpickle

        b = bytearray(b"\x80\x02]q\x00")
        for i in range(60):
            b += b"(h" + bytes([i]) + b"h" + bytes([i]) + b"lq" + bytes([i + 1]) + b"0"
        (root / "l").write_bytes(bytes(b) + b"}(C\x04datah" + bytes([60]) + b"u.")
        safe_unpickle(root / "l")
    elif case == "cifar_deep_nesting":
        from vitkit.data.cifar import safe_unpickle

        (root / "d").write_bytes(b"\x80\x02}(C\x04data" + b"(" * 500_000 + b"l" * 500_000 + b"u.")
        safe_unpickle(root / "d")
    elif case == "tar_pax_header_1MB":
        from vitkit.data.shards import ShardDataset

        with tarfile.open(root / "p.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo("a.cls")
            info.pax_headers = {"comment": "1 x=" * 250_000}
            info.size = 1
            tar.addfile(info, io.BytesIO(b"0"))
        ShardDataset(str(root / "p.tar"))
    elif case in ("list_dev_zero", "list_fifo"):
        from vitkit.data.folders import list_file

        target = "/dev/zero"
        if case == "list_fifo":
            os.mkfifo(root / "f.png")
            target = str(root / "f.png")
        (root / "l.txt").write_text(f"{target} 0\n")
        list_file(root / "l.txt", 1).get(0)
    elif case == "label_300M":
        from vitkit.data.folders import list_file

        (root / "l.txt").write_text("a.png 0\na.png 300000000\n")
        list_file(root / "l.txt", 1)
    elif case == "png_16bit_13000px":
        from vitkit.data.preprocess import read_image

        read_image(_png_header(root / "p.png", 13_000, 16), 3)
    elif case == "npz_zip_bomb_16GB":
        from vitkit.formats.npz import check_npz_sizes

        with zipfile.ZipFile(root / "b.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
            h = io.BytesIO()
            np.lib.format.write_array_header_1_0(h, {"descr": "<f4", "fortran_order": False, "shape": (4 << 30,)})
            with z.open("embedding/kernel.npy", "w", force_zip64=True) as f:
                f.write(h.getvalue())
                f.write(b"\0" * (32 << 20))
        check_npz_sizes(root / "b.npz")
    elif case == "config_json_nested_200k":
        import vitkit

        (root / "m").mkdir()
        (root / "m" / "config.json").write_text("[" * 200_000 + "]" * 200_000)
        (root / "m" / "model.safetensors").write_bytes(b"")
        vitkit.load_pretrained(root / "m")
    else:
        from vitkit.cli import main

        args = ["train", "--config", "digits_pretrain", "--out", str(root / "r")]
        args += ["--set", SETS[case]] if case in SETS else ["--threads", "100000", "--dry-run", "1"]
        if main(args) == 2:
            raise ValueError("refused (exit 2, one line)")


def main() -> int:
    root, case = Path(sys.argv[1]), sys.argv[2]
    t0 = time.perf_counter()
    try:
        run_case(root, case)
        outcome = "accepted"
    except (ValueError, FloatingPointError) as e:
        outcome = "refused: " + " ".join(str(e).split())[:160]
    print(json.dumps({"case": case, "outcome": outcome, "seconds": round(time.perf_counter() - t0, 3),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
