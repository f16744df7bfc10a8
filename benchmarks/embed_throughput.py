"""File -> features throughput: `vitkit embed`'s path (decode, resize + crop, normalise, model) against transformers'
own pipeline (`load_image`, its `AutoImageProcessor`, `Dinov2Model`'s pooler_output) on a stock DINOv2-S/14 hub
folder (518 config, shorter side 256 -> crop 224, bicubic; random weights), the same JPEG files, the same threads,
batch 32, the two interleaved round by round (the order alternating). Also where the time goes: each side's
preprocessing alone (files -> model input) and model alone (the same input tensor). Writes
benchmarks/results/embed_throughput.json.

    flock /tmp/vitkit_bench.lock python benchmarks/embed_throughput.py [--images 96] [--rounds 5] [--threads 2]

Rows: vitkit on torch fp32 (the like-for-like row, and what `vitkit embed` runs by default below AUTO_MIN_IMAGES
images: its blocks on oneDNN's fused matmuls, inference/cpu_fused.py), the same unfused (plain eager torch), on
`--runtime auto` fp32 (what `vitkit embed` runs by default for a job of AUTO_MIN_IMAGES images or more), on torch
bf16 weights (what `--precision auto` picks on a CPU with AVX512_BF16), transformers fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitkit.bench.machine import machine_info

PROCESSOR = {"image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": 256},
             "resample": 3, "do_center_crop": True, "crop_size": {"height": 224, "width": 224}, "do_rescale": True,
             "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.485, 0.456, 0.406],
             "image_std": [0.229, 0.224, 0.225], "do_convert_rgb": True}


def make_files(root: Path, n: int) -> list[str]:
    """`n` camera-like JPEGs (640x480 to 1280x960, some portrait) from scikit-image's photos."""
    from skimage import data as skd

    photos = [skd.coffee(), skd.chelsea(), skd.astronaut(), skd.rocket()]
    rng = np.random.default_rng(0)
    files = []
    for i in range(n):
        w = int(rng.integers(640, 1281))
        h = w * 3 // 4
        size = (w, h) if i % 4 else (h, w)
        f = root / f"{i:04d}.jpg"
        Image.fromarray(photos[i % len(photos)]).resize(size, Image.BICUBIC).save(f, quality=90)
        files.append(str(f))
    return files


def make_folder(root: Path) -> Path:
    import transformers

    cfg = transformers.Dinov2Config(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4,
                                    image_size=518, patch_size=14, layerscale_value=1.0, layer_norm_eps=1e-6)
    torch.manual_seed(0)
    transformers.Dinov2Model(cfg).eval().save_pretrained(root / "dinov2")
    (root / "dinov2" / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    return root / "dinov2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default="benchmarks/results/embed_throughput.json")
    ap.add_argument("--skip", nargs="*", default=[], help="rows to leave out (e.g. vitkit_bf16 vitkit_auto_fp32)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import transformers
    from transformers.image_utils import load_image

    import vitkit
    from vitkit.data.base import FileDataset
    from vitkit.inference.evaluate import eval_loader
    from vitkit.inference.features import FeatureNet, embed_files, prefetched
    from vitkit.inference.runtime import AUTO_MIN_IMAGES, Predictor, build_predictor, inference_model

    torch.set_num_threads(args.threads)
    bs = args.batch_size
    with tempfile.TemporaryDirectory(prefix="vitkit-embed-bench-") as tmp:
        root = Path(tmp)
        (root / "img").mkdir()
        files = make_files(root / "img", args.images)
        folder = make_folder(root)
        model = vitkit.load_pretrained(folder)
        pre = model.preprocess
        preds = {p: build_predictor(FeatureNet(model), p, "torch", threads=args.threads) for p in ("fp32", "bf16")}
        preds["fp32_unfused"] = Predictor(inference_model(FeatureNet(model), "fp32", fused=False), "torch", "fp32",
                                          "torch eager, fp32, unfused")
        # what `vitkit embed` runs by default from AUTO_MIN_IMAGES images on (--runtime auto: the fastest installed
        # CPU runtime for fp32, OpenVINO here; below that many, torch)
        preds["auto"] = None if "vitkit_auto_fp32" in args.skip else build_predictor(FeatureNet(model), "fp32", "auto", threads=args.threads,
                                        n_images=max(len(files), AUTO_MIN_IMAGES), log=print)
        proc = transformers.AutoImageProcessor.from_pretrained(folder)
        hf = transformers.Dinov2Model.from_pretrained(folder).eval()

        def ours(precision: str) -> np.ndarray:
            return embed_files(preds[precision], pre, files, bs).features

        def ours_pre() -> None:  # as embed_files reads: uint8 resize, on its single-threaded prefetch thread
            ds = FileDataset(files, [0] * len(files), [""], 3, keep_uint8=True)
            loader = eval_loader(ds, pre, bs)
            for _ in prefetched(loader.iterate(0, len(loader))):
                pass

        def theirs_pre_batch(batch: list[str]) -> torch.Tensor:
            return proc([load_image(f) for f in batch], return_tensors="pt")["pixel_values"]

        def theirs() -> np.ndarray:
            out = []
            for i in range(0, len(files), bs):
                x = theirs_pre_batch(files[i : i + bs])
                with torch.inference_mode():
                    out.append(hf(pixel_values=x).pooler_output.numpy())
            return np.concatenate(out)

        def theirs_pre() -> None:
            for i in range(0, len(files), bs):
                theirs_pre_batch(files[i : i + bs])

        x = theirs_pre_batch(files[:bs])

        def ours_model() -> None:
            preds["fp32"](x)

        def ours_model_unfused() -> None:
            preds["fp32_unfused"](x)

        def theirs_model() -> None:
            with torch.inference_mode():
                hf(pixel_values=x)

        a, b = ours("fp32"), theirs()  # warm-up, and the two agree
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        fused_vs_plain = float(np.abs(a - ours("fp32_unfused")).max() / np.abs(a).max())
        print(f"{len(files)} files, cos(vitkit, transformers) min {cos.min():.6f}; processor "
              f"{type(proc).__name__}, threads {torch.get_num_threads()}")
        tasks = {"vitkit_fp32": lambda: ours("fp32"), "transformers": theirs, "vitkit_bf16": lambda: ours("bf16"),
                 "vitkit_fp32_unfused": lambda: ours("fp32_unfused"), "vitkit_auto_fp32": lambda: ours("auto"),
                 "vitkit_preprocess": ours_pre, "transformers_preprocess": theirs_pre,
                 "vitkit_model_b32": ours_model, "transformers_model_b32": theirs_model,
                 "vitkit_model_unfused_b32": ours_model_unfused}
        tasks = {k: v for k, v in tasks.items() if k not in args.skip}
        times: dict[str, list[float]] = {k: [] for k in tasks}
        for r in range(args.rounds):
            order = list(tasks) if r % 2 == 0 else list(tasks)[::-1]
            for k in order:
                t0 = time.perf_counter()
                tasks[k]()
                times[k].append(time.perf_counter() - t0)
            print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in tasks), flush=True)
            write(args, len(files), cos, type(proc).__name__, fused_vs_plain, preds["auto"], times)  # each round


