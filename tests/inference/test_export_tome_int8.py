"""Token merging and calibrated static int8 through the serving paths: `--merge` on predict / eval / export (the
exported graph merges and says so in its metadata), `--calibrate` (onnxruntime's static QDQ quantisation on the
user's images, accuracy-sensitive parts kept in float), their errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import digits_test_tensors, int8_against_fp32, trained_digits_vit
from tests.inputs import assert_one_line_error, run_main

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def test_static_int8_is_calibrated_and_keeps_sensitive_ops_in_float(tmp_path, saved_digits) -> None:
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import export_onnx, quantize_static_int8
    from vitkit.inference.predict import calibration_images

    model = trained_digits_vit()
    calib = calibration_images([str(saved_digits[1])], model.preprocess)
    assert calib.shape == (100, 1, 16, 16)
    q = quantize_static_int8(export_onnx(model, tmp_path / "m.onnx"), tmp_path / "m.int8.onnx", calib)
    graph = onnx.load(str(q)).graph
    ops = [n.op_type for n in graph.node]
    assert "QuantizeLinear" in ops and "DynamicQuantizeLinear" not in ops  # static: fixed activation scales
    produced_by = {o: n for n in graph.node for o in n.output}
    weights = {t.name for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "MatMul":
            quantised = all(i in produced_by and produced_by[i].op_type == "DequantizeLinear" for i in n.input)
            from_weight = n.input[1] in weights or (n.input[1] in produced_by and produced_by[n.input[1]].op_type
                                                    == "DequantizeLinear")
            assert quantised == from_weight, n.name  # the Linears' MatMuls in int8, q k^T and a v in float
            if from_weight:  # float outputs: onnxruntime fuses DQ -> MatMul into one MatMulIntegerToFloat
                assert not any(c.op_type == "QuantizeLinear" for c in graph.node if n.output[0] in c.input), n.name
        if n.op_type in ("Softmax", "LayerNormalization", "Erf", "Tanh", "Gelu"):
            assert all(produced_by.get(i) is None or produced_by[i].op_type != "DequantizeLinear" for i in n.input)
    head = [n for n in graph.node if n.op_type in ("MatMul", "Gemm")][-1]
    assert head.input[1] in weights  # the classifier head keeps its float weight
    agree, drop, _ = int8_against_fp32(model, exported_runner(q))
    assert agree >= 0.98 and drop <= 0.02, (agree, drop)
    with pytest.raises(ValueError, match="at least 8 calibration images"):
        quantize_static_int8(tmp_path / "m.onnx", tmp_path / "x.onnx", calib[:3])
    with pytest.warns(UserWarning, match="static int8 calibrated on 10 images: .* a few hundred"):
        quantize_static_int8(tmp_path / "m.onnx", tmp_path / "x.onnx", calib[:10])  # taken, but said


def test_export_merge_and_calibrate_from_the_cli(tmp_path, saved_digits) -> None:
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import exported_merge, exported_preprocess

    model_dir, imgs = saved_digits
    out = tmp_path / "m.onnx"
    r = run_main("export", str(model_dir), "--out", str(out), "--merge", "3", "--precision", "int8", "--calibrate", str(imgs))
    assert r.returncode == 0, r.stderr
    assert "calibrating int8 on 100 images" in r.stdout
    # the parity check of a calibrated graph runs on the user's images (noise is out of its ranges), and says so
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("onnx int8 vs pytorch"))
    assert "on 32 of your images, batches (1, 3, 28)" in line, line
    assert float(line.rsplit("top-1 agreement ", 1)[1].split(";")[0]) >= 0.9, line
    int8 = out.with_suffix(".int8.onnx")
    assert exported_merge(out) == 3 and exported_merge(int8) == 3
    assert exported_preprocess(int8).labels == trained_digits_vit().preprocess.labels
    model = trained_digits_vit()
    x, _ = digits_test_tensors(model)
    model.set_token_merging(3)
    with torch.no_grad():
        ref = model(x[:64])
    model.set_token_merging(0)
    got = exported_runner(out)(x[:64])
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-4)  # the exported graph merges as the model does
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert "TopK" in ops and "ScatterElements" in ops  # ranking and merging are in the graph
    # a per-block schedule is recorded as given
    r = run_main("export", str(model_dir), "--out", str(tmp_path / "s.onnx"), "--merge", "2,4", "--no-check")
    assert r.returncode == 0, r.stderr
    assert exported_merge(tmp_path / "s.onnx") == [2, 4]


def test_predict_and_eval_merge_as_the_model_does(tmp_path, saved_digits) -> None:
    model_dir, imgs = saved_digits
    out = tmp_path / "p.jsonl"
    r = run_main("predict", str(imgs), "--model", str(model_dir), "--merge", "3", "--runtime", "torch",
                 "--precision", "fp32", "--topk", "1", "--output", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    from vitkit.formats import load_pretrained
    from vitkit.inference.predict import calibration_images

    model = load_pretrained(model_dir)
    model.set_token_merging(3)
    x = calibration_images([str(imgs)], model.preprocess)
    with torch.no_grad():
        probs = model(x).softmax(-1)
    assert [row["probs"][0] for row in rows] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)
    r = run_main("eval", "--model", str(model_dir), "--precision", "int8", "--calibrate", str(imgs), "--merge", "3")
    assert r.returncode == 0, r.stderr
    assert "static QDQ, calibrated on 100 images" in r.stderr and "token merging: 3" in r.stderr
    top1 = float(r.stdout.split("top-1: ")[1].split("%")[0])
    assert top1 > 85.0  # the trained model's ~93%, merged and in int8


def test_errors_are_clear(tmp_path, saved_digits) -> None:
    model_dir, imgs = saved_digits
    assert_one_line_error(run_main("export", str(model_dir), "--out", str(tmp_path / "m.onnx"), "--calibrate",
                                   str(imgs)), "--calibrate", "--precision", "int8")
    assert_one_line_error(run_main("eval", "--model", str(model_dir), "--calibrate", str(imgs)), "--calibrate", "int8")
    assert_one_line_error(run_main("eval", "--model", str(model_dir), "--merge", "2,2,2"), "one r per layer",
                          "2 layers")
    assert_one_line_error(run_main("eval", "--model", str(model_dir), "--merge", "x"), "--merge")


def test_static_int8_ranges_are_the_calibration_min_max_unless_percentile(tmp_path) -> None:
    """Default calibration keeps the whole range seen (a rare large activation is not clipped: percentile ranges
    clipped DINOv2's and cost it 15 points, BENCHMARKS.md); `method="percentile"` clips it; a bad method is named."""
    from onnx import numpy_helper

    from vitkit.inference.export import export_onnx, quantize_static_int8
    from vitkit.models import create_model

    torch.manual_seed(0)
    model = create_model("vit", img_size=64, patch_size=16, in_chans=1, num_classes=3, width=16, depth=1,
                         num_heads=2, mlp_dim=32).eval()
    src = export_onnx(model, tmp_path / "m.onnx")
    calib = torch.rand(32, 1, 64, 64, generator=torch.Generator().manual_seed(1))
    calib[3, 0, 5, 7] = 40.0  # one rare large input value among 131,072 (beyond the 99.999th percentile)

    def input_range(path: Path) -> float:
        graph = onnx.load(str(path)).graph
        inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "pixel_values")
        return float(inits[q.input[1]]) * 255  # u8: the scale spans the calibrated range in 255 steps

    full = input_range(quantize_static_int8(src, tmp_path / "mm.onnx", calib))
    clipped = input_range(quantize_static_int8(src, tmp_path / "pc.onnx", calib, method="percentile"))
    assert full == pytest.approx(40.0, rel=1e-3)  # min 0 (the range always holds 0) to the outlier
    assert clipped < 5.0, clipped  # the outlier clipped to about the other values' range (< 1)
    with pytest.raises(ValueError, match="calibration method: one of minmax, percentile, got 'entropy'"):
        quantize_static_int8(src, tmp_path / "x.onnx", calib, method="entropy")
