"""Same weights, same answers: vitkit against transformers and timm (README's headline, BENCHMARKS.md "Serving on CPUs").

    python benchmarks/parity_peers.py [CHECKPOINT] [--json OUT]   # default: runs/demo/model (from `vitkit demo`)

transformers: the checkpoint is saved as a transformers ViT folder (`vitkit.save_pretrained(..., format="hf")`), read
back by `transformers.ViTForImageClassification.from_pretrained`, and both models answer the digits test split (the
same input tensors): test top-1 of each, top-1 agreement, the largest logit difference.

timm: timm does not import beside this CPU torch (it needs torchvision), so its side is the reference files timm
itself wrote (tests/fixtures/timm_hub/, by tests/reference/make_timm_hub_reference.py: six hub folders with small
random weights, seven photos each, timm's own preprocessing and `forward_head(..., pre_logits=True)`): `vitkit.embed`
of the same files against those features (the smallest cosine, the largest difference relative to the largest
feature). No accuracy is measured on the timm side: those models have random weights.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import vitkit
from vitkit.bench.machine import machine_info
from vitkit.data.digits import load_digits_split

ROOT = Path(__file__).resolve().parents[1]
TIMM_HUB = ROOT / "tests" / "fixtures" / "timm_hub"


def against_transformers(ckpt: str) -> dict:
    """vitkit's and transformers' answers on the digits test split from the same weights."""
    import transformers

    model = vitkit.load_pretrained(ckpt).float().eval()
    _, test = load_digits_split()
    labels = torch.from_numpy(test.labels)
    pre = model.preprocess
    x = pre.normalize(pre.resize(test.images))
    with tempfile.TemporaryDirectory() as d:
        folder = vitkit.save_pretrained(model, Path(d) / "hf", format="hf")
        hf = transformers.ViTForImageClassification.from_pretrained(folder).eval()
        with torch.inference_mode():
            ours, theirs = model(x), hf(pixel_values=x).logits
    return {"checkpoint": ckpt, "images": len(labels), "transformers": transformers.__version__,
            "vitkit_top1": float((ours.argmax(-1) == labels).float().mean()),
            "transformers_top1": float((theirs.argmax(-1) == labels).float().mean()),
            "top1_agreement": float((ours.argmax(-1) == theirs.argmax(-1)).float().mean()),
            "max_abs_logit_diff": float((ours - theirs).abs().max()), "max_abs_logit": float(theirs.abs().max())}


def against_timm_references() -> dict:
    """`vitkit.embed` of timm's reference photos against the features timm wrote for each hub folder."""
    ref = json.loads((TIMM_HUB / "reference.json").read_text())
    files = [str(TIMM_HUB / "images" / f) for f in ref["files"]]
    want = np.load(TIMM_HUB / "features.npz", allow_pickle=False)
    rows = []
    for name in sorted(ref["folders"]):
        got = vitkit.embed(TIMM_HUB / name, files).features
        w = want[name]
        cos = (got * w).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(w, axis=1)
        rows.append({"folder": name, "hub": ref["folders"][name]["hub"], "files": len(files),
                     "min_cosine": float(cos.min()), "max_rel_diff": float(np.abs(got - w).max() / np.abs(w).max())})
    return {"made_by": ref["made_by"], "folders": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", nargs="?", default="runs/demo/model")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    out = {"machine": machine_info(), "transformers": against_transformers(args.checkpoint),
           "timm": against_timm_references()}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
