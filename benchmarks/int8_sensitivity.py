"""Where DINOv2-S/14's int8 error sits (issue 53): onnxruntime static int8 of the digits classifier's backbone with
one block, or one kind of layer, kept in float (`quantize_static_int8(keep_float=...)`, the activation ranges
calibrated once on 128 training digits and reused), scored on the first `EVAL` test digits of the 400-digit pool
through a head trained on the fp32 features; and the activation ranges behind it (every Linear's input min / max /
RMS, each block's output max |x|, LayerScale's mean |gamma|) on 16 calibration digits.

    PYTHONPATH=. python benchmarks/int8_sensitivity.py WHEEL FP32_FEATURES [--eval 64] [--only "block 11,kind mlp.fc2"]

FP32_FEATURES: the fp32 pooled features of the 400-digit pool (`int8_openvino.py --dinov2 ... --fp32-cache F`
writes them). Results: benchmarks/results/int8_sensitivity*.json.
"""
import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
warnings.simplefilter("ignore")
from dinov2_tome import load_checked  # noqa: E402
from tome_int8 import _digits_pool, digits_splits, linear_head  # noqa: E402

from vitkit.inference.export import (  # noqa: E402
    export_onnx,
    onnx_logits,
    ort_session,
    quantisable_layers,
    quantize_static_int8,
)
from vitkit.utils.files import scratch_dir  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("wheel", type=Path)
ap.add_argument("fp32", type=Path)
ap.add_argument("--eval", type=int, default=64)
ap.add_argument("--only", default=None)
ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "int8_sensitivity.json")
args = ap.parse_args()
torch.set_num_threads(1)
W = scratch_dir("vitkit-int8-sens-")
model, _ = load_checked(args.wheel, W / "dinov2")
pre = model.preprocess
d = torch.load(args.fp32)
images, labels, n_tr, n_te = _digits_pool(400)
def prep(x):
    return pre.normalize(pre.resize(x.expand(-1, 3, -1, -1)))
f32 = d["features"]
fit, dev, _ = digits_splits(labels, n_tr, n_te, 128, 0)
head, C, _ = linear_head(f32.numpy(), labels, fit, dev)
ev = np.arange(n_tr, n_tr + args.eval)
xev = prep(images[ev])
ref_l = head.decision_function(f32[ev].numpy())
out = {"C": C, "eval": len(ev), "load_before": os.getloadavg(), "rows": {}}
# activation statistics of every Linear's input, and LayerScale, on 16 calibration digits
stats = {}
def hook(name):
    def h(m, inp, o):
        x = inp[0].detach().float()
        s = stats.setdefault(name, {"max": -1e9, "min": 1e9, "sq": 0.0, "n": 0, "outmax": 0.0})
        s["max"], s["min"] = max(s["max"], x.max().item()), min(s["min"], x.min().item())
        s["sq"] += (x ** 2).sum().item()
        s["n"] += x.numel()
        s["outmax"] = max(s["outmax"], o.abs().max().item())
    return h
hs = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
resid = []
hs += [b.register_forward_hook(lambda m, i, o: resid.append(o.abs().max().item())) for b in model.blocks]
with torch.inference_mode():
    model.intermediates(prep(images[:16]), blocks=False)
for h in hs:
    h.remove()
for _n, s in stats.items():
    rms = (s["sq"] / s["n"]) ** 0.5
    s.update(rms=rms, noise=(s["max"] - s["min"]) / 255 / rms)
out["stats"] = stats
out["block_out_max"] = resid
out["layerscale"] = {i: [b.ls1.gamma.abs().mean().item(), b.ls2.gamma.abs().mean().item()] for i, b in enumerate(model.blocks)} if hasattr(model.blocks[0].ls1, "gamma") else {}
print("stats done", flush=True)
src = export_onnx(model, W / "dinov2.onnx")
layers = quantisable_layers(src)
cal = prep(images[:128])
variants = {"all-int8": ()}
variants.update({f"block {b}": tuple(l for l in layers if l.startswith(f"blocks.{b}.")) for b in range(12)})
variants.update({f"kind {k}": tuple(l for l in layers if l.endswith(k)) for k in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2", "patch_embed.proj")})
only = args.only
for name in (only.split(",") if only else list(variants)):
    keep = variants[name]
    t = time.time()
    q = quantize_static_int8(src, W / "v.onnx", cal, keep_float=keep, ranges=W / "ranges.json")
    tq = time.time() - t
    f = onnx_logits(ort_session(q, threads=1), xev, 16)
    l = head.decision_function(f.numpy())
    fr = f32[ev]
    row = {"keep": keep, "agree": float((l.argmax(1) == ref_l.argmax(1)).mean()),
           "feat_rel": float(((f - fr).norm(dim=1) / fr.norm(dim=1)).mean()),
           "logit_rel": float(np.linalg.norm(l - ref_l, axis=1).mean() / np.linalg.norm(ref_l, axis=1).mean()),
           "margin_flips": int((l.argmax(1) != ref_l.argmax(1)).sum()), "sec_quant": tq, "sec": time.time() - t}
    out["rows"][name] = row
    print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "keep"}, flush=True)
    args.json.write_text(json.dumps(out, indent=1))
out["load_after"] = os.getloadavg()
args.json.write_text(json.dumps(out, indent=1))
