"""ONNX export: dynamic batch, onnxruntime parity with PyTorch, int8 quantisation, the CLI."""

from __future__ import annotations

import pytest
import torch

import vitkit
from tests.helpers import trained_digits_vit
from vitkit.cli import main
from vitkit.data.digits import load_digits_split

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from vitkit.inference.backends import check_parity  # noqa: E402
from vitkit.inference.export import export_onnx, onnx_logits, ort_session, quantize_int8  # noqa: E402


def _tiny() -> vitkit.VisionTransformer:
    cfg = vitkit.ViTConfig(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=10)
    model = vitkit.VisionTransformer(cfg).eval()
    torch.nn.init.normal_(model.head.weight, std=0.5)  # the zero-initialised head would make parity trivial
    return model


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):  # noqa: ANN001, ANN201
    """(`_tiny()`, its ONNX export at the default opset): one export (~0.2 CPU s) read by the tests below that check
    the default export of the tiny model. Read only: a test that changes the model changes a copy."""
    torch.manual_seed(0)
    model = _tiny()
    return model, export_onnx(model, tmp_path_factory.mktemp("tiny_onnx") / "m.onnx")


def test_onnx_has_a_dynamic_batch_and_matches_pytorch(tiny_onnx) -> None:  # noqa: ANN001
    import onnx

    model, path = tiny_onnx
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 32, 32]
    r = check_parity(model, path, batch_sizes=(1, 5))
    assert r.max_abs_logit > 0.1  # a real signal, not an all-zero head
    assert r.max_abs_diff < 1e-4 and r.top1_agreement == 1.0


def test_onnx_graph_is_in_the_shape_onnxruntime_fuses(tiny_onnx, tmp_path) -> None:  # noqa: ANN001
    """The tanh GELU is one Gelu node (onnxruntime's FastGelu kernel; at opset 17 it was eight elementwise nodes)
    and the attention's scale a constant (no Shape -> Sqrt at run time), with the same logits as the old graph."""
    import copy

    import onnx

    model, path = copy.deepcopy(tiny_onnx[0]), tiny_onnx[1]
    now = onnx.load(str(path))
    ops = [n.op_type for n in now.graph.node]
    gelus = [n for n in now.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == 2 and "Tanh" not in ops and "Sqrt" not in ops, sorted(set(ops))
    assert [a.s for n in gelus for a in n.attribute if a.name == "approximate"] == [b"tanh", b"tanh"]
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "ort.onnx")  # the graph onnxruntime runs: GELU fused
    onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node].count("FastGelu") == 2
    for m in model.modules():  # the attention as it was exported: SDPA's scale from q's shape, opset 17
        if hasattr(m, "sdpa_scale"):
            m.sdpa_scale = None
    old = export_onnx(model, tmp_path / "old.onnx", opset=17)
    assert "Sqrt" in [n.op_type for n in onnx.load(str(old)).graph.node]
    x = torch.randn(3, 3, 32, 32)
    a, b = (ort_session(p).run(None, {"pixel_values": x.numpy()})[0] for p in (path, old))
    assert abs(a).max() > 0.1 and float(abs(a - b).max()) < 1e-5


def test_export_at_another_resolution(tmp_path) -> None:  # noqa: ANN001
    model = _tiny()
    path = export_onnx(model, tmp_path / "m48.onnx", img_size=48)
    import onnx

    x = torch.randn(2, 3, 48, 48)
    moved = _copy_at(model, 48)
    got = onnx_logits(ort_session(path), x)
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert got.shape == (2, 10) and [d.dim_value for d in dims[1:]] == [3, 48, 48]
    assert (got - moved(x).detach()).abs().max() < 1e-4
    assert (got - model(torch.nn.functional.interpolate(x, size=32)).detach()).abs().max() > 1e-3  # not the 32-px model
    assert model.config.img_size == (32, 32)  # the caller's model is not moved


def _copy_at(model: vitkit.VisionTransformer, size: int) -> vitkit.VisionTransformer:
    import copy

    m = copy.deepcopy(model)
    m.set_img_size(size)
    return m.eval()


