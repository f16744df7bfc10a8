"""Serving on CPUs: vitkit's inference paths beside timm and Hugging Face, interleaved in one process.

For ViT-Ti/S/B/16 at 224 px (1000 classes, exact GELU on every side), batch 1 and 8, it times:
  peers    timm eager fp32, timm eager under bf16 autocast, HF (sdpa) fp32, HF (sdpa) bf16 autocast;
  vitkit   every `vitkit.inference.runtime` path, built exactly as `vitkit predict` builds it: torch eager / compiled
           (inductor, frozen weights) in fp32 and bf16, onnxruntime fp32 and int8, OpenVINO fp32 and bf16.
It reports each median with its spread, the ratio to timm eager of the same precision, the ratio of int8 to
fp32, and the matmul FLOP/s each path reaches as a share of this CPU's measured matmul peak (the profile
that says how much any runtime can still gain). Then accuracy: every vitkit path against torch fp32 eager
on the digits test images, with the demo's trained model (`vitkit demo` writes runs/demo/model), as
saved and as loaded back from the original JAX code's `.npz` layout.

timm needs torchvision, whose wheels do not load beside torch's CPU build: run this in an environment
with torch + torchvision + timm (BENCHMARKS.md says which); any peer that does not import is skipped.

    python benchmarks/cpu_serving.py [--models vit_ti16,vit_s16,vit_b16] [--batches 1,8] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from tqdm.auto import tqdm

import vitkit
from vitkit.bench.machine import machine_info, matmul_peak
from vitkit.bench.peers import PeerUnavailable, build_hf, build_timm
from vitkit.bench.timing import time_interleaved
from vitkit.inference.runtime import build_predictor, runtime_available
from vitkit.models.flops import vit_flops

#: (label, runtime, precision, compile) of the vitkit paths, as `vitkit predict --runtime R --precision P`
PATHS = [
    ("torch eager", "torch", "fp32", False),
    ("torch compile", "torch", "fp32", True),
    ("onnxruntime", "onnxruntime", "fp32", False),
    ("openvino", "openvino", "fp32", False),
    ("torch eager", "torch", "bf16", False),
    ("torch compile", "torch", "bf16", True),
    ("openvino", "openvino", "bf16", False),
    ("onnxruntime", "onnxruntime", "int8", False),
]


def peers(cfg, x: torch.Tensor) -> dict[str, tuple[str, callable]]:  # noqa: ANN001
    out = {}
    for name, build in (("timm", build_timm), ("hf-sdpa", build_hf)):
        try:
            m = build(cfg).eval()
        except PeerUnavailable as e:
            print(f"skipped {name}: {e}", file=sys.stderr)
            continue

        def fp32(m=m) -> None:
            with torch.inference_mode():
                m(x)

        def bf16(m=m) -> None:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                m(x)

        out[f"{name} eager|fp32"] = ("fp32", fp32)
        out[f"{name} eager (autocast)|bf16"] = ("bf16", bf16)
    return out


def time_case(model_name: str, batch: int, repeats: int, bar: tqdm) -> list[dict]:
    torch._dynamo.reset()  # each case compiles afresh (else dynamo's recompile limit sends later cases to eager)
    torch.manual_seed(0)
    model = vitkit.create_model(model_name, num_classes=1000, gelu="exact").eval()
    torch.nn.init.normal_(model.head.weight, std=0.02)  # a zero head would give identical logits everywhere
    x = torch.randn(batch, 3, 224, 224)
    fns = {k: fn for k, (_, fn) in peers(model.config, x).items()}
    setup = {}
    for label, runtime, precision, compile_ in PATHS:
        if not runtime_available(runtime):
            print(f"skipped {runtime}: not installed", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        net = build_predictor(model, precision, runtime, compile_)
        net(x)  # compiles (torch.compile) on the first call
        key = f"vitkit {label}|{precision}"
        setup[key] = time.perf_counter() - t0
        fns[key] = lambda net=net: net(x)
    bar.set_postfix_str(f"{model_name} batch {batch}")
    timings = time_interleaved(fns, warmup=2, repeats=repeats)
    flops = vit_flops(model.config).forward * batch
    rows = []
    for key, t in timings.items():
        who, precision = key.split("|")
        rows.append({"model": model_name, "batch": batch, "path": who, "precision": precision,
                     "median_s": t.median, "spread": t.spread, "samples": t.samples,
                     "gflops": flops / t.median / 1e9, "setup_s": setup.get(key)})
    bar.update(1)
    return rows


def ratios(rows: list[dict]) -> None:
    """Each row's speed over timm eager of the same precision (int8 over timm fp32), and int8 over fp32."""
    for r in rows:
        same = [q for q in rows if q["model"] == r["model"] and q["batch"] == r["batch"]]
        ref_prec = "fp32" if r["precision"] == "int8" else r["precision"]
        timm = [q for q in same if q["path"].startswith("timm") and q["precision"] == ref_prec]
        r["vs_timm"] = timm[0]["median_s"] / r["median_s"] if timm else None
        if r["precision"] == "int8":
            fp32 = [q for q in same if q["path"] == "vitkit torch eager" and q["precision"] == "fp32"]
            best = min(q["median_s"] for q in same if q["precision"] == "fp32" and q["path"].startswith("vitkit"))
            r["vs_fp32_eager"] = fp32[0]["median_s"] / r["median_s"]
            r["vs_best_fp32"] = best / r["median_s"]


