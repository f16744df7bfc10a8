"""bf16 (weights and autocast) and ONNX fp32 / int8 against fp32 PyTorch on the digits test split.

    .venv/bin/python benchmarks/demo_accuracy.py [CHECKPOINT]   # default: runs/demo/model (from `vitkit demo`)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

import vitkit
from vitkit.bench import compare_precisions
from vitkit.data.digits import load_digits_split
from vitkit.inference.export import export_onnx, onnx_logits, ort_session, quantize_int8


def main(ckpt: str = "runs/demo/model") -> int:
    model = vitkit.load_pretrained(ckpt).float().eval()
    _, test = load_digits_split()
    labels = torch.from_numpy(test.labels)
    pre = model.preprocess
    x = pre.normalize(pre.resize(test.images))
    print(f"{ckpt}: {model.config.name or 'vit'} on the digits test split ({len(test)} images)")
    for a in compare_precisions(model, x, labels):
        print(
            f"  {a.precision:14s} accuracy {a.accuracy:.4f} (fp32 {a.reference_accuracy:.4f}), top-1 agreement "
            f"{a.top1_agreement:.4f}, |dlogit| max {a.max_abs_logit_diff:.3g} mean {a.mean_abs_logit_diff:.3g}"
        )
    with torch.inference_mode():
        ref = model(x)
    with tempfile.TemporaryDirectory() as d:
        fp32 = export_onnx(model, Path(d) / "m.onnx")
        int8 = quantize_int8(fp32, Path(d) / "m.int8.onnx")
        for name, p in (("onnx fp32", fp32), ("onnx int8", int8)):
            logits = onnx_logits(ort_session(p), x)
            print(
                f"  {name:14s} accuracy {(logits.argmax(-1) == labels).float().mean():.4f}, top-1 agreement "
                f"{(logits.argmax(-1) == ref.argmax(-1)).float().mean():.4f}, |dlogit| max {(logits - ref).abs().max():.3g}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