def test_int8_quantisation_keeps_the_readmes_tolerances(tmp_path) -> None:  # noqa: ANN001
    """The README's int8 promise on a trained model: logits within 15% of their scale, >= 99% of top-1 answers kept
    (on the digits test split, through the exported file itself)."""
    model = trained_digits_vit()
    path = export_onnx(model, tmp_path / "m.onnx")
    q = quantize_int8(path, tmp_path / "m.int8.onnx")
    _, test = load_digits_split()
    x = model.preprocess(test.images)
    with torch.no_grad():
        ref = model(x)
    got = onnx_logits(ort_session(q), x)
    err = (got - ref).abs().max().item() / ref.abs().max().item()
    same = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert err <= 0.15 and same >= 0.99, (err, same)


def test_benchmark_sessions_do_not_spin(tiny_onnx) -> None:  # noqa: ANN001
    """Timed interleaved with PyTorch, onnxruntime must not busy-wait into PyTorch's turn (that made ONNX
    look 5-179x faster); a serving session keeps onnxruntime's default."""
    path = tiny_onnx[1]
    quiet = ort_session(path, spin=False).get_session_options()
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert quiet.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    default = ort_session(path).get_session_options()
    with pytest.raises(Exception, match="does not have configuration"):  # onnxruntime's default (spinning)
        default.get_session_config_entry("session.intra_op.allow_spinning")


def test_export_command(tmp_path, capsys) -> None:  # noqa: ANN001
    vitkit.save_pretrained(_tiny(), tmp_path / "ckpt")
    out = tmp_path / "out" / "m.onnx"
    assert main(["export", str(tmp_path / "ckpt"), "--out", str(out), "--precision", "int8", "--bench", "--batch", "2"]) == 0
    text = capsys.readouterr().out
    assert out.exists() and out.with_suffix(".int8.onnx").exists()
    assert "onnx fp32 vs pytorch on random inputs, batches (1, 3)" in text and "x pytorch" in text
    int8 = next(ln for ln in text.splitlines() if ln.startswith("onnx int8 vs pytorch"))
    assert "on random inputs" in int8 and "int8 on noise" in int8, int8  # its agreement on noise is flagged


def test_the_tags_are_written_in_one_pass_as_one_at_a_time_wrote_them(tiny_onnx, tmp_path) -> None:  # noqa: ANN001
    """`_tag_onnx` stores several of vitkit's tags in one read and one write of the file (an export's three, an int8
    file's four): the same bytes as writing them one at a time, each replacing its own key's entry in place."""
    import json

    import onnx

    from vitkit.inference.export import MERGE_KEY, META_KEY, OUTPUT_KEY, _tag_onnx, exported_output, output_doc

    model, path = tiny_onnx
    proto = onnx.load(str(path))
    assert [p.key for p in proto.metadata_props] == [META_KEY, OUTPUT_KEY]  # no merging: no merge tag
    assert exported_output(path) == output_doc(model) and json.loads(proto.metadata_props[0].value) == \
        model.preprocess.to_dict()
    proto.metadata_props.add().key = "other.tool"  # someone else's entry, kept
    docs = {META_KEY: '{"a": 1}', MERGE_KEY: "3", OUTPUT_KEY: None, "vitkit.int8": '{"keep_float": []}'}
    for name in ("one.onnx", "each.onnx"):
        onnx.save(proto, str(tmp_path / name))
    _tag_onnx(tmp_path / "one.onnx", docs)
    for key, doc in docs.items():
        _tag_onnx(tmp_path / "each.onnx", {key: doc})
    assert (tmp_path / "one.onnx").read_bytes() == (tmp_path / "each.onnx").read_bytes()
    got = [(p.key, p.value) for p in onnx.load(str(tmp_path / "one.onnx")).metadata_props]
    assert got == [(OUTPUT_KEY, proto.metadata_props[1].value), ("other.tool", ""), (META_KEY, '{"a": 1}'),
                   (MERGE_KEY, "3"), ("vitkit.int8", '{"keep_float": []}')]
