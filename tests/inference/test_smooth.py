"""Static int8's recipe on onnxruntime: SmoothQuant (`vitkit.inference.smooth`), folded into the LayerNorms and the
MatMuls that read them, so the float graph computes the same function, and on a model with a planted
activation-outlier channel static int8 comes far closer to fp32 with it; and the int8 grid (`--int8-grid`), stored
in the export and said by the commands that run it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.helpers import int8_against_fp32, trained_digits_vit
from tests.inputs import assert_one_line_error, run_main

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

#: the channel of each LayerNorm output made an outlier, and by how much
CHANNEL, FACTOR = 5, 40.0


def planted_channel_model() -> torch.nn.Module:
    """The trained digits ViT with channel `CHANNEL` of every block's LayerNorm output scaled up `FACTOR`x and the
    qkv / fc1 weight columns that read it scaled down as much: the same function in float, but one LayerNorm output
    channel far larger than the others (the activation outliers SmoothQuant is for)."""
    model = copy.deepcopy(trained_digits_vit())
    with torch.no_grad():
        for b in model.blocks:
            for norm, lin in ((b.norm1, b.attn.qkv), (b.norm2, b.mlp.fc1)):
                norm.weight[CHANNEL] *= FACTOR
                norm.bias[CHANNEL] *= FACTOR
                lin.weight[:, CHANNEL] /= FACTOR
    return model.eval()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):  # noqa: ANN201
    """(the planted model, its fp32 ONNX export, 64 calibration digits)."""
    from vitkit.data.digits import load_digits_split
    from vitkit.inference.export import export_onnx

    model = planted_channel_model()
    train, _ = load_digits_split()
    pre = model.preprocess
    return model, export_onnx(model, tmp_path_factory.mktemp("smooth") / "m.onnx"), pre.normalize(
        pre.resize(train.images[:64]))


def test_smoothing_folds_into_the_layernorms_and_leaves_the_float_output_unchanged(planted, tmp_path) -> None:
    from vitkit.inference.export import INPUT_NAME, onnx_logits, ort_session
    from vitkit.inference.smooth import channel_absmax, smooth_onnx, smoothable

    model, src, calib = planted
    g = onnx.load(str(src)).graph
    found = smoothable(g)
    # the LayerNorms before each block's qkv and fc1; not the final norm (the pooling reads it)
    assert sorted(found) == sorted(f"/blocks.{i}/norm{j}/LayerNormalization" for i in range(2) for j in (1, 2))
    assert sorted(m.name.split("/")[-2] for ms in found.values() for m in ms) == ["fc1", "fc1", "qkv", "qkv"]
    dst = tmp_path / "s.onnx"
    smooth_onnx(src, dst, calib, INPUT_NAME, alpha=0.5)
    s = onnx.load(str(dst)).graph
    assert [n.op_type for n in s.node] == [n.op_type for n in g.node]  # folded: no node added, same speed
    x = calib[:32]
    ref, got = onnx_logits(ort_session(src), x), onnx_logits(ort_session(dst), x)
    assert ((got - ref).norm() / ref.norm()).item() < 1e-5
    with torch.no_grad():
        assert ((ref - model(x)).norm() / ref.norm()).item() < 1e-5
    # the planted channel is no longer the outlier of its LayerNorm's output
    names = [n.output[0] for n in g.node if n.name in found]
    before, after = channel_absmax(src, names, x, INPUT_NAME), channel_absmax(dst, names, x, INPUT_NAME)
    for t in names:
        assert int(np.argmax(before[t])) == CHANNEL
        spread_before = before[t].max() / np.median(before[t])
        spread_after = after[t].max() / np.median(after[t])
        assert spread_after < spread_before / 4, (t, spread_before, spread_after)


def test_smoothquant_brings_static_int8_close_to_fp32_on_a_planted_outlier_channel(planted, tmp_path) -> None:
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import describe_int8, exported_int8, quantize_static_int8
    from vitkit.inference.smooth import SMOOTH_ALPHA

    model, src, calib = planted
    plain = quantize_static_int8(src, tmp_path / "plain.onnx", calib, smooth_quant=None)
    smooth = quantize_static_int8(src, tmp_path / "smooth.onnx", calib)  # SmoothQuant is the default
    a0, _, e0 = int8_against_fp32(model, exported_runner(plain))
    a1, drop, e1 = int8_against_fp32(model, exported_runner(smooth))
    # the outlier channel's range leaves a few int8 levels for the other channels: the plain graph is far off
    assert a0 < 0.96 and a1 >= 0.98 and drop < 0.02, (a0, a1, drop)
    assert e1 < e0 / 3, (e0, e1)
    # 8-bit u8 weights: the smoothed weights' wider channel ranges lose less than on 7-bit s8
    u8 = quantize_static_int8(src, tmp_path / "u8.onnx", calib, grid="u8")
    a2, _, e2 = int8_against_fp32(model, exported_runner(u8))
    assert e2 < e1 and a2 >= a1 - 0.005, (e1, e2, a1, a2)
    # the recipe is stored in the file and said from it
    assert exported_int8(smooth)["smooth_quant"] == SMOOTH_ALPHA and exported_int8(smooth)["smoothed"] == 4
    assert exported_int8(plain)["smooth_quant"] is None and exported_int8(plain)["grid"] == "w7"
    said = describe_int8(exported_int8(smooth))
    assert f"SmoothQuant alpha {SMOOTH_ALPHA} folded into 4 LayerNorms" in said and "s8 weights on 7 bits" in said


def test_smoothing_refuses_a_bad_alpha_and_leaves_a_graph_without_layernorms_as_it_is(planted, tmp_path) -> None:
    from vitkit.inference.export import INPUT_NAME
    from vitkit.inference.smooth import smooth_onnx

    _, src, calib = planted
    with pytest.raises(ValueError, match="alpha is between 0 and 1, got 1.5"):
        smooth_onnx(src, tmp_path / "s.onnx", calib, INPUT_NAME, alpha=1.5)
    g = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                               [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    onnx.save(onnx.helper.make_model(g), str(tmp_path / "relu.onnx"))
    assert smooth_onnx(tmp_path / "relu.onnx", tmp_path / "s.onnx", torch.zeros(2, 4), "x") == {}
    assert [n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node] == ["Relu"]


def test_export_on_the_u8_grid_records_it_and_predict_says_the_recipe(tmp_path, saved_digits) -> None:
    from onnx import numpy_helper

    from vitkit.inference.export import exported_int8

    model_dir, imgs = saved_digits
    out = tmp_path / "m.onnx"
    r = run_main("export", str(model_dir), "--out", str(out), "--precision", "int8", "--calibrate", str(imgs),
                 "--int8-grid", "u8", "--no-check")
    assert r.returncode == 0, r.stderr
    assert "int8 recipe: grid u8: u8 weights and activations on 8 bits" in r.stdout and "SmoothQuant alpha" in r.stdout
    doc = exported_int8(tmp_path / "m.int8.onnx")
    assert doc["grid"] == "u8" and doc["smoothed"] == 4
    g = onnx.load(str(tmp_path / "m.int8.onnx")).graph
    w = [numpy_helper.to_array(t) for t in g.initializer if t.name.endswith("weight_quantized")]
    assert w and all(x.dtype == np.uint8 for x in w) and max(int(x.max()) - int(x.min()) for x in w) > 128
    p = run_main("predict", str(imgs), "--model", str(tmp_path / "m.int8.onnx"), "--output", str(tmp_path / "p.jsonl"))
    assert p.returncode == 0, p.stderr
    assert "int8 recipe: grid u8" in p.stderr, p.stderr
    # what cannot take a grid is refused by name
    for args, says in ((("export", str(model_dir), "--out", str(tmp_path / "d.onnx"), "--precision", "int8",
                         "--int8-grid", "u8"), "--int8-grid chooses the grid of static int8, which is calibrated"),
                       (("predict", str(imgs), "--model", str(model_dir), "--runtime", "openvino", "--precision",
                         "int8", "--calibrate", str(imgs), "--int8-grid", "u8"), "--int8-grid is onnxruntime's"),
                       (("predict", str(imgs), "--model", str(tmp_path / "m.int8.onnx"), "--int8-grid", "w7",
                         "--precision", "int8", "--calibrate", str(imgs)), "is already exported")):
        assert_one_line_error(run_main(*args), says)
