"""Mixed-precision int8 (`vitkit.inference.mixed`): the layers with the largest measured int8 error kept in float,
really float in the graph, recorded in the export and said by every command; agreement with fp32 no worse than the
all-int8 graph's; what cannot take it refused by name."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tests.helpers import digits_test_tensors, trained_digits_vit
from tests.inputs import assert_one_line_error, run_main
from vitkit.inference.mixed import KeepFloat, keep_float, layer_errors, parse_keep_float

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

PLANTED = "blocks.1.mlp.fc2"


def planted_outlier_model() -> torch.nn.Module:
    """The trained digits ViT with one hidden unit of the last MLP scaled up 30x before the GELU (and its fc2 column
    down 30x): a rare large activation at `PLANTED`'s input, as DINOv2's late blocks have, in an otherwise
    unchanged model."""
    model = copy.deepcopy(trained_digits_vit())
    mlp = model.blocks[1].mlp
    with torch.no_grad():
        mlp.fc1.weight[0] *= 30
        mlp.fc1.bias[0] *= 30
        mlp.fc2.weight[:, 0] /= 30
    return model.eval()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):  # noqa: ANN201
    """(the planted model, its fp32 ONNX export, 96 calibration digits, the test digits)."""
    from vitkit.inference.export import export_onnx

    model = planted_outlier_model()
    tr, _ = __import__("vitkit.data.digits", fromlist=["load_digits_split"]).load_digits_split()
    pre = model.preprocess
    calib = pre.normalize(pre.resize(tr.images[:96]))
    src = export_onnx(model, tmp_path_factory.mktemp("mixed") / "m.onnx")
    return model, src, calib, digits_test_tensors(model)[0]


def _float_matmuls(path) -> set[str]:  # noqa: ANN001
    """Layers whose MatMul / Conv takes its weight as a float initializer (not through a DequantizeLinear)."""
    from vitkit.inference.export import layer_name

    g = onnx.load(str(path)).graph
    weights = {t.name for t in g.initializer}
    return {layer_name(n.name) for n in g.node if n.op_type in ("MatMul", "Conv") and n.input[1] in weights}


def test_the_planted_outlier_layer_is_measured_worst_kept_float_and_agreement_improves(planted, tmp_path) -> None:
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import exported_int8, quantisable_layers, quantize_static_int8

    model, src, calib, x = planted
    layers = quantisable_layers(src)
    assert PLANTED in layers and "patch_embed.proj" in layers and "blocks.0.attn.qkv" in layers
    err = layer_errors(model, calib, layers)
    assert next(iter(err)) == PLANTED, err  # measured: its u8 step is 30x wider than its typical values
    mixed = keep_float(model, calib, 1, layers)
    assert mixed.layers == (PLANTED,) and "int8 alone moves the output most" in mixed.rule
    every = quantize_static_int8(src, tmp_path / "all.onnx", calib)
    part = quantize_static_int8(src, tmp_path / "mixed.onnx", calib, keep_float=mixed)
    # the kept layer's MatMul takes its float weight; every other Linear a dequantised int8 one (the head is the
    # graph's last MatMul, float in both)
    assert _float_matmuls(part) - _float_matmuls(every) == {PLANTED}
    assert PLANTED not in _float_matmuls(every)
    doc = exported_int8(part)
    assert doc["keep_float"] == [PLANTED] and doc["rule"] == mixed.rule and PLANTED in doc["errors"]
    assert exported_int8(every)["keep_float"] == []
    with torch.no_grad():
        ref = model(x)
    res = {}
    for name, path in (("all", every), ("mixed", part)):
        got = exported_runner(path)(x)
        res[name] = ((got.argmax(-1) == ref.argmax(-1)).float().mean().item(), (got - ref).abs().mean().item())
    # 450 test digits: keeping the one layer that carries the error agrees with fp32 at least as often, and its
    # logits are closer (measured: mean |dlogit| several times smaller)
    assert res["mixed"][0] >= res["all"][0] and res["mixed"][1] < 0.7 * res["all"][1], res
    with pytest.raises(ValueError, match="blocks.9.mlp.fc2 not among the graph's quantisable layers"):
        quantize_static_int8(src, tmp_path / "x.onnx", calib, keep_float=("blocks.9.mlp.fc2",))


def test_named_layers_dynamic_int8_and_the_rules_refusals(planted, tmp_path) -> None:
    from vitkit.inference.export import exported_int8, quantisable_layers, quantize_int8

    model, src, calib, _ = planted
    layers = quantisable_layers(src)
    named = keep_float(model, None, ("blocks.0.mlp.fc1", PLANTED), layers)
    assert named == KeepFloat(("blocks.0.mlp.fc1", PLANTED), "named by the user")
    q = quantize_int8(src, tmp_path / "dyn.onnx", named)  # dynamic int8 takes named layers (no images needed)
    g = onnx.load(str(q)).graph
    kept = {n.name for n in g.node if n.op_type == "MatMul"}
    assert {"/blocks.0/mlp/fc1/MatMul", "/blocks.1/mlp/fc2/MatMul"} <= kept
    assert "/blocks.0/attn/qkv/MatMul" not in kept  # quantised (a DynamicQuantizeMatMul / MatMulInteger now)
    assert exported_int8(q)["rule"] == "named by the user"
    with pytest.raises(ValueError, match="give --calibrate DIR"):
        keep_float(model, None, 2, layers)
    with pytest.raises(ValueError, match=f"the graph has {len(layers)} quantisable layers"):
        keep_float(model, calib, len(layers) + 1, layers)
    with pytest.raises(ValueError, match="blocks.7.attn.qkv not among"):
        keep_float(model, calib, ("blocks.7.attn.qkv",), layers)
    assert parse_keep_float("3") == 3 and parse_keep_float(None) == 0
    assert parse_keep_float("blocks.1.mlp.fc2, head") == ("blocks.1.mlp.fc2", "head")
    with pytest.raises(ValueError, match="neither a count nor a layer name"):
        parse_keep_float("blocks/1")


def test_export_records_the_choice_and_predict_honours_and_says_it(tmp_path, saved_digits) -> None:
    model_dir, imgs = saved_digits
    out = tmp_path / "m.onnx"
    r = run_main("export", str(model_dir), "--out", str(out), "--precision", "int8", "--calibrate", str(imgs),
                 "--int8-keep-float", "2")
    assert r.returncode == 0, r.stderr
    said = next(ln for ln in r.stdout.splitlines() if ln.startswith("int8 mixed precision: layers kept in float: "))
    from vitkit.inference.export import exported_int8

    doc = exported_int8(tmp_path / "m.int8.onnx")
    assert len(doc["keep_float"]) == 2 and ", ".join(doc["keep_float"]) in said and "calibration images" in said
    p = run_main("predict", str(imgs), "--model", str(tmp_path / "m.int8.onnx"), "--output",
                 str(tmp_path / "p.jsonl"))
    assert p.returncode == 0, p.stderr
    assert f"layers kept in float: {', '.join(doc['keep_float'])}" in p.stderr, p.stderr
    assert "int8, 2 layers kept in float" in p.stderr
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(rows) == 100
    # predict building its own int8 graph: the same rule, said on stderr
    q = run_main("predict", str(imgs), "--model", str(model_dir), "--runtime", "onnxruntime", "--precision", "int8",
                 "--calibrate", str(imgs), "--int8-keep-float", "2", "--output", str(tmp_path / "q.jsonl"))
    assert q.returncode == 0, q.stderr
    assert "int8 mixed precision: layers kept in float: " in q.stderr and "2 layers kept in float" in q.stderr


def test_what_cannot_take_mixed_precision_is_refused_by_name(tmp_path, saved_digits) -> None:
    model_dir, imgs = saved_digits
    out = str(tmp_path / "p.jsonl")
    assert_one_line_error(run_main("predict", str(imgs), "--model", str(model_dir), "--int8-keep-float", "2",
                                   "--output", out), "--int8-keep-float", "precision is fp32")
    assert_one_line_error(run_main("predict", str(imgs), "--model", str(model_dir), "--precision", "int8",
                                   "--runtime", "onnxruntime", "--int8-keep-float", "2", "--output", out),
                          "--int8-keep-float 2", "--calibrate")
    assert_one_line_error(run_main("export", str(model_dir), "--out", str(tmp_path / "m.onnx"), "--int8-keep-float",
                                   "1"), "--int8-keep-float", "--precision int8")
    assert not list(tmp_path.iterdir())  # refused before anything is written
    assert run_main("export", str(model_dir), "--out", str(tmp_path / "m.onnx"), "--precision", "int8",
                    "--no-check").returncode == 0
    assert_one_line_error(run_main("predict", str(imgs), "--model", str(tmp_path / "m.int8.onnx"),
                                   "--int8-keep-float", "1", "--output", out), "already exported",
                          "when exporting")
