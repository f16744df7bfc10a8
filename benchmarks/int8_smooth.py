"""What closes static int8's accuracy gap on a CPU without VNNI (issue 53): onnxruntime static int8 of the DINOv2-S/14
digits classifier with its weight type (7-bit s8, the u8 x s8 kernels; or 8-bit u8, the u8 x u8 kernels) and
SmoothQuant (`vitkit.inference.smooth`, alpha) varied, scored by the 5-seed protocol of `tome_int8.py` (a head
trained on the fp32 features, the same head reading every variant; paired bootstrap per seed, t-interval over seeds,
top-1 agreement with fp32); and the speed of each weight type on ViT-S/16 against torch fp32, interleaved.

    PYTHONPATH=. python benchmarks/int8_smooth.py accuracy WHEEL [--variants s8,u8,s8+sq0.5,u8+sq0.5] [--limit 400]
                        [--calibration 128] [--seeds 0,1,2,3,4] [--fp32-cache F] [--name int8_smooth_dinov2]
    PYTHONPATH=. python benchmarks/int8_smooth.py speed [--model vit_s16] [--batch 8] [--repeats 5]
                        [--variants s8,u8] [--name int8_smooth_speed]

A variant is WEIGHTS[+sqALPHA]: WEIGHTS s8 (7-bit signed weights, what vitkit wrote before) or u8 (8-bit unsigned);
+sqALPHA folds SmoothQuant at that alpha into the graph before quantising. Results: benchmarks/results/<name>.json
and .md (the machine's load average before and after each run is in them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
warnings.simplefilter("ignore")

from vitkit.bench.machine import machine_info  # noqa: E402
from vitkit.bench.precision import runtime_speeds  # noqa: E402
from vitkit.inference.backends import exported_runner  # noqa: E402
from vitkit.inference.export import export_onnx, quantize_static_int8  # noqa: E402
from vitkit.utils.files import scratch_dir  # noqa: E402
from vitkit.utils.hardware import isa_kind  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def parse_variant(v: str) -> dict[str, object]:
    """"u8+sq0.5" -> `quantize_static_int8`'s grid u8, SmoothQuant at alpha 0.5; "s8" -> grid w7 (7-bit s8
    weights), no SmoothQuant. (The a7 grid and "+sqall" rows of int8_smooth_dinov2_avx2_b were run by commit
    d0c3156's version of this script.)"""
    w, _, sq = v.partition("+sq")
    if w not in ("s8", "u8"):
        raise ValueError(f"variant {v!r}: s8 or u8, then optionally +sqALPHA")
    return {"grid": "w7" if w == "s8" else "u8", "smooth_quant": float(sq) if sq else None}


def header(args: argparse.Namespace) -> dict[str, object]:
    return {"machine": machine_info("cpu"), "isa": isa_kind(), "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": os.getloadavg(),
            "argv": sys.argv[1:]}


def accuracy(args: argparse.Namespace) -> dict[str, object]:
    from int8_openvino import dinov2_digits, fp32_features
    from tome_int8 import DINO_DIGITS, _summarise, dinov2_digits_seed

    tmp = scratch_dir(prefix="vitkit-int8-smooth-")
    model, check, prep, images, labels, n_tr, n_te, n_cal = dinov2_digits(args.wheel, tmp, args.limit,
                                                                          args.calibration)
    doc = header(args) | {"wheel_parity_max_abs": check(prep(images[:4])), "images": len(images), "n_train": n_tr,
                          "n_test": n_te, "n_calibration": n_cal, "seconds": {}}
    feats: dict = {"labels": labels, "n_train": n_tr, "n_test": n_te, "n_calibration": n_cal, "variants": {}}

    def features(name: str, fn) -> None:  # noqa: ANN001
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = torch.cat([fn(prep(b)).float() for b in images.split(32)])
        feats["variants"][(0, name)] = {"features": out, "final_tokens": 257}
        doc["seconds"][name] = time.perf_counter() - t0
        print(f"{name}: {len(images)} digits in {doc['seconds'][name]:.0f} s (load {os.getloadavg()[0]:.1f})",
              flush=True)

    fp32_features(feats, model, features, args.fp32_cache)
    src = export_onnx(model, tmp / "d.onnx")
    calib = prep(images[:n_cal])
    for v in args.variants.split(","):
        t0 = time.perf_counter()
        q = quantize_static_int8(src, tmp / "q.onnx", calib, **parse_variant(v))
        doc["seconds"][f"{v} quantise"] = time.perf_counter() - t0
        features(v, exported_runner(q, threads=torch.get_num_threads()))
    per_seed = [dinov2_digits_seed(feats, int(s)) for s in args.seeds.split(",")]
    doc["accuracy"] = _summarise(per_seed, DINO_DIGITS, per_seed[0]["test"])
    doc["load_after"] = os.getloadavg()
    return doc


def speed(args: argparse.Namespace) -> dict[str, object]:
    from vitkit.models import create_model

    tmp = scratch_dir(prefix="vitkit-int8-smooth-speed-")
    torch.manual_seed(0)
    model = create_model(args.model).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    calib = torch.randn(16, 3, 224, 224)
    src = export_onnx(model, tmp / "m.onnx")
    runners = {"torch fp32": lambda b: model(b)}
    for v in args.variants.split(","):
        runners[f"onnxruntime int8 static {v}"] = exported_runner(
            quantize_static_int8(src, tmp / f"{v}.onnx", calib, **parse_variant(v)),
            threads=torch.get_num_threads())
    doc = header(args) | {"model": args.model, "batch": args.batch, "repeats": args.repeats}
    with torch.inference_mode():
        doc["speed"] = runtime_speeds(runners, x, args.repeats)
    doc["load_after"] = os.getloadavg()
    return doc


def markdown(doc: dict) -> str:
    where = (f"{doc['machine'].get('cpu', '?')} ({doc['isa']}), {doc['threads']} thread(s), {doc['date']}; load "
             f"average {doc['load_before'][0]:.1f} before, {doc['load_after'][0]:.1f} after (loaded, shared machine)."
             f" `benchmarks/int8_smooth.py {' '.join(doc['argv'])}`")
    if "speed" in doc:
        lines = [f"# onnxruntime static int8 weight types: {doc['model']}, batch {doc['batch']}", "", where, "",
                 "| path | img/s | spread | x torch fp32 |", "|---|---|---|---|"]
        lines += [f"| {k} | {s['img_s']:.2f} | {100 * s['spread']:.0f}% | {s['vs_torch_fp32']:.2f}x |"
                  for k, s in doc["speed"].items()]
        return "\n".join(lines) + "\n"
    acc = doc["accuracy"]
    lines = ["# onnxruntime static int8 on the DINOv2-S/14 digits classifier: weight type and SmoothQuant", "",
             where, "", f"{doc['images']} digits ({acc['test_images']} test a seed), {doc['n_calibration']} "
             f"calibration digits, seeds {acc['seeds']}; fp32 top-1 per seed "
             f"{', '.join(f'{100 * a:.0f}' for a in acc['fp32_top1'])}.", "",
             "| variant | top-1 % (mean) | change, points [95% t] | agreement with fp32 %, mean (min) | "
             "feature cosine |", "|---|---|---|---|---|"]
    for row in acc["summary"]:
        ci = row["delta_t95"] or [0, 0]
        lines.append(f"| {row['precision']} | {100 * row['top1_mean']:.2f} | {row['delta_mean']:+.2f} "
                     f"[{ci[0]:+.2f}, {ci[1]:+.2f}] | {100 * row['agreement_mean']:.2f} "
                     f"({100 * row['agreement_min']:.0f}) | {row['feature_cosine_mean']:.5f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("wheel", type=Path)
    a.add_argument("--variants", default="s8,u8,s8+sq0.5,u8+sq0.5")
    a.add_argument("--limit", type=int, default=400)
    a.add_argument("--calibration", type=int, default=128)
    a.add_argument("--seeds", default="0,1,2,3,4")
    a.add_argument("--fp32-cache", type=Path, default=None)
    a.add_argument("--name", default="int8_smooth_dinov2")
    s = sub.add_parser("speed")
    s.add_argument("--model", default="vit_s16")
    s.add_argument("--batch", type=int, default=8)
    s.add_argument("--repeats", type=int, default=5)
    s.add_argument("--variants", default="s8,u8")
    s.add_argument("--name", default="int8_smooth_speed")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    doc = accuracy(args) if args.cmd == "accuracy" else speed(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(doc, indent=1, default=float))
    (RESULTS / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
