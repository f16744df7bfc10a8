"""OpenVINO int8 by NNCF's post-training quantisation (`quantize_openvino_int8`), calibrated on the user's images:
through predict / embed / export (`--runtime openvino --precision int8 --calibrate DIR`), its agreement with fp32 on
real digit images, the refusals of what does not combine, and `--runtime auto`'s choice from the measured table."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import digits_test_tensors, int8_against_fp32, trained_digits_vit
from tests.inputs import assert_one_line_error, run_main
from vitkit.cli import main

# installed, not imported here: NNCF costs ~1 CPU s to import, paid at collection by every worker otherwise (the
# tests import OpenVINO where they read an IR; vitkit imports NNCF where it quantises)
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("nncf", "openvino")),
                                reason="needs nncf and openvino")


@pytest.fixture(scope="module")
def nncf_inputs(saved_digits: tuple[Path, Path], digits_openvino_int8: tuple[Path, Path]):  # noqa: ANN201
    """(the trained digits model's 100 calibration images as `--calibrate` reads them, a runner of the all-int8 IR
    `digits_openvino_int8`): read and compiled once for the two NNCF tests below, which both use them."""
    from vitkit.inference.backends import exported_runner
    from vitkit.inference.predict import calibration_images

    return (calibration_images([str(saved_digits[1])], trained_digits_vit().preprocess),
            exported_runner(digits_openvino_int8[1]))


def test_nncf_int8_quantises_the_matmuls_and_agrees_with_fp32(tmp_path, nncf_inputs,  # noqa: ANN001
                                                             digits_openvino_int8) -> None:
    import openvino as ov

    from vitkit.inference.export import _int8_tags, exported_output, exported_preprocess, quantize_openvino_int8

    model = trained_digits_vit()
    calib, run_q = nncf_inputs
    xml, q = digits_openvino_int8
    assert q.with_suffix(".bin").is_file()
    ir = ov.Core().read_model(str(q))
    fq = [n for n in ir.get_ops() if n.get_type_name() == "FakeQuantize"]
    fed = {t.get_node().get_friendly_name() for n in fq for o in n.outputs() for t in o.get_target_inputs()
           if t.get_node().get_type_name() == "MatMul"}
    n_matmul = sum(n.get_type_name() == "MatMul" for n in ir.get_ops())
    assert len(fed) >= n_matmul - 1, (len(fed), n_matmul)  # every Linear's MatMul takes int8 (quantised) inputs
    assert not any(n.get_type_name() == "FakeQuantize" for n in ov.Core().read_model(str(xml)).get_ops())
    assert exported_preprocess(q) == model.preprocess  # vitkit's metadata travels to the int8 IR
    assert exported_output(q) == {**exported_output(xml), "precision": "int8"}  # and what it outputs, now in int8
    # read from the IR as OpenVINO read it for NNCF: the same tags as from the file
    assert _int8_tags(xml, ov.Core().read_model(str(xml))) == _int8_tags(xml) != []
    agree, drop, largest = int8_against_fp32(model, run_q)
    # 450 test digits never seen in calibration: NNCF's int8 keeps >= 97% of fp32's answers (measured 98.2%) and
    # its accuracy; ranges fitted to other data, or weights rounded to a wrong scale, fall far below
    assert agree >= 0.97 and drop <= 0.02, (agree, drop)
    assert largest > 1e-4  # int8 really computed: not the fp32 graph again
    with pytest.raises(ValueError, match="at least 8 calibration images"):
        quantize_openvino_int8(xml, tmp_path / "x.xml", calib[:3])
    with warnings.catch_warnings():  # the warning raised where it is issued, before a quantisation (a few-image
        warnings.simplefilter("error", UserWarning)  # one runs in test_vitkit_composition's openvino int8 cells)
        with pytest.raises(UserWarning, match="calibrated on 10 images: .* a few hundred"):
            quantize_openvino_int8(xml, tmp_path / "x.xml", calib[:10])


def test_nncf_keeps_the_named_layers_float_and_records_them(tmp_path, nncf_inputs,  # noqa: ANN001
                                                           digits_openvino_int8) -> None:
    import openvino as ov

    from vitkit.inference.backends import exported_runner
    from vitkit.inference.export import exported_int8, quantisable_layers, quantize_openvino_int8
    from vitkit.inference.mixed import KeepFloat, keep_float

    model = trained_digits_vit()
    calib, run_every = nncf_inputs
    xml, every = digits_openvino_int8  # NNCF's int8 of every layer, calibrated on `calib`
    layers = quantisable_layers(xml)
    # the same names as the ONNX graph's: OpenVINO splits the patch embedding's Conv into a Convolution
    # ".../Conv/WithoutBiases" and an Add, still layer "patch_embed.proj"
    assert "blocks.1.mlp.fc2" in layers and "blocks.0.attn.qkv" in layers and "patch_embed.proj" in layers
    mixed = keep_float(model, calib, 3, layers)  # the 3 layers measured to move the output most
    # one NNCF quantisation for both kinds of layer NNCF is told to leave in float (its ignored scope): the measured
    # Linears' MatMuls and the patch embedding's Convolution (each a ~1.5 CPU s quantisation of its own before)
    kept = KeepFloat(tuple(dict.fromkeys((*mixed.layers, "patch_embed.proj"))),
                     f"{mixed.rule}; and the patch embedding, named", mixed.errors)
    with pytest.raises(ValueError, match="blocks.9.mlp.fc2 not among the graph's quantisable layers"):
        quantize_openvino_int8(xml, tmp_path / "x.xml", calib, ("blocks.9.mlp.fc2",))  # names alone: checked too
    part = quantize_openvino_int8(xml, tmp_path / "mixed.xml", calib, kept)

    def quantised(path: Path) -> set[str]:
        """Layers whose MatMul / Convolution takes a FakeQuantize'd input (int8 in OpenVINO's CPU plugin)."""
        from vitkit.inference.export import layer_name

        ir = ov.Core().read_model(str(path))
        return {layer_name(n.get_friendly_name()) for n in ir.get_ops() if n.get_type_name() in ("MatMul",
                "Convolution") and any(n.input(i).get_source_output().get_node().get_type_name() == "FakeQuantize"
                                       for i in range(2))}

    assert conv_kept_float(part)  # the patch embedding's Convolution: no FakeQuantize'd input
    assert set(mixed.layers) <= quantised(every)  # int8 in the all-int8 IR ...
    assert not set(kept.layers) & quantised(part)  # ... float in the mixed one, the others still int8
    assert quantised(every) - quantised(part) == set(kept.layers)
    assert exported_int8(part)["keep_float"] == list(kept.layers) and exported_int8(every)["keep_float"] == []
    assert exported_int8(part)["rule"] == kept.rule
    x, _ = digits_test_tensors(model)
    with torch.no_grad():
        ref = model(x)
    agree = {name: (run(x).argmax(-1) == ref.argmax(-1)).float().mean().item()
             for name, run in (("all", run_every), ("mixed", exported_runner(part)))}
    assert agree["mixed"] >= agree["all"] - 1 / 450, agree  # 450 test digits: no worse (one digit of slack: NNCF's
    # bias correction and SmoothQuant are refitted around the float layers)


def conv_kept_float(path: Path) -> bool:
    """Whether the IR at `path` has its one Convolution (the patch embedding) without a FakeQuantize'd input."""
    import openvino as ov

    conv = [n for n in ov.Core().read_model(str(path)).get_ops() if n.get_type_name() == "Convolution"]
    return len(conv) == 1 and all(conv[0].input(i).get_source_output().get_node().get_type_name() != "FakeQuantize"
                                  for i in range(2))