def write(args: argparse.Namespace, n: int, cos: np.ndarray, processor: str, fused_vs_plain: float, auto: object,
          times: dict[str, list[float]]) -> None:
    """The results so far (every round's seconds, the interleaved ratios) to benchmarks/results/."""
    per_round = {k: np.asarray(v) for k, v in times.items()}

    def ratio_of(slow: str, fast: str) -> dict[str, float] | None:
        if slow not in per_round or fast not in per_round:
            return None
        r = per_round[slow] / per_round[fast]
        return {"median": float(np.median(r)), "min": float(r.min()), "max": float(r.max())}

    res = {
        "machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "images": n, "batch": args.batch_size, "threads": args.threads, "rounds": len(next(iter(times.values()))),
        "cos_min": float(cos.min()), "processor": processor, "load_average": list(os.getloadavg()),
        "images_per_s_median": {k: n / float(np.median(v)) for k, v in per_round.items()
                                if not k.endswith("_b32")},
        "model_b32_ms_median": {k: 1e3 * float(np.median(v)) for k, v in per_round.items() if k.endswith("_b32")},
        "ratio_end_to_end_fp32": ratio_of("transformers", "vitkit_fp32"),
        "ratio_end_to_end_fp32_unfused": ratio_of("transformers", "vitkit_fp32_unfused"),
        "fused_vs_unfused_max_rel_diff": fused_vs_plain,
        "runtime_auto": getattr(auto, "description", None),
        "ratio_end_to_end_auto_fp32": ratio_of("transformers", "vitkit_auto_fp32"),
        "ratio_end_to_end_bf16": ratio_of("transformers", "vitkit_bf16"),
        "ratio_model_fp32": ratio_of("transformers_model_b32", "vitkit_model_b32"),
        "ratio_model_fp32_unfused": ratio_of("transformers_model_b32", "vitkit_model_unfused_b32"),
        "ratio_fused_over_unfused_model": ratio_of("vitkit_model_unfused_b32", "vitkit_model_b32"),
        "ratio_preprocess": ratio_of("transformers_preprocess", "vitkit_preprocess"),
        "seconds": {k: [round(t, 4) for t in v] for k, v in times.items()},
    }
    print(json.dumps({k: v for k, v in res.items() if k not in ("machine", "seconds")}, indent=1))
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