@torch.no_grad()
def agreement(model_dir: Path) -> list[dict]:
    """Every vitkit path against torch fp32 eager on the 450 digits test images: top-1 agreement, accuracy,
    max |logit difference|; for the demo model as saved and as read back from the JAX `.npz` layout."""
    from vitkit.data.digits import load_digits_split

    _, test = load_digits_split()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        model = vitkit.load_pretrained(model_dir)
        npz = vitkit.save_pretrained(model, Path(tmp) / "released.npz", format="npz")
        for source, m in (("vitkit format", model), ("released .npz layout", vitkit.load_pretrained(npz))):
            torch._dynamo.reset()
            m = m.eval()
            x = m.preprocess(test.images)
            labels = torch.from_numpy(test.labels)
            ref = m(x)
            for label, runtime, precision, compile_ in PATHS:
                if not runtime_available(runtime):
                    continue
                logits = build_predictor(m, precision, runtime, compile_)(x)
                out.append({"checkpoint": source, "path": f"vitkit {label}", "precision": precision,
                            "top1_agreement": (logits.argmax(-1) == ref.argmax(-1)).float().mean().item(),
                            "accuracy": (logits.argmax(-1) == labels).float().mean().item(),
                            "reference_accuracy": (ref.argmax(-1) == labels).float().mean().item(),
                            "max_abs_logit_diff": (logits - ref).abs().max().item(),
                            "max_abs_logit": ref.abs().max().item(), "n": len(labels)})
    return out


def markdown(result: dict) -> str:
    lines = [f"machine: {result['machine']['cpu']} ({result['machine']['cores']} cores; ISA: "
             f"{result['machine']['cpu_isa']}), torch {result['machine']['torch']}, {result['machine']['date']}; "
             f"matmul peak fp32 {result['peak_fp32'] / 1e9:.0f} GFLOP/s, bf16 {result['peak_bf16'] / 1e9:.0f} "
             f"GFLOP/s", ""]
    lines += ["| model | batch | precision | path | ms / batch (spread) | × timm eager | % of matmul peak | "
              "int8 × fp32 eager (× best fp32) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        peak = result["peak_bf16"] if r["precision"] == "bf16" else result["peak_fp32"]
        vs = f"{r['vs_timm']:.2f}×" if r.get("vs_timm") else "–"
        i8 = f"{r['vs_fp32_eager']:.2f}× ({r['vs_best_fp32']:.2f}×)" if r["precision"] == "int8" else ""
        pct = "" if r["precision"] == "int8" else f"{100 * r['gflops'] * 1e9 / peak:.0f}%"
        flag = " UNRELIABLE" if r["spread"] > 0.25 else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['path']} | "
                     f"{1e3 * r['median_s']:.1f} ({100 * r['spread']:.0f}%){flag} | {vs} | {pct} | {i8} |")
    if result.get("agreement"):
        lines += ["", "| checkpoint | precision | path | top-1 agreement with fp32 eager | accuracy (fp32: ref) | "
                  "max abs logit diff (max abs logit) |", "|---|---|---|---|---|---|"]
        for a in result["agreement"]:
            lines.append(f"| {a['checkpoint']} | {a['precision']} | {a['path']} | {100 * a['top1_agreement']:.2f}% | "
                         f"{100 * a['accuracy']:.2f}% ({100 * a['reference_accuracy']:.2f}%) | "
                         f"{a['max_abs_logit_diff']:.2e} ({a['max_abs_logit']:.1f}) |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vit_ti16,vit_s16,vit_b16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--demo-model", type=Path, default=Path("runs/demo/model"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu_serving.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    models, batches = args.models.split(","), [int(b) for b in args.batches.split(",")]
    result = {"machine": machine_info(), "peak_fp32": matmul_peak(torch.float32),
              "peak_bf16": matmul_peak(torch.bfloat16), "rows": [], "agreement": []}
    with tqdm(total=len(models) * len(batches), desc="cases", file=sys.stderr) as bar:
        for name in models:
            for b in batches:
                result["rows"] += time_case(name, b, args.repeats, bar)
    result["peak_fp32"] = max(result["peak_fp32"], matmul_peak(torch.float32))  # best of before and after
    result["peak_bf16"] = max(result["peak_bf16"], matmul_peak(torch.bfloat16))
    ratios(result["rows"])
    if args.demo_model.exists():
        result["agreement"] = agreement(args.demo_model)
    else:
        print(f"no {args.demo_model}: run `vitkit demo` for the accuracy table", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    md = markdown(result)
    args.out.with_suffix(".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
