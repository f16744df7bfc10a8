"""Inference runtimes and deployment formats: every precision / runtime path and every export agrees with fp32
eager within its stated tolerance; `auto` picks the runtime by what is installed and the job's size, the
precision by the CPU's flags; int8 keeps >= 99% of a trained model's top-1 answers, also when the model was
read from the original code's `.npz` layout; `predict` and `eval` run every path from the command line."""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import pytest
import torch

import vitkit
from tests.helpers import digits_model, trained_digits_vit
from vitkit.cli import main
from vitkit.data.digits import load_digits_split
from vitkit.inference.runtime import AUTO_MIN_IMAGES, build_predictor, resolve_runtime, runtime_available
from vitkit.utils.precision import resolve as resolve_precision

pytest.importorskip("onnxruntime")
OPENVINO = runtime_available("openvino")


def test_auto_runtime_follows_what_is_installed_and_the_job() -> None:
    # a CPU kind the speed table has no rows for: auto takes BACKENDS' order (the table's choices: test_export_openvino_int8)
    everything = functools.partial(resolve_runtime, available=lambda name: True, isa="other")
    assert everything("auto", "fp32")[0] == "openvino"
    assert everything("auto", "bf16")[0] == "openvino"
    assert everything("auto", "int8")[0] == "onnxruntime"
    runtime, why = everything("auto", "fp32", n_images=AUTO_MIN_IMAGES - 1)
    assert runtime == "torch" and "would cost more than it saves" in why
    assert everything("auto", "int8", n_images=3)[0] == "onnxruntime"  # torch runs no int8: small jobs too
    only_ort = functools.partial(resolve_runtime, available=lambda name: name == "onnxruntime", isa="other")
    assert only_ort("auto", "fp32")[0] == "onnxruntime" and only_ort("auto", "bf16")[0] == "torch"
    nothing = functools.partial(resolve_runtime, available=lambda name: False, isa="other")
    assert nothing("auto", "fp32") == ("torch", "no measurement for other CPUs in runtime_speeds.json: BACKENDS' order")
    with pytest.raises(ValueError, match=r"int8 needs onnxruntime: pip install 'vitkit\[onnx\]'"):
        nothing("auto", "int8")
    with pytest.raises(ValueError, match="--runtime openvino is not installed"):
        nothing("openvino", "fp32")
    with pytest.raises(ValueError, match="--runtime torch does not run int8 .* int8 runs on openvino, onnxruntime"):
        everything("torch", "int8")
    with pytest.raises(ValueError, match="--runtime onnxruntime does not run bf16"):
        everything("onnxruntime", "bf16")
    assert everything("auto", "bf16", device="cuda")[0] == "torch"
    with pytest.raises(ValueError, match="int8 runs on the CPU"):
        everything("auto", "int8", device="cuda")
    # from Python: "auto" is resolved by build_predictor itself, and the choices are logged
    said: list[str] = []
    net = vitkit.build_predictor(digits_model(), "auto", "auto", n_images=10, log=said.append)
    assert (net.runtime, net.precision) == ("torch", resolve_precision("auto")[0])
    assert said[-1].startswith(f"precision: {net.precision} (") and "would cost more than it saves" in said[-1]
    # the precision is the CPU's to decide, never int8 by itself
    assert resolve_precision("auto", "cpu", flags={"avx512_vnni", "amx_int8"})[0] == "fp32"
    assert resolve_precision("int8") == ("int8", "asked for")


