"""JPEG decoders for the input pipeline, side by side in one process: vitkit's `read_image` with its simplejpeg
fast path and with Pillow alone (the fast path switched off), and the bare decoders (Pillow, simplejpeg: both
libjpeg-turbo), on ImageNet-sized photos (500x375, quality 90) and on large ones (2000x1500, decoded for a 224
crop: reduced-size decoding, which `read_image` leaves to Pillow). PyTurboJPEG is not timed: it needs the system's libturbojpeg, which a pip
install does not bring. Writes benchmarks/results/jpeg_decoders.json.

    python benchmarks/jpeg_decoders.py [--images 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from vitkit.bench.machine import machine_info
from vitkit.bench.timing import time_interleaved
from vitkit.data import preprocess
from vitkit.data.preprocess import read_image


def photos(n: int, size: tuple[int, int]) -> list[bytes]:
    """`n` JPEGs (quality 90) of scikit-image's photos, resized to `size` (w, h) and shifted so each differs."""
    from skimage import data

    srcs = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    out = []
    for i in range(n):
        im = Image.fromarray(srcs[i % len(srcs)]).resize((size[0] + i % 7, size[1] + i % 5))
        buf = io.BytesIO()
        im.crop((0, 0, *size)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default="benchmarks/results/jpeg_decoders.json")
    args = p.parse_args()
    import simplejpeg

    rows = []
    for size, min_size in (((500, 375), (224, 224)), ((2000, 1500), (224, 224))):
        files = photos(args.images, size)

        def vitkit_fast(files=files, min_size=min_size) -> None:  # the loader's own path: decode to [0, 1] floats
            for f in files:
                read_image(io.BytesIO(f), 3, min_size)

        def vitkit_pillow(files=files, min_size=min_size) -> None:  # the same with the simplejpeg path off
            fast = preprocess._simplejpeg
            preprocess._simplejpeg = lambda: None
            try:
                for f in files:
                    read_image(io.BytesIO(f), 3, min_size)
            finally:
                preprocess._simplejpeg = fast

        def pil_uint8(files=files) -> None:  # Pillow's decode alone (full size), to uint8
            for f in files:
                np.asarray(Image.open(io.BytesIO(f)).convert("RGB"))

        def simple_uint8(files=files) -> None:
            for f in files:
                simplejpeg.decode_jpeg(f, colorspace="RGB")

        def simple_reduced(files=files, min_size=min_size) -> None:  # DCT-domain downscale, as Pillow's draft
            for f in files:
                simplejpeg.decode_jpeg(f, colorspace="RGB", min_height=min_size[0], min_width=min_size[1])

        def simple_float(files=files, min_size=min_size) -> None:  # what vitkit would do with it: to [0, 1]
            for f in files:
                a = simplejpeg.decode_jpeg(f, colorspace="RGB", min_height=min_size[0], min_width=min_size[1])
                np.ascontiguousarray(a.transpose(2, 0, 1), dtype=np.float32) / 255.0

        fns = {"read_image, Pillow only": vitkit_pillow, "read_image (simplejpeg where it applies)": vitkit_fast,
               "pillow decode, uint8": pil_uint8,
               "simplejpeg decode, uint8": simple_uint8, "simplejpeg reduced, uint8": simple_reduced,
               "simplejpeg reduced, float (as read_image)": simple_float}
        t = time_interleaved(fns, warmup=1, repeats=args.repeats)
        base = t["read_image, Pillow only"].median
        for name, tm in t.items():
            rate = len(files) / tm.median
            rows.append({"size": list(size), "decoder": name, "img_per_s": rate, "spread": tm.spread,
                         "vs_read_image_pillow": base / tm.median})
            print(f"{size[0]}x{size[1]}  {name:42s} {rate:8.1f} img/s  ({base / tm.median:.2f}x, "
                  f"spread {100 * tm.spread:.0f}%)")
    doc = {"machine": machine_info(), "images": args.images, "rows": rows, "simplejpeg": simplejpeg.__version__}
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
