"""Issue 54 item 5 (b) and (c): what packing images at their own sizes (NaViT, vitkit/models/packing.py) costs and
saves, on the CPU, timed interleaved (medians), random weights, on one set of mixed-aspect images (sizes drawn
once from a fixed seed: aspect ratios 1:4 .. 4:1; each image's cap drawn from [--min-patches, --max-patches], NaViT's
variable resolution, drawn once and shared by every candidate).

(b) training throughput, images/s and real tokens/s of one optimisation step (forward, backward, AdamW):
    "padded": every image alone in a row padded to --max-patches (the mask hides the padding; what batching by
    padding to the longest does); "packed": first-fit rows of --budget patches; "packed+drop": the same with half
    of each image's tokens dropped (NaViT's token dropping).
(c) inference cost of the mask: a square batch (the model's own N-patch images, no mask) against the same number
    of tokens as packed rows (images of the same patch count, --pack-per-row to a row, block-diagonal mask).

    flock /tmp/vitkit_bench.lock python benchmarks/navit_packing.py [--repeats 7] [--threads 1]

One thread: on a shared 2-core machine two threads wait on each other (measured: repeats spread 34-189% at load 16,
within 28% on one thread at the same load).

Writes benchmarks/results/navit_packing.json.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from vitkit.bench.machine import machine_info
from vitkit.bench.timing import time_interleaved, unreliable
from vitkit.data.collate import NativePacker
from vitkit.models import create_model
from vitkit.models.packing import PackedBatch, first_fit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options = {"repeats": 7, "threads": 1, "images": 32, "max-patches": 64, "min-patches": 8, "budget": 256,
               "pack-per-row": 4, "width": 128, "depth": 4}
    for name, default in options.items():
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "navit_packing.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    side = int(math.isqrt(args.max_patches)) * 16
    model = create_model("vit", img_size=side, patch_size=16, width=args.width, depth=args.depth,
                         num_heads=args.width // 64, mlp_dim=4 * args.width, num_classes=100)
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(args.images):
        aspect = 4 ** (2 * float(torch.rand((), generator=g)) - 1)  # 1:4 .. 4:1, log-uniform
        h = int(96 * aspect ** -0.5)
        w = int(96 * aspect ** 0.5)
        samples.append((torch.rand(3, h, w, generator=g), i % 100))
    labels = torch.tensor([y for _, y in samples])
    seed = torch.Generator().manual_seed(1).get_state()

    def gen() -> torch.Generator:  # the same caps for every candidate
        return torch.Generator().set_state(seed)

    full = NativePacker(model.preprocess, 16, args.max_patches, args.budget, args.min_patches)(samples, gen())
    drop = NativePacker(model.preprocess, 16, args.max_patches, args.budget, args.min_patches, 0.5)(samples, gen())
    b = full.batch
    # padding: each image alone in its row of max_patches
    per_image = [b.patches[b.image_ids == i] for i in range(len(samples))]
    coords = [b.coords[b.image_ids == i] for i in range(len(samples))]
    grids = [tuple(t) for t in b.grids.tolist()]
    padded = PackedBatch.from_patches(per_image, coords, grids, [[i] for i in range(len(samples))], args.max_patches)
    batches = {"padded": padded, "packed": b, "packed+drop": drop.batch}
    tokens = {"padded": sum(full.kept), "packed": sum(full.kept), "packed+drop": sum(drop.kept)}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: PackedBatch):  # noqa: ANN202
        def run() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(batch), labels).backward()
            opt.step()

        return run

    model.train()
    train = time_interleaved({k: step(v) for k, v in batches.items()}, repeats=args.repeats)
    result: dict = {"machine": machine_info(), "args": vars(args), "model": f"ViT width {args.width} depth "
                    f"{args.depth} patch 16", "images": len(samples), "training": {}, "inference": {}}
    for k, t in train.items():
        rows, length = batches[k].image_ids.shape
        result["training"][k] = {"rows": rows, "row_patches": length, "real_tokens": tokens[k],
                                 "s_per_step": t.median, "img_per_s": len(samples) / t.median,
                                 "tokens_per_s": tokens[k] / t.median, "unreliable": unreliable(t)}
    # (c) the same tokens as a square batch and as packed rows with the mask
    model.eval()
    n = len(samples) // args.pack_per_row * args.pack_per_row
    square = torch.randn(n, 3, side, side, generator=g)
    ims = list(square)
    rows = first_fit([args.max_patches] * n, args.max_patches * args.pack_per_row)
    packed = model.pack(ims, rows)

    def infer(fn):  # noqa: ANN001, ANN202
        def run() -> None:
            with torch.inference_mode():
                fn()

        return run

    inf = time_interleaved({"square": infer(lambda: model(square)), "packed": infer(lambda: model(packed))},
                           repeats=args.repeats)
    for k, t in inf.items():
        result["inference"][k] = {"images": n, "tokens": n * args.max_patches, "s": t.median,
                                  "img_per_s": n / t.median, "unreliable": unreliable(t)}
    result["inference"]["packed_over_square"] = inf["packed"].median / inf["square"].median
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("training", "inference")}, indent=2))


if __name__ == "__main__":
    main()
