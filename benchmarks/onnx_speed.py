"""ONNX export of a registry model at 224 px: parity with PyTorch, then PyTorch vs onnxruntime fp32
and int8 (dynamic quantisation), interleaved. Random weights (speed only).

    .venv/bin/python benchmarks/onnx_speed.py [MODEL] [BATCH]   # default: vit_b16 8
"""

from __future__ import annotations

import sys
import tempfile

from vitkit.cli import main

if __name__ == "__main__":
    model = sys.argv[1] if len(sys.argv) > 1 else "vit_b16"
    batch = sys.argv[2] if len(sys.argv) > 2 else "8"
    with tempfile.TemporaryDirectory() as d:
        sys.exit(main(["export", model, "--out", f"{d}/{model}.onnx", "--precision", "int8", "--bench", "--batch", batch]))
