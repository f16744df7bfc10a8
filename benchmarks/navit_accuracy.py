"""Issue 54 item 5 (a): accuracy at equal training compute, native resolution (each image at its own aspect ratio,
packed; NaViT) against square resize (the paper's ViT: every image squashed to the model's square input), seed by
seed, on glyph words (vitkit.data.glyphs.GlyphWords: words of 1-4 glyphs, aspect 1:1 .. 4:1; the word's length is
its aspect ratio, and a square resize squeezes a long word's letters).

Both arms are `vitkit.train.run_experiment` on the digits_demo recipe with the same model (a ViT of --width,
--depth, patch 8 on 32 px: 16 patches a square image), the same data, optimiser, schedule shape and seed; the
square arm resizes every image to 32x32 (no crop), the native arm keeps each image's aspect ratio under
--max-patches (default 16, the square image's count) and packs images into rows of --budget patches.

Equal compute is equal image tokens (patches) processed in training: the square arm sees 16 patches an image; the
native arm's images have fewer on average (an image of aspect 3:1 fits 2x6 = 12 of the 16), so the native arm runs
steps * 16 / mean-native-patches steps (rounded) of the same batch: the same expected number of patch tokens (the
class token, one an image, and the packed rows' padding, which the mask hides, are not counted). `--match steps`
gives both arms the same steps instead (the native arm then sees fewer real tokens; with first-fit rows of
--budget patches its padded rows hold about as many slots as the square batch). Test accuracy is
taken at the end, each arm evaluated as it trained (square images / packed native ones).

    nice -n 5 python benchmarks/navit_accuracy.py --seeds 0 1 2 3 4 [--steps 600] [--threads 1]

Writes benchmarks/results/navit_accuracy_<steps>steps.json (or --json): per-seed test top-1 of both arms, the paired difference (native -
square) with its 95% t-interval (vitkit.reproduce.stats.paired) and the verdict: "helps" (interval above 0),
"hurts" (below 0), "no difference" (it contains 0); the load average before and after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from vitkit.bench.machine import machine_info
from vitkit.data.glyphs import GlyphWords, glyph_words
from vitkit.models.packing import native_grid
from vitkit.reproduce.stats import paired
from vitkit.train.config import load_config
from vitkit.train.run import run_experiment
from vitkit.utils.files import scratch_dir

PATCH, SIDE = 8, 32


def mean_native_patches(ds: GlyphWords, max_patches: int) -> float:
    """The mean patch count of the training images at native resolution under `max_patches` (no token dropped)."""
    return float(np.mean([np.prod(native_grid(*ds.images[i].shape[-2:], PATCH, max_patches)) for i in range(len(ds))]))


def verdict(lo: float, hi: float) -> str:
    return "helps" if lo > 0 else "hurts" if hi < 0 else "no difference"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ints = {"steps": 600, "batch": 64, "images": 4000, "classes": 20, "letter": 16, "width": 64, "depth": 4,
            "max-patches": SIDE * SIDE // PATCH**2, "budget": 64, "threads": 1}
    for name, default in ints.items():
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--match", choices=("tokens", "steps"), default="tokens",
                    help="equal compute as equal real patch tokens (default), or as equal steps of the same batch "
                    "(equal packed slots when the padding fills the difference)")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/navit_accuracy_<steps>steps.json")
    args = ap.parse_args(argv)
    if args.json is None:
        args.json = str(Path(__file__).parent / "results" / f"navit_accuracy_{args.steps}steps.json")
    torch.set_num_threads(args.threads)
    square_patches = (SIDE // PATCH) ** 2
    common = ["data.name=glyph_words", f"data.glyph_images={args.images}", f"data.glyph_classes={args.classes}",
              f"data.glyph_size={args.letter}", "data.augment=none", "data.flip=false", "data.crop_pct=0",
              "data.num_workers=0", "data.dev_fraction=0", f"model.img_size={SIDE}", f"model.patch_size={PATCH}",
              f"model.width={args.width}", f"model.depth={args.depth}", f"model.num_heads={max(1, args.width // 32)}",
              f"model.mlp_dim={2 * args.width}", f"train.batch_size={args.batch}", "train.eval_every=0",
              "train.ckpt_every=0", "train.tensorboard=false", f"train.log_every={max(1, args.steps // 4)}"]
    train = glyph_words(args.images, args.classes, args.letter, 0, "train")  # the run's own training split (seed 0)
    m = mean_native_patches(train, args.max_patches)
    steps = {"square": args.steps, "native": round(args.steps * square_patches / m) if args.match == "tokens"
             else args.steps}
    arms = {"square": [], "native": [f"data.max_patches={args.max_patches}", f"data.pack_budget={args.budget}"]}
    runs = scratch_dir("vitkit-navit-acc-")
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_info(),
                    "match": args.match,
                    "python": platform.python_version(), "args": vars(args),
                    "data": f"GlyphWords({args.images}, {args.classes} classes, {args.letter} px letters); test "
                            f"split of the same words, other images",
                    "tokens": {"square_patches_per_image": square_patches, "native_mean_patches_per_image": m,
                               "steps": steps,
                               "square_patch_tokens": steps["square"] * args.batch * square_patches,
                               "native_patch_tokens_expected": steps["native"] * args.batch * m},
                    "runs": []}
    top1: dict[str, list[float]] = {"square": [], "native": []}
    for seed in args.seeds:
        for arm, extra in arms.items():
            n = steps[arm]
            over = [*common, *extra, f"schedule.steps={n}", f"schedule.warmup_steps={max(1, n // 10)}",
                    f"train.seed={seed}"]
            load = os.getloadavg()[0]
            res = run_experiment(load_config("digits_demo", over), runs / f"{arm}_{seed}", progress=False,
                                 overwrite=True, save=False, curves=False)
            top1[arm].append(res["test"]["top1"])
            result["runs"].append({"arm": arm, "seed": seed, "steps": n, "test_top1": res["test"]["top1"],
                                   "train_s": res["train_s"], "load_before": load, "load_after": os.getloadavg()[0]})
            print(f"seed {seed} {arm}: {n} steps, test top-1 {100 * res['test']['top1']:.2f}% in "
                  f"{res['train_s']:.0f} s (load {load:.1f})", flush=True)
    d = paired(top1["native"], top1["square"])
    result["square_top1"], result["native_top1"] = top1["square"], top1["native"]
    result["native_minus_square"] = d.to_dict()
    result["verdict"] = verdict(d.lo, d.hi) if d.n >= 2 else "too few seeds for an interval"
    print(f"native - square: {d.text(signed=True)} points -> {result['verdict']}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
