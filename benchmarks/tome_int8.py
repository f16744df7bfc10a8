"""The accuracy-speed table of token merging (ToMe, Bolya et al. 2023) and int8 (dynamic, and static calibrated on
the data) for BENCHMARKS.md "Faster than the matmul roof".

    python benchmarks/tome_int8.py speed --model vit_b16 [--r 0,8,16] [--batch 1,8] [--repeats 5] [--json F]
    python benchmarks/tome_int8.py accuracy [--r 0,8,13,16] [--json F]
    python benchmarks/tome_int8.py table      # Markdown of benchmarks/results/tome_int8_*.json

`speed`: ViT-S/16 or ViT-B/16 at 224 px (197 tokens), random weights (speed does not depend on them): torch eager
fp32 and bf16, onnxruntime fp32, int8 dynamic and int8 static (QDQ), each with ToMe at every r, and the peer that
imports (Hugging Face's ViT eager, and its ONNX export with onnxruntime's dynamic int8, the peers' int8 story; timm
where it imports), all timed interleaved in one process (medians of `--repeats` rounds): ratios to vitkit fp32
eager are the figures, absolute img/s depend on the machine's load.

`accuracy`: a ViT with 196 patch tokens (digits at 56 px, patch 4, depth 12 like ViT-B) trained here on the digits'
train split (cached in $VITKIT_BENCH_CACHE, default /tmp/vitkit_bench_cache), then on the 450 test digits for each
precision x r: top-1, its change against fp32 unmerged with a paired-bootstrap 95% interval, top-1 agreement with
fp32 unmerged, and the cosine of the pooled features; for each training seed (`--seeds`, default 0,1,2), then the
mean over seeds with their range. Static int8 is calibrated on 256 training images (never the test split).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.bench.peers import PEERS, PeerUnavailable
from vitkit.bench.timing import time_interleaved
from vitkit.inference.backends import exported_runner
from vitkit.inference.export import export_onnx, ort_session, quantize_int8, quantize_static_int8
from vitkit.models import create_model
from vitkit.models.registry import vit_config


def _csv(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


# ----------------------------------------------------------------------------- speed
def speed(model_name: str, rs: list[int], batches: list[int], repeats: int, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = create_model(model_name).eval()
    torch.nn.init.normal_(model.head.weight, std=0.02)
    bf16 = create_model(model_name).eval()
    bf16.load_state_dict(model.state_dict())
    bf16 = bf16.to(torch.bfloat16)
    calib = torch.randn(16, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    tmp = Path(tempfile.mkdtemp(prefix="vitkit-tome-"))
    sessions: dict[str, Any] = {}
    t0 = time.perf_counter()
    for r in rs:
        model.set_token_merging(r)
        fp32 = export_onnx(model, tmp / f"r{r}.onnx")
        sessions[f"ort fp32 r{r}"] = fp32
        sessions[f"ort int8-dyn r{r}"] = quantize_int8(fp32, tmp / f"r{r}.dyn.onnx")
        sessions[f"ort int8-static r{r}"] = quantize_static_int8(fp32, tmp / f"r{r}.static.onnx", calib)
    model.set_token_merging(0)
    print(f"exported and quantised in {time.perf_counter() - t0:.0f} s", flush=True)
    peers: dict[str, Any] = {}
    for name in ("timm", "hf-eager"):
        try:
            peers[name] = PEERS[name](vit_config(model_name[4:-2], int(model_name[-2:]), gelu="exact")).eval()
        except PeerUnavailable as e:
            peers[name] = f"skipped: {e}"
    live = {k: v for k, v in peers.items() if not isinstance(v, str)}
    for name, peer in live.items():  # the peer's model on the same runtime, with its int8 story (dynamic)
        path = tmp / f"{name}.onnx"
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(peer, (torch.zeros(2, 3, 224, 224),), str(path), input_names=["pixel_values"],
                                  output_names=["logits"], dynamic_axes={"pixel_values": {0: "b"}}, opset_version=17,
                                  dynamo=False)
            sessions[f"{name} ort fp32"] = path
            sessions[f"{name} ort int8-dyn"] = quantize_int8(path, tmp / f"{name}.dyn.onnx")
        except Exception as e:  # noqa: BLE001 - the peer's export failing is a result, reported
            peers[name] = f"eager only: its ONNX export failed ({type(e).__name__}: {str(e)[:100]})"
    rows = []
    for b in batches:
        x = torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(2))
        xn, xb = x.numpy(), x.to(torch.bfloat16)
        fns: dict[str, Any] = {}

        def eager(m: torch.nn.Module, r: int, inp: torch.Tensor):  # noqa: ANN202
            def run() -> None:
                m.set_token_merging(r)
                with torch.inference_mode():
                    m(inp)
            return run

        for r in rs:
            fns[f"torch fp32 r{r}"] = eager(model, r, x)
            fns[f"torch bf16 r{r}"] = eager(bf16, r, xb)
        for name, peer in live.items():
            fns[f"{name} eager fp32"] = (lambda p, inp: lambda: p(inp))(peer, x)
        for key, path in sessions.items():
            sess = ort_session(path, threads=threads, spin=False)
            fns[key] = (lambda s, inp: lambda: s.run(None, {"pixel_values": inp}))(sess, xn)
        with torch.inference_mode():
            t = time_interleaved(fns, warmup=1, repeats=repeats,
                                 progress=lambda m, b=b: print(f"  b{b} {m}", flush=True) if "repeat" in m else None)
        base = b / t["torch fp32 r0"].median
        for key, tm in t.items():
            rows.append({"model": model_name, "batch": b, "config": key, "img_per_s": b / tm.median,
                         "vs_fp32_eager": b / tm.median / base, "spread": tm.spread, "repeats": len(tm.samples)})
            print(f"{model_name} b{b} {key:28s} {b / tm.median:7.2f} img/s  {b / tm.median / base:5.2f}x  "
                  f"spread {100 * tm.spread:.0f}%", flush=True)
    return {"peers": {k: ("ok" if not isinstance(v, str) else v) for k, v in peers.items()}, "rows": rows}


# ----------------------------------------------------------------------------- accuracy
ACC_ARCH = dict(img_size=56, patch_size=4, in_chans=1, num_classes=10, width=48, depth=12, num_heads=2, mlp_dim=96,
                gelu="exact")


def trained_digits_196(seed: int = 0, steps: int = 250) -> torch.nn.Module:
    """The digits ViT with 196 patch tokens, trained from `seed` for `steps` steps (or read from the cache). 250 steps
    gave only 36.7% top-1 (seed 0, loss 1.90): too few for a usable accuracy measurement; give more (`--steps`)."""
    from vitkit.data.digits import LABELS, load_digits_split
    from vitkit.formats import load_pretrained, save_pretrained
    from vitkit.models.preprocess import PreprocessConfig

    cache = Path(os.environ.get("VITKIT_BENCH_CACHE", "/tmp/vitkit_bench_cache")) / f"digits196_s{seed}_{steps}"
    if (cache / "config.json").is_file():
        return load_pretrained(cache).eval()
    torch.manual_seed(seed)
    model = create_model("vit", **ACC_ARCH)
    model.preprocess = PreprocessConfig(img_size=(56, 56), mean=(0.5,), std=(0.5,), labels=list(LABELS))
    train, _ = load_digits_split()
    x, y = model.preprocess.normalize(model.preprocess.resize(train.images)), torch.from_numpy(train.labels)
    opt = torch.optim.AdamW(model.parameters(), 3e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for step in range(steps):
        i = torch.randint(0, len(y), (32,), generator=g)
        shift = torch.randint(-4, 5, (2,), generator=g).tolist()  # small translations: a little augmentation
        loss = torch.nn.functional.cross_entropy(model(torch.roll(x[i], shift, (2, 3))), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0:
            print(f"  train step {step} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    save_pretrained(model.eval(), cache)
    return model


def _bootstrap(a: np.ndarray, b: np.ndarray, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of mean(b) - mean(a) (paired, resampling images)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), (n, len(a)))
    d = b[idx].mean(1) - a[idx].mean(1)
    return float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))


def accuracy_one(seed: int, rs: list[int], steps: int = 250) -> dict[str, Any]:
    """Every precision x r on the 450 test digits for the model trained from `seed`."""
    from vitkit.data.digits import load_digits_split

    model = trained_digits_196(seed, steps)
    train, test = load_digits_split()
    pre = model.preprocess
    xt, y = pre.normalize(pre.resize(test.images)), test.labels
    calib = pre.normalize(pre.resize(train.images[:256]))  # calibration: training images, never the test split
    tmp = Path(tempfile.mkdtemp(prefix="vitkit-tome-acc-"))
    with torch.no_grad():
        ref = model(xt)
        ref_feat = model.intermediates(xt, blocks=False)["pooled"]
    ref_ok = (ref.argmax(-1).numpy() == y).astype(float)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    rows = []
    for r in rs:
        model.set_token_merging(r)
        bf16.set_token_merging(r)
        with torch.no_grad():
            out = model.intermediates(xt, blocks=False)
            bf = bf16(xt.to(torch.bfloat16)).float()
        tokens = out["encoded"].shape[1]
        fp32 = export_onnx(model, tmp / f"r{r}.onnx")
        runs = {"fp32": (out["logits"], out["pooled"]), "bf16": (bf, None)}
        for prec, q in (("int8-dyn", quantize_int8(fp32, tmp / f"r{r}.dyn.onnx")),
                        ("int8-static", quantize_static_int8(fp32, tmp / f"r{r}.st.onnx", calib))):
            runs[prec] = (exported_runner(q)(xt), None)
        for prec, (logits, feat) in runs.items():
            ok = (logits.argmax(-1).numpy() == y).astype(float)
            lo, hi = _bootstrap(ref_ok, ok)
            cos = torch.nn.functional.cosine_similarity(feat, ref_feat).mean().item() if feat is not None else None
            logit_cos = torch.nn.functional.cosine_similarity(logits.float(), ref).mean().item()
            row = {"seed": seed, "r": r, "precision": prec, "final_tokens": tokens, "top1": ok.mean(),
                   "delta_points": 100 * (ok.mean() - ref_ok.mean()), "delta_ci95": [100 * lo, 100 * hi],
                   "agreement": float((logits.argmax(-1) == ref.argmax(-1)).float().mean()),
                   "feature_cosine": cos, "logit_cosine": logit_cos}
            rows.append(row)
            print(f"seed {seed} r={r:2d} {prec:12s} tokens {tokens:3d}  top-1 {100 * ok.mean():.2f}%  "
                  f"change {row['delta_points']:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}]  agreement "
                  f"{100 * row['agreement']:.2f}%  logit cosine {logit_cos:.4f}"
                  + (f"  feature cosine {cos:.4f}" if cos is not None else ""), flush=True)
    model.set_token_merging(0)
    return {"seed": seed, "fp32_top1": float(ref_ok.mean()), "rows": rows}


def accuracy(rs: list[int], seeds: list[int], partial: Path | None = None, steps: int = 250) -> dict[str, Any]:
    """`accuracy_one` for every training seed, and per precision x r the mean change over seeds with the seeds'
    spread (min, max) beside each seed's paired-bootstrap interval. `partial` receives the seeds done so far."""
    per_seed = []
    for s in seeds:
        per_seed.append(accuracy_one(s, rs, steps))
        if partial is not None:
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(_summarise(per_seed), indent=2, default=float))
    return _summarise(per_seed)