def test_predict_and_embed_run_openvino_int8_and_agree_with_fp32(tmp_path, saved_digits, capsys) -> None:
    model_dir, imgs = saved_digits
    rows = {}
    for name, extra in (("fp32", ["--runtime", "torch", "--precision", "fp32"]),
                        ("int8", ["--runtime", "openvino", "--precision", "int8", "--calibrate", str(imgs)])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["predict", str(imgs), "--model", str(model_dir), "--topk", "1", "--output", str(out),
                     "--no-progress", *extra]) == 0
        rows[name] = [json.loads(line) for line in out.read_text().splitlines()]
    err = capsys.readouterr().err
    assert "openvino, int8 (NNCF post-training quantisation, calibrated on 100 images) (asked for)" in err, err
    assert len(rows["int8"]) == len(rows["fp32"]) == 100
    same = np.mean([a["labels"][0] == b["labels"][0] for a, b in zip(rows["fp32"], rows["int8"])])
    assert same >= 0.95, same  # top-1 agreement with fp32 on the 100 calibration digits
    feats = {}
    for name, extra in (("fp32", ["--runtime", "torch"]),
                        ("int8", ["--runtime", "openvino", "--precision", "int8", "--calibrate", str(imgs)])):
        out = tmp_path / f"{name}.npz"
        assert main(["embed", str(imgs), "--model", str(model_dir), "-o", str(out), "--no-progress", *extra]) == 0
        with np.load(out, allow_pickle=False) as z:
            feats[name] = z["features"]
    a, b = feats["fp32"], feats["int8"]
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    # pooled features of a width-48 model: int8 keeps their direction (mean cosine measured 0.99+); a quantisation
    # whose scales were wrong (or uncalibrated) turns them well below
    assert cos.mean() >= 0.98 and cos.min() >= 0.9, (cos.mean(), cos.min())
    assert not np.allclose(a, b, atol=1e-5)


