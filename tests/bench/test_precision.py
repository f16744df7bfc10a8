"""The serving paths timed and compared for `--runtime auto`'s table (vitkit.bench.precision: runtime_runners,
runtime_speeds, runtime_agreement, speed_table_rows), on a tiny trained model and real digit images."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import vitkit

# installed, not imported: the runtimes load in the test's child process, and importing NNCF here cost every worker
# that collects this file ~1 CPU s
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("nncf", "onnxruntime")),
                                reason="needs nncf and onnxruntime")


def test_every_serving_path_is_built_timed_and_compared(tmp_path, digits_ckpt: Path, preloaded) -> None:  # noqa: ANN001
    """Run in a process of its own, forked from the suite's preloaded interpreter (tests.helpers.Preloaded: torch
    and vitkit imported once, not by a spawned interpreter each run): the six serving paths' native runtimes
    (onnxruntime sessions, OpenVINO compiled models, NNCF) load in that child only, never in the test worker; with
    them loaded, the next test in the same worker died of a segmentation fault in two suite runs (not reproduced
    alone), which killed the worker, not this test. The child reads the suite's trained digits model
    (`digits_ckpt`, `tests.helpers.trained_digits_vit` saved) instead of training its own copy (300 steps)."""
    r = preloaded.run(CHILD, str(tmp_path), str(digits_ckpt), preload=CHILD_MODULES, timeout=900,
                      cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, f"the check failed in its process (exit code {r.returncode}):\n{r.stderr[-4000:]}"


# the child: this module's check, its imports done by the preloaded interpreter (no native runtime among them)
CHILD = "import sys; from tests.bench.test_precision import _every_serving_path; _every_serving_path(*sys.argv[1:])"
CHILD_MODULES = ["torch", "vitkit", "vitkit.bench.precision", "vitkit.data.digits", "vitkit.inference.runtime",
                 "tests.bench.test_precision"]


def _every_serving_path(tmp: str, model_path: str) -> None:
    tmp_path = Path(tmp)
    torch.set_num_threads(1)
    from vitkit.bench.precision import (
        RUNTIME_PATHS,
        runtime_agreement,
        runtime_runners,
        runtime_speeds,
        speed_table_rows,
    )
    from vitkit.data.digits import load_digits_split
    from vitkit.inference.runtime import SUPPORTED

    model = vitkit.load_pretrained(model_path).eval()
    train, test = load_digits_split()
    runners = runtime_runners(model, model.preprocess(train.images[:64]), tmp_path)
    assert list(runners) == list(RUNTIME_PATHS)
    x, y = model.preprocess(test.images[:200]), torch.from_numpy(test.labels[:200])
    agree = runtime_agreement(runners, x, y)
    assert agree["torch fp32"]["agreement"] == 1.0 and agree["onnxruntime fp32"]["agreement"] == 1.0
    for name in ("onnxruntime int8 dynamic", "onnxruntime int8 static", "openvino int8"):
        assert agree[name]["agreement"] >= 0.95, (name, agree[name])  # each int8 path a real, faithful int8
    speeds = runtime_speeds(runners, x[:8], repeats=3)
    assert speeds["torch fp32"]["vs_torch_fp32"] == 1.0
    assert all(s["img_s"] > 0 and s["vs_torch_fp32"] > 0 for s in speeds.values())
    rows = speed_table_rows(speeds, "avx2", model="digits", batch=8)
    got = {(r["runtime"], r["precision"], r["calibrated"]) for r in rows}
    assert got == {("torch", "fp32", False), ("onnxruntime", "fp32", False), ("onnxruntime", "int8", False),
                   ("onnxruntime", "int8", True), ("openvino", "fp32", False), ("openvino", "int8", True)}
    assert all(r["precision"] in SUPPORTED[r["runtime"]] and r["isa"] == "avx2" for r in rows)
    with pytest.raises(ValueError, match="serving path 'tvm int8'"):
        runtime_runners(model, x[:8], tmp_path / "x", ["tvm int8"])
