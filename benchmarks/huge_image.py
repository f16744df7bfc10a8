"""Peak memory and time of decoding one huge photo for a 224-px model: full decode vs vitkit's reduced decode.

    .venv/bin/python benchmarks/huge_image.py [--side 12000x9000]

Each measurement runs in a fresh process (peak RSS from the kernel), on a JPEG and a PNG of the given size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAKE = """
import sys
import numpy as np
from PIL import Image
w, h = int(sys.argv[1]), int(sys.argv[2])
x = np.arange(w, dtype=np.uint16)[None, :]
y = np.arange(h, dtype=np.uint16)[:, None]
arr = np.empty((h, w, 3), np.uint8)
arr[..., 0], arr[..., 1], arr[..., 2] = (x // 7) % 256, (y // 5) % 256, ((x + y) // 11) % 256
Image.fromarray(arr).save(sys.argv[3], quality=90)
Image.fromarray(arr).save(sys.argv[4], compress_level=1)
"""
CHILD = """
import resource, sys, time
from vitkit.data.preprocess import read_image
from vitkit.models.preprocess import PreprocessConfig
pp = PreprocessConfig(img_size=(224, 224))
t = time.perf_counter()
x = read_image(sys.argv[1], 3, None if sys.argv[2] == "full" else pp.decode_size(), max_pixels=10**9)
y = pp.resize(x[None])
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, tuple(x.shape))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", default="12000x9000")
    args = ap.parse_args()
    w, h = (int(v) for v in args.side.split("x"))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        paths = {"jpeg": Path(d) / "big.jpg", "png": Path(d) / "big.png"}
        # made in another process: Linux keeps a process's peak RSS across fork + exec, so this one stays small
        subprocess.run([sys.executable, "-c", MAKE, str(w), str(h), str(paths["jpeg"]), str(paths["png"])], check=True)
        for fmt, p in paths.items():
            for mode in ("full", "reduced"):
                out = subprocess.run([sys.executable, "-c", CHILD, str(p), mode], capture_output=True, text=True,
                                     check=True).stdout.split(maxsplit=2)
                rows.append({"format": fmt, "decode": mode, "seconds": float(out[0]), "peak_rss_mib": float(out[1]),
                             "decoded_shape": out[2].strip()})
                print(rows[-1], flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "pixels": w * h, "size": f"{w}x{h}", "rows": rows}
    (Path(__file__).parent / "results" / "huge_image.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