def test_export_writes_the_int8_ir_beside_and_checks_it_on_the_images(
        digits_openvino_int8: tuple[Path, Path], nncf_inputs) -> None:  # noqa: ANN001
    from vitkit.inference.export import exported_preprocess

    # `vitkit export MODEL --format openvino --out m.xml --precision int8 --calibrate IMAGES` of the trained digits
    # model on its 100 images, exit code 0: suite_fixtures' digits_openvino_int8 (the IR the NNCF tests above read)
    folder = digits_openvino_int8[0].parent
    for f in ("m.xml", "m.bin", "m.int8.xml", "m.int8.bin"):
        assert (folder / f).is_file(), f
    line = next(ln for ln in (folder / "stdout.txt").read_text().splitlines()
                if ln.startswith("openvino int8 vs pytorch"))
    # checked on (32 of) the calibration images, not on noise: at most 3 of them answered otherwise than fp32
    assert "32 of your images" in line and float(line.split("top-1 agreement ")[1]) >= 0.9, line
    pre = exported_preprocess(folder / "m.int8.xml")
    assert pre is not None and pre.img_size == (16, 16)  # runnable by predict --model m.int8.xml (its metadata)
    x = torch.zeros(2, 1, 16, 16)
    assert nncf_inputs[1](x).shape == (2, 10)  # exported_runner(m.int8.xml), compiled once for this module


def test_what_does_not_combine_is_refused(tmp_path, saved_digits) -> None:
    model_dir, imgs = saved_digits
    # NNCF's quantisation is static: no images, no OpenVINO int8 (onnxruntime's dynamic int8 needs none)
    assert_one_line_error(run_main("predict", str(imgs), "--model", str(model_dir), "--runtime", "openvino",
                                   "--precision", "int8", "--output", str(tmp_path / "p.jsonl")),
                          "OpenVINO int8", "--calibrate")
    assert_one_line_error(run_main("export", str(model_dir), "--format", "openvino", "--out", str(tmp_path / "m.xml"),
                                   "--precision", "int8"), "OpenVINO int8", "--calibrate")
    assert_one_line_error(run_main("export", str(model_dir), "--format", "aoti", "--out", str(tmp_path / "m.pt2"),
                                   "--precision", "int8"), "int8", "--format onnx or --format openvino")
    assert not list(tmp_path.iterdir())  # refused before anything is written


def test_auto_takes_the_fastest_measured_runtime_for_this_cpu_kind(monkeypatch) -> None:
    from vitkit.inference import runtime

    rows = ({"isa": "avx2", "runtime": "openvino", "precision": "int8", "calibrated": True, "vs_torch_fp32": 3.1,
             "model": "vit_b16", "batch": 8, "date": "d"},
            {"isa": "avx2", "runtime": "onnxruntime", "precision": "int8", "calibrated": True, "vs_torch_fp32": 1.9,
             "model": "vit_b16", "batch": 8, "date": "d"},
            {"isa": "avx2", "runtime": "onnxruntime", "precision": "int8", "calibrated": False, "vs_torch_fp32": 2.2,
             "model": "vit_b16", "batch": 8, "date": "d"},
            {"isa": "amx", "runtime": "onnxruntime", "precision": "int8", "calibrated": True, "vs_torch_fp32": 9.0,
             "model": "vit_b16", "batch": 8, "date": "d"})
    monkeypatch.setattr(runtime, "speed_table", lambda path=None: rows)
    name, why = runtime.resolve_runtime("auto", "int8", calibrated=True, isa="avx2", available=lambda n: True)
    assert name == "openvino" and "3.10x torch fp32" in why and "onnxruntime 1.90x" in why, why
    name, why = runtime.resolve_runtime("auto", "int8", calibrated=True, isa="amx", available=lambda n: True)
    assert name == "onnxruntime" and "on amx CPUs" in why  # another CPU kind, its own rows
    # no images: OpenVINO int8 cannot run, whatever the table says
    name, why = runtime.resolve_runtime("auto", "int8", isa="avx2", available=lambda n: True)
    assert name == "onnxruntime" and "2.20x" in why
    name, why = runtime.resolve_runtime("auto", "int8", isa="avx2", available=lambda n: n != "openvino",
                                        calibrated=True)
    assert name == "onnxruntime"  # not installed: the next measured
    name, why = runtime.resolve_runtime("auto", "fp32", isa="avx512_vnni", available=lambda n: True)
    assert name == "openvino" and "no measurement for avx512_vnni" in why  # unmeasured: BACKENDS' order
    with pytest.raises(ValueError, match="--calibrate"):
        runtime.resolve_runtime("openvino", "int8", available=lambda n: True)



def test_the_shipped_table_has_this_machines_kind_measured() -> None:
    from vitkit.inference.runtime import SUPPORTED, speed_table
    from vitkit.utils.hardware import ISA_KINDS, isa_kind

    rows = speed_table()
    assert {r["isa"] for r in rows} <= {k for k, _ in ISA_KINDS}
    assert any(r["isa"] == "avx2" and r["runtime"] == "openvino" and r["precision"] == "int8" for r in rows)
    for r in rows:
        assert r["precision"] in SUPPORTED[r["runtime"]] and float(r["vs_torch_fp32"]) > 0, r
        assert {"model", "batch", "machine", "date", "calibrated"} <= set(r), r
    assert isa_kind({"avx2", "fma"}) == "avx2" and isa_kind({"avx2", "avx512_vnni"}) == "avx512_vnni"
    assert isa_kind({"avx512_bf16", "amx_int8"}) == "amx" and isa_kind(set()) == "other"