def _summarise(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    summary = []
    for key in dict.fromkeys((r["r"], r["precision"]) for r in per_seed[0]["rows"]):
        rows = [x for d in per_seed for x in d["rows"] if (x["r"], x["precision"]) == key]
        d = np.array([x["delta_points"] for x in rows])
        agr = np.array([x["agreement"] for x in rows])
        cos = [x["feature_cosine"] for x in rows if x["feature_cosine"] is not None]
        summary.append({"r": key[0], "precision": key[1], "final_tokens": rows[0]["final_tokens"],
                        "delta_mean": float(d.mean()), "delta_min": float(d.min()), "delta_max": float(d.max()),
                        "agreement_mean": float(agr.mean()), "agreement_min": float(agr.min()),
                        "feature_cosine_mean": float(np.mean(cos)) if cos else None,
                        "logit_cosine_mean": float(np.mean([x["logit_cosine"] for x in rows]))})
    return {"model": ACC_ARCH, "test_images": 450, "seeds": [d["seed"] for d in per_seed],
            "fp32_top1": [d["fp32_top1"] for d in per_seed], "per_seed": per_seed, "summary": summary}


def table(results: Path) -> str:
    """BENCHMARKS.md's tables from the JSON files `speed` and `accuracy` wrote into `results`."""
    lines = []
    for f in sorted(results.glob("tome_int8_speed_*.json")):
        doc = json.loads(f.read_text())
        rows = doc["rows"]
        batches = sorted({r["batch"] for r in rows})
        lines += [f"{rows[0]['model']} at 224 px ({doc['date']}, load average {doc['load_average'][0]:.1f}; peers: "
                  + ", ".join(f"{k} {v}" for k, v in doc["peers"].items()) + ")", "",
                  "| config | " + " | ".join(f"b{b} img/s | b{b} × fp32 eager" for b in batches) + " |",
                  "|---|" + "---|---|" * len(batches)]
        for name in dict.fromkeys(r["config"] for r in rows):
            cells = []
            for b in batches:
                r = next(x for x in rows if x["config"] == name and x["batch"] == b)
                cells.append(f"{r['img_per_s']:.2f} | {r['vs_fp32_eager']:.2f}×")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    acc = results / "tome_int8_accuracy.json"
    if acc.is_file():
        doc = json.loads(acc.read_text())
        seeds = doc["seeds"]
        lines += [f"digits ViT with 196 patch tokens ({doc['test_images']} test images; trained from seeds "
                  f"{', '.join(map(str, seeds))}; fp32 unmerged top-1 "
                  + ", ".join(f"{100 * t:.2f}%" for t in doc["fp32_top1"]) + ")", "",
                  "| r | precision | tokens out | change (points): mean over seeds [min, max] | per seed [95% paired "
                  "bootstrap CI] | agreement with fp32 % (mean, min) | feature cosine |", "|---|---|---|---|---|---|---|"]
        for row in doc["summary"]:
            per = "; ".join(f"{x['delta_points']:+.2f} [{x['delta_ci95'][0]:+.2f}, {x['delta_ci95'][1]:+.2f}]"
                            for d in doc["per_seed"] for x in d["rows"]
                            if (x["r"], x["precision"]) == (row["r"], row["precision"]))
            cos = f"{row['feature_cosine_mean']:.4f}" if row["feature_cosine_mean"] is not None else ""
            lines.append(f"| {row['r']} | {row['precision']} | {row['final_tokens']} | {row['delta_mean']:+.2f} "
                         f"[{row['delta_min']:+.2f}, {row['delta_max']:+.2f}] | {per} | "
                         f"{100 * row['agreement_mean']:.2f}, {100 * row['agreement_min']:.2f} | {cos} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("speed", "accuracy", "table"))
    p.add_argument("--model", default="vit_b16")
    p.add_argument("--r", type=_csv, default=None)
    p.add_argument("--batch", type=_csv, default=[1, 8])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", type=_csv, default=[0, 1, 2], help="accuracy: training seeds")
    p.add_argument("--steps", type=int, default=250, help="accuracy: training steps per seed (batch 32)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    if a.what == "table":
        print(table(Path(__file__).parent / "results"))
        return
    if a.what == "speed":
        doc = speed(a.model, a.r or [0, 8, 16], a.batch, a.repeats, a.threads)
    else:
        doc = accuracy(a.r or [0, 8, 13, 16], a.seeds, a.json, a.steps)
        doc["train_steps"] = a.steps
    doc["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["load_average"] = os.getloadavg()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2, default=float))


if __name__ == "__main__":
    main()
