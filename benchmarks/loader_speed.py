"""Input-pipeline throughput: JPEG decode + Inception crop + flip (+ RandAugment) through the step-indexed loader,
from an image folder and from tar shards, with 0 / 1 / 2 loader workers, beside a ViT's training step on the
same machine (so the bound is visible). Writes benchmarks/results/loader_speed.json.

The images are 512 JPEG crops (256x256, quality 90) of scikit-image's photos, made here (nothing downloaded).

    python benchmarks/loader_speed.py --images 512 --batch 64
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from vitkit.bench.loader import measure_pipeline, train_rate
from vitkit.bench.machine import machine_info
from vitkit.data.folders import image_folder
from vitkit.data.shards import ShardDataset, pack


def make_photos(root: Path, n: int, side: int = 256) -> None:
    from skimage import data

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    rng = np.random.default_rng(0)
    for i in range(n):
        src = photos[i % len(photos)]
        y, x = rng.integers(0, src.shape[0] - side), rng.integers(0, src.shape[1] - side)
        d = root / f"class{i % len(photos)}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(src[y : y + side, x : x + side]).save(d / f"{i:05d}.jpg", quality=90)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json", default="benchmarks/results/loader_speed.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_photos(root / "folder", args.images)
        folder, _ = image_folder(str(root / "folder"), 3)
        pack(folder, root / "shards", "train", shard_size=128)
        shards = ShardDataset(str(root / "shards"), 3)
        steps = args.images // args.batch - 1
        rows = []
        for source, ds in (("image folder", folder), ("tar shards", shards)):
            for r in measure_pipeline(ds, 224, args.batch, workers=(0, 1, 2), steps=steps):
                rows.append({"source": source, **r})
                print(f"{source:12s} RandAugment{tuple(r['randaugment'])} workers {r['workers']}: "
                      f"{r['img_per_s']:7.1f} img/s", flush=True)
        vit = train_rate("vit_ti16", args.batch, num_classes=4, steps=5)
        print(f"ViT-Ti/16 training step at 224 px, batch {args.batch}: {vit:.1f} img/s", flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": machine_info(), "images": args.images, "batch": args.batch,
           "image": "256x256 JPEG q90 -> Inception crop -> 224 px, flip", "rows": rows, "vit_ti16_train_img_per_s": vit}
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