def compiled_graphs() -> int:
    """How many graphs torch.compile has compiled in this process (torch._dynamo, imported here on first use: it
    costs seconds, and only the compiling tests need it)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


PATHS = [  # runtime, precision, compile, max |dlogit| / max |logit| allowed, top-1 agreement required
    ("torch", "fp32", False, 1e-5, 1.0),  # oneDNN's fused blocks (inference/cpu_fused.py): fp32 rounding
    ("torch", "fp32", True, 1e-4, 1.0),
    ("onnxruntime", "fp32", False, 1e-4, 1.0),
    ("openvino", "fp32", False, 1e-4, 1.0),
    ("torch", "bf16", False, 0.05, 0.98),
    ("torch", "bf16-autocast", False, 0.05, 0.98),
    ("openvino", "bf16", False, 0.05, 0.98),
    ("onnxruntime", "int8", False, 0.15, 0.99),
]


@pytest.mark.parametrize("runtime,precision,compile_,tol,agree", PATHS,
                         ids=[f"{r}-{p}{'-compile' if c else ''}" for r, p, c, _, _ in PATHS])
def test_every_path_agrees_with_fp32_eager(runtime: str, precision: str, compile_: bool, tol: float,
                                           agree: float) -> None:
    if runtime == "openvino" and not OPENVINO:
        pytest.skip("openvino is not installed")
    model = trained_digits_vit()
    _, test = load_digits_split()
    x = model.preprocess(test.images)
    with torch.no_grad():
        ref = model(x)
    if compile_:  # dynamo as in a fresh process: compiled graphs are kept per code object, shared by every
        torch._dynamo.reset()  # instance of a class, and another test's compile of a ViT here would be counted or found
    graphs = compiled_graphs() if compile_ else 0
    net = build_predictor(model, precision, runtime, compile_)
    batches = x.split(128)  # batches of several sizes through one dynamic-batch graph
    if compile_:  # the first batch compiles: its generated code kept
        from torch._inductor.utils import run_and_get_code  # torch._inductor: imported by the compile already

        first, codes = run_and_get_code(net, batches[0])
        got = torch.cat([first, *(net(b) for b in batches[1:])])
    else:
        got = torch.cat([net(b) for b in batches])
    assert got.dtype == torch.float32 and got.shape == ref.shape
    if compile_:  # one compile: the batch dimension is dynamic from the first batch (runtime.batch_dynamic), not a
        assert compiled_graphs() - graphs == 1  # graph for 128 and a second when the short last batch (66) comes
    err = (got - ref).abs().max().item() / ref.abs().max().item()
    same = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"{net.description}: max |dlogit| / max |logit| {err:.1e}, top-1 agreement {same:.4f}")
    assert err <= tol and same >= agree, (err, same)
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left as it was
    if compile_:
        frozen_graph_contract(net, model, batches[0], first, "\n".join(codes))


def frozen_graph_contract(net: torch.nn.Module, model: torch.nn.Module, x: torch.Tensor, first: torch.Tensor,
                          code: str) -> None:
    """`build_predictor(compile=True)` runs inductor's frozen graph (runtime.FrozenCompiled): the weights are
    constants of the generated code, whose only inputs are the batch size and the images (unfrozen: every weight is
    one more; a LoRA model is compiled merged, one matmul per Linear: the composition matrix's compile cell). The
    caller's model changed afterwards does not reach it (a snapshot); its own weights changed in place after the
    first call are refused, naming one, rather than answered with the frozen copy."""
    inputs = code.split("def call(self, args):", 1)[1].split("= args", 1)[0].split(",")
    assert len(inputs) == 2 and "_frozen_param" in code and "weights frozen" in net.description, inputs
    kept = {k: v.clone() for k, v in model.state_dict().items()}  # (trained_digits_vit may be a cached object)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert torch.equal(net(x), first)
    model.load_state_dict(kept)
    name, weight = list(net.module.named_parameters())[-1]
    with torch.no_grad():
        weight.mul_(2.0)
    with pytest.raises(RuntimeError, match=f"{name.removeprefix('model.')} changed after the compiled"):
        net(x)


def test_int8_keeps_the_answers_of_a_model_read_from_the_released_npz_layout(tmp_path: Path) -> None:
    model = trained_digits_vit()
    npz = vitkit.save_pretrained(model, tmp_path / "released.npz", format="npz")
    loaded = vitkit.load_pretrained(npz).eval()
    _, test = load_digits_split()
    x = model.preprocess(test.images)
    with torch.no_grad():
        ref = model(x)
    got = build_predictor(loaded, "int8", "onnxruntime")(x)
    labels = torch.from_numpy(test.labels)
    same = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    acc, ref_acc = ((v.argmax(-1) == labels).float().mean().item() for v in (got, ref))
    print(f"int8 from .npz: top-1 agreement {same:.4f}, accuracy {acc:.4f} (fp32 {ref_acc:.4f})")
    assert same >= 0.99 and ref_acc > 0.8 and abs(acc - ref_acc) <= 0.01


def test_predict_and_eval_run_int8_and_name_their_choices(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    vitkit.save_pretrained(trained_digits_vit(), tmp_path / "m")
    _, test = load_digits_split()
    from PIL import Image

    files = []
    for i in range(40):
        f = tmp_path / "imgs" / f"{i:03d}.png"
        f.parent.mkdir(exist_ok=True)
        Image.fromarray((test.images[i, 0].numpy() * 255).round().astype("uint8")).save(f)
        files.append(f)
    tops = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / f"{precision}.csv"
        assert main(["predict", str(tmp_path / "imgs"), "--model", str(tmp_path / "m"), "--precision", precision,
                     "--output", str(out), "--no-progress"]) == 0
        err = capsys.readouterr().err
        tops[precision] = [r[1] for r in list(csv.reader(out.open()))[1:]]
        if precision == "int8":
            assert "runtime: onnxruntime, int8" in err and "exported and compiled the model" in err
        else:  # 40 images: not worth an export, and the choice says so
            assert "runtime: torch eager, fp32" in err and "would cost more than it saves" in err
    assert len(tops["fp32"]) == 40 and sum(a == b for a, b in zip(tops["fp32"], tops["int8"])) >= 39
    top1 = {}
    for args in (["--precision", "fp32"], ["--precision", "int8"], ["--runtime", "onnxruntime"]):
        assert main(["eval", "--model", str(tmp_path / "m"), *args]) == 0
        top1[" ".join(args)] = float(capsys.readouterr().out.split("top-1: ")[1].split("%")[0])
    assert top1["--runtime onnxruntime"] == top1["--precision fp32"] > 80
    assert abs(top1["--precision int8"] - top1["--precision fp32"]) <= 1.0, top1
    assert main(["eval", "--model", str(tmp_path / "m"), "--runtime", "torch", "--precision", "int8"]) == 2
    assert "--runtime torch does not run int8" in capsys.readouterr().err


@pytest.mark.slow
def test_aoti_and_openvino_exports_match_pytorch(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """`vitkit export --format aoti` (torch.export + AOTInductor, a C++ build: ~20 s here) and `--format openvino`
    write files that reproduce the PyTorch logits at several batch sizes, without the model's code."""
    # AOTInductor's precompiled headers off for the suite's one AOTInductor build: on CI's fresh machine it would
    # build two (its wrapper's and its kernels', ~140 MB each, under the temp folder) to compile one file each, once:
    # 56 -> 40 CPU s for this test there (benchmarks/results/suite_durations.md, Session 22); where a previous
    # run left them, compiling without them costs ~11 CPU s more
    monkeypatch.setattr(torch._inductor.config.aot_inductor, "precompile_headers", False)
    # and its C++ wrapper (the glue that calls the kernels: no arithmetic of its own; the kernels keep their -O3)
    # built at -O0 instead of -O1: its compile 11.5 -> 8 CPU s, the same kernels and the same answers
    monkeypatch.setattr(torch._inductor.config.aot_inductor, "compile_wrapper_opt_level", "O0")
    model = trained_digits_vit()
    vitkit.save_pretrained(model, tmp_path / "m")
    formats = ["aoti"] + (["openvino"] if OPENVINO else [])
    from vitkit.inference.backends import exported_runner

    x = model.preprocess(load_digits_split()[1].images[:37])
    with torch.no_grad():
        ref = model(x)
    for fmt in formats:
        assert main(["export", str(tmp_path / "m"), "--format", fmt]) == 0
        out = capsys.readouterr().out
        path = tmp_path / "m" / {"aoti": "model.pt2", "openvino": "model.xml"}[fmt]
        assert f"wrote {path}" in out and "top-1 agreement 1.000" in out
        run = exported_runner(path)
        for b in (1, 5, 37):
            err = (run(x[:b]) - ref[:b]).abs().max().item()
            assert err < 1e-4 * ref.abs().max().item(), (fmt, b, err)
    # the compiled .pt2 through `predict --model m.pt2` and `vitkit.embed` (its own preprocessing and labels)
    from PIL import Image

    for i in range(6):
        (tmp_path / "imgs").mkdir(exist_ok=True)
        Image.fromarray((load_digits_split()[1].images[i, 0].numpy() * 255).round().astype("uint8")).save(
            tmp_path / "imgs" / f"{i}.png")
    rows = {}
    for src in ("m", "m/model.pt2"):
        out = tmp_path / f"{src.replace('/', '_')}.csv"
        assert main(["predict", str(tmp_path / "imgs"), "--model", str(tmp_path / src), "--output", str(out),
                     "--no-progress"]) == 0
        rows[src] = list(csv.reader(out.open()))[1:]
    assert "runtime: aoti, fp32 (model.pt2: the file's own)" in capsys.readouterr().err
    assert [r[1] for r in rows["m/model.pt2"]] == [r[1] for r in rows["m"]] and len(rows["m"]) == 6
    assert max(abs(float(a[2]) - float(b[2])) for a, b in zip(rows["m/model.pt2"], rows["m"])) < 1e-4
    torch.testing.assert_close(torch.from_numpy(vitkit.embed(tmp_path / "m" / "model.pt2", tmp_path / "imgs",
                                                             feature="logits").features),
                               torch.from_numpy(vitkit.embed(model, tmp_path / "imgs", feature="logits").features),
                               atol=1e-4, rtol=1e-4)
    assert main(["export", str(tmp_path / "m"), "--format", "aoti", "--precision", "int8"]) == 2


def test_auto_falls_back_to_torch_when_a_runtime_refuses_the_model(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """A model the exporter cannot handle: `--runtime auto` says so and predicts in torch; an explicit runtime, or
    int8 (which only onnxruntime runs), is refused with the reason, as one line."""
    import vitkit.inference.backends
    import vitkit.inference.runtime

    vitkit.save_pretrained(trained_digits_vit(), tmp_path / "m")
    _, test = load_digits_split()
    from PIL import Image

    monkeypatch.setattr(vitkit.inference.runtime, "AUTO_MIN_IMAGES", 4)  # a job big enough for auto to export
    for i in range(6):
        f = tmp_path / "imgs" / f"{i:03d}.png"
        f.parent.mkdir(exist_ok=True)
        Image.fromarray((test.images[i, 0].numpy() * 255).round().astype("uint8")).save(f)

    def refuse(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("Exporting the operator 'aten::made_up' to ONNX opset version 17 is not supported")

    monkeypatch.setattr(vitkit.inference.backends, "export_onnx", refuse)
    # every runtime installed but openvino where it is not (a test extra: without it auto goes on to onnxruntime)
    monkeypatch.setattr(vitkit.inference.runtime, "runtime_available", lambda name: name != "openvino" or OPENVINO)
    monkeypatch.setattr(vitkit.inference.runtime, "speed_table", lambda path=None: ())  # auto in BACKENDS' order
    base = ["predict", str(tmp_path / "imgs"), "--model", str(tmp_path / "m"), "--no-progress",
            "--output", str(tmp_path / "p.csv"), "--overwrite"]  # each call replaces the last table
    assert main([*base, "--precision", "fp32"]) == 0
    err = capsys.readouterr().err
    assert "could not run this model (Exporting the operator 'aten::made_up'" in err
    assert f"runtime: torch eager, fp32 ({'openvino' if OPENVINO else 'onnxruntime'} failed on this model)" in err
    for extra in (["--precision", "fp32", "--runtime", "onnxruntime"], ["--precision", "int8"]):
        assert main([*base, *extra]) == 2
        assert "runtime could not run this model (RuntimeError: Exporting the operator" in capsys.readouterr().err


def test_a_predictor_stays_in_inference_mode_after_an_evaluation() -> None:
    """`evaluate_batches` puts a model back in the mode it found it in; a Predictor is found in eval mode, so its
    model's dropout stays off afterwards (it was switched on when the Predictor started in training mode)."""
    from vitkit.inference.evaluate import evaluate_batches

    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, dropout=0.5)
    net = build_predictor(model, "fp32", "torch")
    x, y = torch.randn(4, 1, 16, 16), torch.tensor([0, 1, 2, 3])
    evaluate_batches(net, [(x, y)])
    assert not net.training and not net.module.training
    assert torch.equal(net(x), net(x))  # no dropout draws


def test_predict_embed_and_eval_run_vitkits_own_exports(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`--model m.onnx` (and its int8 file, and OpenVINO's `.xml` where installed) runs on its own runtime with the
    preprocessing and labels stored in it: the same top-1 and probabilities (fp32: within 1e-4; int8: >= 39 of 40
    answers), the same features and the same eval top-1 as the checkpoint; what a fixed graph cannot take (--merge,
    another --img-size, another runtime or precision) is refused by name."""
    import numpy as np
    from PIL import Image

    model = trained_digits_vit()
    vitkit.save_pretrained(model, tmp_path / "m")
    vitkit.save_pretrained(vitkit.load_pretrained(tmp_path / "m", num_classes=0), tmp_path / "backbone")
    _, test = load_digits_split()
    for i in range(40):
        f = tmp_path / "imgs" / f"{i:03d}.png"
        f.parent.mkdir(exist_ok=True)
        Image.fromarray((test.images[i, 0].numpy() * 255).round().astype("uint8")).save(f)
    assert main(["export", str(tmp_path / "m"), "--out", str(tmp_path / "m.onnx"), "--precision", "int8",
                 "--no-check"]) == 0
    assert main(["export", str(tmp_path / "backbone"), "--out", str(tmp_path / "b.onnx"), "--no-check"]) == 0
    exports = ["m.onnx", "m.int8.onnx"]
    if OPENVINO:
        assert main(["export", str(tmp_path / "m"), "--format", "openvino", "--out", str(tmp_path / "m.xml"),
                     "--no-check"]) == 0
        exports.append("m.xml")
    capsys.readouterr()

    def predicted(src: str) -> list[list[str]]:
        out = tmp_path / f"{Path(src).name}.csv"
        assert main(["predict", str(tmp_path / "imgs"), "--model", src, "--output", str(out), "--no-progress",
                     "--runtime", "torch" if Path(src).is_dir() else "auto"]) == 0
        return list(csv.reader(out.open()))[1:]

    def top1(src: str) -> float:
        assert main(["eval", "--model", src]) == 0
        return float(capsys.readouterr().out.split("top-1: ")[1].split("%")[0])

    def embedded(src: str, pool: str) -> np.ndarray:
        out = tmp_path / f"{Path(src).name}.{pool}.npz"
        assert main(["embed", str(tmp_path / "imgs"), "--model", src, "--output", str(out), "--pool", pool,
                     "--no-progress", "--runtime", "torch" if Path(src).is_dir() else "auto"]) == 0
        return np.load(out, allow_pickle=False)["features"]

    ref, ref_top1, ref_logits = predicted(str(tmp_path / "m")), top1(str(tmp_path / "m")), embedded(
        str(tmp_path / "m"), "logits")
    assert ref_top1 > 80 and ref[0][1] in model.preprocess.labels
    for name in exports:
        src = str(tmp_path / name)
        rows = predicted(src)
        err = capsys.readouterr().err
        assert f"{'openvino' if name.endswith('.xml') else 'onnxruntime'}, {'int8' if 'int8' in name else 'fp32'}" \
               in err, err
        same = sum(a[1] == b[1] for a, b in zip(rows, ref))
        if "int8" in name:
            assert same >= 39 and abs(top1(src) - ref_top1) <= 1.0
        else:
            assert same == 40
            assert max(abs(float(a[2]) - float(b[2])) for a, b in zip(rows, ref)) < 1e-4
            assert top1(src) == ref_top1
            np.testing.assert_allclose(embedded(src, "logits"), ref_logits, atol=1e-4, rtol=1e-4)
    pooled = embedded(str(tmp_path / "backbone"), "pooled")
    np.testing.assert_allclose(embedded(str(tmp_path / "b.onnx"), "pooled"), pooled, atol=1e-4, rtol=1e-4)
    # the Python API takes the same exports (it said "not a checkpoint format"), and refuses what the graph lacks
    api = vitkit.embed(tmp_path / "m.onnx", tmp_path / "imgs", feature="logits")
    np.testing.assert_allclose(api.features, ref_logits, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(vitkit.embed(str(tmp_path / "b.onnx"), [tmp_path / "imgs"]).features, pooled,
                               atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="graph outputs 'logits'"):
        vitkit.embed(tmp_path / "m.onnx", tmp_path / "imgs")
    with pytest.raises(ValueError, match="run by onnxruntime"):
        vitkit.embed(tmp_path / "m.onnx", tmp_path / "imgs", feature="logits", runtime="torch")
    capsys.readouterr()
    onnx_file = str(tmp_path / "m.onnx")
    for args, says in ((["--merge", "2"], "--merge"), (["--img-size", "32"], "exported at 16x16"),
                       (["--runtime", "torch"], "run by onnxruntime"), (["--precision", "int8"], "fp32 onnx graph"),
                       (["--num-heads", "3"], "--num-heads")):
        assert main(["predict", str(tmp_path / "imgs"), "--model", onnx_file, *args]) == 2, args
        assert says in capsys.readouterr().err, args
    assert main(["embed", str(tmp_path / "imgs"), "--model", onnx_file, "-o", str(tmp_path / "x.npz")]) == 2
    assert "graph outputs 'logits'" in capsys.readouterr().err
