"""Deployment formats, each with a dynamic batch axis and checked against PyTorch: ONNX (fp32, optional
int8 dynamic quantisation, run by onnxruntime), OpenVINO IR (converted from the ONNX graph) and the
PyTorch-native `torch.export` + AOTInductor package (`.pt2`: compiled C++ for this CPU, loaded without
the model's Python code): the writers and readers of each format. The table of backends
(`vitkit.inference.backends`) names them and dispatches by format (`export_model`, `exported_runner`);
`vitkit.bench.exported` times them beside PyTorch; `vitkit.inference.runtime` serves them.

The resolution is fixed in the exported graph: resampling the position embeddings for another
grid is Python-level shape logic that tracing records at the export resolution. To serve another
resolution, export again with `img_size=` (the model's E_pos is resampled first, paper §3.2).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vitkit.inference.mixed import INT8_KEY, KeepFloat, check_known_layers
from vitkit.inference.smooth import SMOOTH_ALPHA, smooth_onnx
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.vit import VisionTransformer
from vitkit.utils.atomic import atomic_write_bytes, atomic_write_text
from vitkit.utils.files import MAX_JSON_BYTES, parse_json, read_regular_file

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "logits"
#: the ONNX opset of vitkit's exports. 20 writes the tanh GELU (the paper's, vitkit's default) as one `Gelu` node,
#: which onnxruntime runs as its fused FastGelu kernel; at 17 it is eight elementwise nodes over the MLP's widest
#: activation that no onnxruntime fusion matched (ViT-B/16 fp32: BENCHMARKS.md "The onnxruntime gap, profiled").
DEFAULT_OPSET = 20


def _ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise ValueError("ONNX export checks need onnxruntime: pip install 'vitkit[onnx]'") from e
    return onnxruntime


def _prepared(model: nn.Module, path: str | Path,
              img_size: int | tuple[int, int] | None) -> tuple[Path, nn.Module, torch.Tensor]:
    """(path with its folder made, an fp32 eval copy of `model` at `img_size` (E_pos resampled in 2D), an
    example input of batch 2) for an export."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).float().eval()
    if img_size is not None:
        model.set_img_size(img_size)
    for m in model.modules():  # a kept checkpoint table (also inside a wrapper, e.g. embed's FeatureNet):
        if hasattr(m, "fix_position_table"):  # resampled once for the graph's fixed size
            m.fix_position_table()
    return path, model, torch.zeros(2, model.config.in_chans, *model.config.img_size)


def export_onnx(
    model: VisionTransformer,
    path: str | Path,
    *,
    img_size: int | tuple[int, int] | None = None,
    opset: int = DEFAULT_OPSET,
    dynamic_batch: bool = True,
) -> Path:
    """Write `model` (eval mode, fp32) as ONNX: input `pixel_values` (B, C, H, W), output `logits`.

    `img_size` moves a copy of the model to that resolution first (E_pos resampled in 2D).
    """
    path, model, x = _prepared(model, path, img_size)
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer warnings
        # dynamo=False: the TorchScript exporter needs no onnxscript and handles SDPA at opset >= 14
        torch.onnx.export(
            model,
            (x,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    _tag_onnx(path, {META_KEY: json.dumps(model.preprocess.to_dict()), MERGE_KEY: _merge_doc(model),
                     OUTPUT_KEY: json.dumps(output_doc(model))})
    return path


# ----------------------------------------------------------------------------- the preprocessing travels along
# An exported graph takes normalised pixels; the preprocessing that makes them (size, mean/std, crop, labels) is
# written where the format allows: ONNX metadata_props, OpenVINO rt_info, a JSON sidecar beside a .pt2.
META_KEY = "vitkit.preprocess"
MERGE_KEY = "vitkit.token_merging"  # ToMe's tokens merged per block, when the graph merges (JSON: r or [r_1, ...])
# what the graph's output is (JSON `output_doc`): "logits" of a K-way head, or a feature (vitkit.inference.features)
OUTPUT_KEY = "vitkit.output"


def output_doc(model: nn.Module) -> dict[str, object]:
    """What an export of `model` outputs: {"output": "logits" (a classifier) or the feature a backbone's forward, or
    a feature model's (`FeatureNet`), returns, "num_classes": K, "pooled": the family's pooled feature (what
    `vitkit embed` gives by default), "precision": "fp32"}: what predict / embed / eval need to run the file."""
    from vitkit.formats.families import pooled_feature

    cfg = model.config
    k = int(getattr(cfg, "num_classes", 0))
    output = getattr(model, "feature", None) or ("logits" if k else "pre_logits")
    found = pooled_feature(cfg) if hasattr(cfg, "distill_token") else None
    return {"output": output, "num_classes": k, "pooled": found[0] if found else "pre_logits",
            "normalized": bool(getattr(model, "normalize", False)), "precision": "fp32"}


def _merge_doc(model: nn.Module) -> str | None:
    r = getattr(model, "merge_r", 0)
    return json.dumps(r if isinstance(r, int) else list(r)) if r else None


def _tag_onnx(path: Path, docs: dict[str, str | None]) -> None:
    """vitkit's JSON `docs` ({key: doc}; a None doc is not written) stored in the ONNX file's metadata_props, each
    replacing its key's earlier entry, in one read and one write of the file (a ViT-B/16 export is ~350 MB)."""
    docs = {k: d for k, d in docs.items() if d is not None}
    if not docs:
        return
    try:
        import onnx
    except ImportError:
        warnings.warn(f"{path}: the model's preprocessing (mean/std, size, labels) is not stored in it: writing ONNX "
                      "metadata needs the onnx package (pip install 'vitkit[onnx]')", UserWarning, stacklevel=3)
        return
    proto = onnx.load(str(path), load_external_data=False)  # weights over 2 GB stay in their external file
    kept = [p for p in proto.metadata_props if p.key not in docs]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    for key, doc in docs.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, doc
    atomic_write_bytes(path, proto.SerializeToString())


def _onnx_doc(path: str | Path, key: str = META_KEY) -> str | None:
    """The preprocessing JSON (or another vitkit `key`) stored in an ONNX file's metadata_props, or None."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return next((p.value for p in proto.metadata_props if p.key == key), None)


def exported_merge(path: str | Path) -> int | list[int]:
    """The token merging (ToMe's r per block, or one r for all) built into an exported `.onnx` / `.xml` graph;
    0 for a graph that does not merge."""
    doc = _stored_doc(Path(path), MERGE_KEY, "token_merging")
    return parse_json(doc, path, "stored token merging") if doc else 0


def _stored_doc(path: Path, key: str, rt: str) -> str | None:
    """vitkit's JSON `key` stored with an export (None: not there): ONNX metadata_props, OpenVINO rt_info
    ["vitkit", `rt`], or a `.pt2`'s JSON sidecar (the preprocessing is the sidecar itself, another key an entry)."""
    if path.suffix == ".onnx":
        return _onnx_doc(path, key)
    if path.suffix == ".xml":
        return _rt_doc(_ov().Core().read_model(str(path)), rt)
    if not (_sidecar(path).exists() or _sidecar(path).is_symlink()):
        return None
    text = read_regular_file(_sidecar(path), MAX_JSON_BYTES, "export sidecar").decode(errors="replace")
    if key == META_KEY:
        return text
    whole = parse_json(text, path, "export sidecar")
    found = whole.get(key) if isinstance(whole, dict) else None
    return None if found is None else json.dumps(found)


def _rt_doc(model, rt: str) -> str | None:  # noqa: ANN001 - openvino.Model, an optional dependency
    """vitkit's JSON `rt` in an OpenVINO model's rt_info ["vitkit", `rt`], or None."""
    return model.get_rt_info(["vitkit", rt]).astype(str) if model.has_rt_info(["vitkit", rt]) else None


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".vitkit.json")


def exported_output(path: str | Path) -> dict[str, object] | None:
    """What an exported `.onnx` / `.xml` / `.pt2` outputs (`output_doc`, as written with it), or None for a file
    that does not say (exported by another tool or an older vitkit)."""
    doc = _stored_doc(Path(path), OUTPUT_KEY, "output")
    if doc is None:
        return None
    out = parse_json(doc, path, OUTPUT_KEY)
    if not (isinstance(out, dict) and isinstance(out.get("output"), str) and isinstance(out.get("num_classes"), int)):
        raise ValueError(f"{path}: its stored {OUTPUT_KEY} {doc[:200]!r} is not what vitkit writes")
    return out


def exported_preprocess(path: str | Path) -> PreprocessConfig | None:
    """The preprocessing stored with an exported model (`.onnx`, OpenVINO `.xml`, AOTInductor `.pt2`), or None
    (with a warning) where the file holds none."""
    path = Path(path)
    doc = _stored_doc(path, META_KEY, "preprocess")
    if doc is None:
        warnings.warn(f"{path} holds no preprocessing (exported by another tool or an older vitkit): give the "
                      "input size, mean/std and labels yourself", UserWarning, stacklevel=2)
        return None
    try:
        return PreprocessConfig.from_dict(parse_json(doc, path, "stored preprocessing"))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: its stored preprocessing is not readable ({e})") from e


def ort_session(path: str | Path, threads: int | None = None, spin: bool = True):  # noqa: ANN201 - optional dep
    """An onnxruntime CPU session for `path` (threads: intra-op threads, default all cores).

    `spin=False` stops onnxruntime's worker threads from busy-waiting after a call. Timing it
    interleaved with PyTorch needs that: spinning threads keep the cores busy through PyTorch's turn,
    which slowed PyTorch and made onnxruntime look several times faster than it is."""
    ort = _ort()
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _ov():  # noqa: ANN202 - optional dependency
    """`import openvino`, with Intel's telemetry declined first: importing OpenVINO otherwise writes a client id
    under ~/intel and its converter sends usage events over the network on every run."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # no telemetry package: OpenVINO uses its own no-op stand-in
        pass
    else:
        OptInChecker.check = lambda self, *a, **k: ConsentCheckResult.DECLINED
    try:
        import openvino
    except ImportError as e:
        raise ValueError("OpenVINO is not installed: pip install 'vitkit[openvino]'") from e
    return openvino


def openvino_compile(path: str | Path, precision: str = "fp32", threads: int | None = None):  # noqa: ANN201
    """An OpenVINO CPU model compiled from an ONNX file or IR `.xml`, computing in `precision`
    (fp32 or bf16: OpenVINO's inference precision hint; int8: an IR quantised by `quantize_openvino_int8`, its
    float parts in fp32), latency mode, `threads` inference threads."""
    ov = _ov()
    # int8: the IR's own FakeQuantize nodes run as int8 kernels, everything around them in f32
    cfg = {"PERFORMANCE_HINT": "LATENCY",
           "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16", "int8": "f32"}[precision]}
    if threads:
        cfg["INFERENCE_NUM_THREADS"] = int(threads)
    return ov.Core().compile_model(str(path), "CPU", cfg)


def export_openvino(onnx_path: str | Path, path: str | Path) -> Path:
    """OpenVINO IR (`path` .xml + .bin, fp32 weights) converted from an ONNX export."""
    ov = _ov()
    path = Path(path).with_suffix(".xml")
    model = ov.convert_model(str(onnx_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untagged ONNX: its own warning below says what is lost
        pre = exported_preprocess(onnx_path)
    merge, output = exported_merge(onnx_path), exported_output(onnx_path)
    if output is not None:
        model.set_rt_info(json.dumps(output), ["vitkit", "output"])
    if merge:
        model.set_rt_info(json.dumps(merge), ["vitkit", "token_merging"])
    if pre is not None:
        model.set_rt_info(json.dumps(pre.to_dict()), ["vitkit", "preprocess"])
    else:
        warnings.warn(f"{onnx_path} holds no preprocessing, so {path} has none either", UserWarning, stacklevel=2)
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def export_aoti(model: nn.Module, path: str | Path, *, img_size: int | tuple[int, int] | None = None,
                max_batch: int = 1024) -> Path:
    """`torch.export` of `model` (eval, fp32; batch 1..`max_batch` dynamic) compiled ahead of time by
    AOTInductor, with the weights frozen into the package: a `.pt2` that `torch._inductor.aoti_load_package`
    runs with no vitkit code. Compiling takes seconds to minutes (a C++ build for this CPU)."""
    import torch._inductor

    path, model, x = _prepared(model, path, img_size)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    with torch.no_grad():
        program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
        torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs={"freezing": True})
    doc = {**model.preprocess.to_dict(), OUTPUT_KEY: output_doc(model)}
    atomic_write_text(_sidecar(path), json.dumps(doc) + "\n")  # a .pt2 holds no metadata
    return path


def load_aoti(path: str | Path) -> Callable[[torch.Tensor], torch.Tensor]:
    """The compiled model of an AOTInductor package written by `export_aoti`, taking fp32 images of any layout."""
    import torch._inductor

    fn = torch._inductor.aoti_load_package(str(path))
    return lambda x: fn(row_major(x.float()))  # the package assumes the example input's row-major strides


def row_major(x: torch.Tensor) -> torch.Tensor:
    """`x` itself where its strides are the row-major ones of its shape, else a row-major copy: what inductor's
    compiled graphs take. A 1-channel image batch can be contiguous (`is_contiguous()`) with a channel stride of 1
    (one channel from a channels-last array), which oneDNN's convolution reads as channels-last: an AOTInductor
    package reads it wrongly, and the compiled predictor's frozen graph with a dynamic batch fails on it (torch
    2.13: an `assert_size_stride` of `mkldnn._convolution_pointwise`)."""
    want, step = [], 1
    for n in reversed(x.shape):
        want.append(step)
        step *= max(n, 1)
    return x if tuple(reversed(want)) == x.stride() else x.clone(memory_format=torch.contiguous_format)


def onnx_logits(session, images: torch.Tensor, batch_size: int = 256) -> torch.Tensor:  # noqa: ANN001
    """Logits of an onnxruntime `session` on `images`, batch by batch."""
    outs = [session.run(None, {INPUT_NAME: b.float().numpy()})[0] for b in images.split(batch_size)]
    return torch.from_numpy(np.concatenate(outs))


def _pre_process(src: str | Path, pre: Path) -> None:
    """onnxruntime's `quant_pre_process` (shape inference + graph optimisation) of `src` into `pre`. Its symbolic
    shape inference fails on ToMe's merging nodes at opset 20; ONNX's own shape inference then stands in for it."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        quant_pre_process(str(src), str(pre))
    except TypeError:  # symbolic_shape_infer: "object of type 'NoneType' has no len()" on an uninferred output
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)


def quantize_int8(src: str | Path, dst: str | Path, keep_float: KeepFloat | tuple[str, ...] = ()) -> Path:
    """onnxruntime dynamic quantisation: int8 weights of MatMul/Gemm, activations quantised per call.
    The graph is first shape-inferred and optimised (onnxruntime's `quant_pre_process`), which makes the
    int8 graph faster (BENCHMARKS.md "Serving on CPUs"). `keep_float`: layers left in float (`quantize_static_int8`)."""
    _ort()
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = Path(dst)
    pre = dst.with_name(dst.stem + ".pre.onnx")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its "consider pre-processing" advice, printed through the root logger
    try:
        _pre_process(src, pre)
        import onnx

        layers = _layer_nodes(onnx.load(str(pre)).graph)
        mixed = _mixed(keep_float, layers)
        quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8,
                         nodes_to_exclude=[n for k in mixed.layers for n in layers[k]])
    finally:
        root.setLevel(level)
        pre.unlink(missing_ok=True)
    _copy_tags(src, dst, mixed, smooth_quant=None)
    return dst


#: the fewest calibration images `quantize_static_int8` takes: activation ranges from fewer are a guess
MIN_CALIBRATION = 8
#: fewer calibration images than this are taken with a warning
FEW_CALIBRATION = 64


#: calibration images whose activations onnxruntime's calibrator holds at once: it keeps every calibrated tensor of
#: every image before making its histograms (~0.1-0.2 GB per ViT-B/16 image, twice over), so it is fed this many at a
#: time (32 of ViT-B/16 took 10 GB)
CALIBRATION_CHUNK = 8


#: how `quantize_static_int8` sets each activation's range from the calibration images: "minmax" (the whole range
#: seen) or "percentile" (99.999th percentile of |x|, clipping the rarest values)
CALIBRATION_METHODS = ("minmax", "percentile")


#: the int8 grids `quantize_static_int8` writes, each exact on CPUs with VNNI and without (where onnxruntime's
#: u8 x s8 kernels add pairs of products in saturating 16-bit lanes, which full 8-bit u8 x s8 overflows)
INT8_GRIDS = {
    "w7": "s8 weights on 7 bits, u8 activations on 8 (onnxruntime's reduce_range)",
    "u8": "u8 weights and activations on 8 bits (onnxruntime's u8 x u8 kernels, slower than u8 x s8 without VNNI)",
}
#: the grid static int8 is written on unless asked otherwise: the faster (u8 x s8 kernels)
DEFAULT_GRID = "w7"


def check_int8_grid(grid: str | None, precision: str, calibrated: bool, runtime: str | None = None) -> None:
    """`--int8-grid`'s checks before any work: int8 only, static (calibrated), onnxruntime's (OpenVINO's NNCF has
    its own), a grid of `INT8_GRIDS`."""
    if grid is None:
        return
    if grid not in INT8_GRIDS:
        raise ValueError(f"--int8-grid: one of {', '.join(INT8_GRIDS)}, got {grid!r}")
    if precision != "int8":
        raise ValueError(f"--int8-grid chooses the grid of static int8; precision is {precision}: add --precision int8")
    if not calibrated:
        raise ValueError("--int8-grid chooses the grid of static int8, which is calibrated on your images: give "
                         "--calibrate DIR")
    if runtime not in (None, "onnxruntime"):
        raise ValueError(f"--int8-grid is onnxruntime's static int8; {runtime} int8 is quantised by NNCF on its own "
                         "grid: use --runtime onnxruntime, or leave out --int8-grid")


def _check_calibration(calibration: torch.Tensor) -> None:
    """A ValueError for a calibration set that is not (N, C, H, W) with at least `MIN_CALIBRATION` images; a warning
    under `FEW_CALIBRATION` (static int8, both runtimes)."""
    if calibration.ndim != 4 or len(calibration) < MIN_CALIBRATION:
        raise ValueError(f"static int8 needs at least {MIN_CALIBRATION} calibration images (N, C, H, W), got "
                         f"{tuple(calibration.shape)}: give a few hundred of your own images with --calibrate")
    if len(calibration) < FEW_CALIBRATION:
        warnings.warn(f"static int8 calibrated on {len(calibration)} images: activation ranges from so few are a thin "
                      f"sample; give a few hundred of your own images (--calibrate reads up to 512)", UserWarning,
                      stacklevel=3)


def layer_name(node: str) -> str:
    """The layer (module path, e.g. "blocks.11.mlp.fc2") of a node of vitkit's ONNX export or of OpenVINO's
    conversion of it, by its name ("/blocks.11/mlp/fc2/MatMul": the exporter names nodes by module scope)."""
    parts = node.strip("/").split("/")
    if len(parts) > 2 and parts[-1] == "WithoutBiases":  # OpenVINO's Convolution of an ONNX Conv with a bias
        parts = parts[:-1]
    return ".".join(parts[:-1]) or node


def _layer_nodes(graph) -> dict[str, list[str]]:  # noqa: ANN001 - onnx.GraphProto, an optional dependency
    """{layer: its node names} of the quantisable layers of an ONNX graph: the MatMul / Gemm / Conv nodes whose
    second input is a weight (the Linears and the patch embedding), in graph order."""
    weights = {t.name for t in graph.initializer}
    found: dict[str, list[str]] = {}
    for n in graph.node:
        if n.op_type in ("MatMul", "Gemm", "Conv") and len(n.input) > 1 and n.input[1] in weights:
            found.setdefault(layer_name(n.name), []).append(n.name)
    return found


def quantize_static_int8(src: str | Path, dst: str | Path, calibration: torch.Tensor, batch_size: int = 8,
                         method: str = "minmax", keep_float: KeepFloat | tuple[str, ...] = (),
                         ranges: str | Path | None = None, grid: str = DEFAULT_GRID,
                         smooth_quant: float | None = SMOOTH_ALPHA) -> Path:
    """onnxruntime static quantisation (QDQ) calibrated on `calibration`, normalised images (N, C, H, W) of the
    user's own data (a few hundred): every Linear's MatMul (and the patch embedding's Conv) in int8, weights per
    channel (s8), activations per tensor (u8, the VNNI u8 x s8 path) with ranges from the calibration's activations:
    by default their min / max (`method`). Percentile ranges clip the rare large activations of pretrained ViTs'
    late blocks (DINOv2's), which costs far more accuracy than the resolution they buy (measured: BENCHMARKS.md
    "Faster than the matmul roof"). Kept in float as onnxruntime's guidance for transformers has it: softmax, LayerNorm, GELU, the
    attention's activation x activation MatMuls (q k^T, a v) and the classifier head (the graph's last MatMul/Gemm).
    The MatMuls' outputs stay float (onnxruntime runs each as one MatMulIntegerToFloat: an int8 output would add a
    requantisation and a DequantizeLinear pass per MatMul, which made static int8 slower than dynamic).
    `grid` (`INT8_GRIDS`): "w7", s8 weights on 7 bits (onnxruntime's `reduce_range`): on a CPU without VNNI (AVX2,
    AVX-512 without VNNI) its u8 x s8 kernels add pairs of products in saturating 16-bit lanes, and full-range 8-bit
    s8 weights overflow them (measured: BENCHMARKS.md "int8 on a CPU without VNNI"); "u8", u8 weights on 8 bits,
    run by onnxruntime's u8 x u8 kernels, which do not saturate: closer to fp32, slower where u8 x s8 is the faster
    kernel. The file runs wherever it is copied, so
    both are written to be exact on both kinds of CPU. `smooth_quant`: SmoothQuant's alpha (`vitkit.inference.smooth`,
    folded into the LayerNorms before qkv and fc1: the same nodes, the same speed), None for none.
    Both are stored in the file's metadata (`INT8_KEY`: grid, smooth_quant, smoothed) and said by `describe_int8`.
    The calibration runs in equal batches of `batch_size` (a remainder of fewer images is left out), at most
    `CALIBRATION_CHUNK` images held at once (the histograms are merged chunk by chunk).
    `keep_float`: layers (`quantisable_layers` names, e.g. "blocks.11.mlp.fc2", or a `KeepFloat` with the rule that
    chose them: `vitkit.inference.mixed`) left in float as well, and said in the file's metadata (`INT8_KEY`); a
    name the graph does not have is refused. `ranges`: a JSON file of the calibrated activation
    ranges, written on first use and read after (the same graph quantised again with other `keep_float`)."""
    _ort()
    import logging

    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if method not in CALIBRATION_METHODS:
        raise ValueError(f"calibration method: one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    if grid not in INT8_GRIDS:
        raise ValueError(f"int8 grid: one of {', '.join(INT8_GRIDS)}, got {grid!r}")
    batch_size = min(batch_size, len(calibration))
    _check_calibration(calibration)
    dst = Path(dst)
    pre = dst.with_name(dst.stem + ".pre.onnx")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        _pre_process(src, pre)
        smoothed = (smooth_onnx(pre, pre, calibration, INPUT_NAME, smooth_quant, batch_size)
                    if smooth_quant is not None else {})
        graph = onnx.load(str(pre)).graph
        inits = {t.name for t in graph.initializer}
        matmuls = [n for n in graph.node if n.op_type in ("MatMul", "Gemm")]
        # a MatMul of two activations (attention scores, attention x values) stays in float; so does the head
        keep_float_nodes = [n.name for n in matmuls if not any(i in inits for i in n.input[1:2])]
        output = _stored_doc(Path(src), OUTPUT_KEY, "output")  # a feature graph has no head: its last MatMul is a block's
        if matmuls and (output is None or parse_json(output, src, OUTPUT_KEY).get("output") == "logits"):
            keep_float_nodes.append(matmuls[-1].name)
        layers = _layer_nodes(graph)
        mixed = _mixed(keep_float, layers)
        keep_float_nodes += [n for k in mixed.layers for n in layers[k]]

        n = len(calibration) // batch_size
        # batches per chunk: the largest divisor of the batch count that keeps a chunk within CALIBRATION_CHUNK
        stride = max(d for d in range(1, n + 1) if n % d == 0 and d * batch_size <= max(CALIBRATION_CHUNK, batch_size))

        class Reader(CalibrationDataReader):
            """Equal batches (the calibrator stacks each tensor's batches); onnxruntime's strided calibration asks
            for them `stride` at a time (`set_range`)."""

            def __init__(self) -> None:
                self.batches = list(calibration[:n * batch_size].float().split(batch_size))
                self.set_range(0, n)

            def __len__(self) -> int:
                return n

            def set_range(self, start_index: int, end_index: int) -> None:
                self.todo = iter(self.batches[start_index:end_index])

            def get_next(self) -> dict[str, np.ndarray] | None:
                b = next(self.todo, None)
                return None if b is None else {INPUT_NAME: b.numpy()}

        with contextlib.redirect_stdout(io.StringIO()):  # its calibration progress, printed
            quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QUInt8 if grid == "u8" else QuantType.QInt8,
                            reduce_range=grid == "w7",
                            op_types_to_quantize=["MatMul", "Conv"], nodes_to_exclude=keep_float_nodes,
                            calibration_cache_path=ranges,
                            calibrate_method=(CalibrationMethod.MinMax if method == "minmax"
                                              else CalibrationMethod.Percentile),
                            extra_options={"CalibPercentile": 99.999, "ActivationSymmetric": False,
                                           "CalibStridedMinMax": stride,  # (any calibrator, despite the name)
                                           "OpTypesToExcludeOutputQuantization": ["MatMul"]})
    finally:
        root.setLevel(level)
        pre.unlink(missing_ok=True)
    _copy_tags(src, dst, mixed, grid=grid, smooth_quant=smooth_quant if smoothed else None, smoothed=len(smoothed))
    return dst


def describe_int8(doc: dict[str, object] | None) -> str:
    """One line for the log of how an int8 graph was quantised, from its stored recipe (`exported_int8`)."""
    if doc is None:
        return "int8: the file does not record how it was quantised (an older vitkit's export)"
    grid = doc.get("grid")
    sq = doc.get("smooth_quant")
    parts = [f"grid {grid}: {INT8_GRIDS[grid]}" if grid in INT8_GRIDS else None,
             (f"SmoothQuant alpha {sq}" + (f" folded into {doc['smoothed']} LayerNorms" if doc.get("smoothed") else ""))
             if sq is not None else "no SmoothQuant"]
    return "int8 recipe: " + "; ".join(p for p in parts if p)


def _int8_tags(src: str | Path, model=None) -> list[tuple[str, str, str]]:  # noqa: ANN001 - openvino.Model
    """(ONNX key, OpenVINO rt_info name, JSON) of vitkit's metadata stored with `src` (`.onnx` or `.xml`), to carry
    to its int8 quantisation, which keeps the graph, not always its metadata: the preprocessing, the token merging,
    and the output record, now computed in int8. `model`: an IR `src` as OpenVINO already read it (its rt_info is
    read there, not from the file again: each read of an IR reads its weights too)."""
    tags = []
    for key, rt in ((META_KEY, "preprocess"), (MERGE_KEY, "token_merging"), (OUTPUT_KEY, "output")):
        doc = _rt_doc(model, rt) if model is not None and Path(src).suffix == ".xml" else _stored_doc(Path(src), key, rt)
        if doc is not None and key == OUTPUT_KEY:
            doc = json.dumps({**parse_json(doc, src, OUTPUT_KEY), "precision": "int8"})
        if doc is not None:
            tags.append((key, rt, doc))
    return tags


def _copy_tags(src: str | Path, dst: Path, mixed: KeepFloat, **recipe: object) -> None:
    """`_int8_tags(src)` and the int8 recipe (the mixed precision `mixed`, and `recipe`: how it was quantised,
    e.g. smooth_quant) written into the ONNX file `dst`."""
    _tag_onnx(dst, {**{key: doc for key, _, doc in _int8_tags(src)}, INT8_KEY: json.dumps({**mixed.as_doc(), **recipe})})


def exported_int8(path: str | Path) -> dict[str, object] | None:
    """The int8 recipe stored with an int8 export (`KeepFloat.as_doc`: the layers kept in float and the rule that
    chose them; `smooth_quant`: SmoothQuant's alpha, None for none), or None (an fp32 file, or an int8 file of an
    older vitkit)."""
    doc = _stored_doc(Path(path), INT8_KEY, "int8")
    if doc is None:
        return None
    found = parse_json(doc, path, INT8_KEY)
    if not (isinstance(found, dict) and isinstance(found.get("keep_float"), list)):
        raise ValueError(f"{path}: its stored {INT8_KEY} {doc[:200]!r} is not what vitkit writes")
    return found


def _mixed(keep_float: KeepFloat | tuple[str, ...], layers: dict[str, list[str]]) -> KeepFloat:
    """`keep_float` as a `KeepFloat` (names alone: "named by the caller"), each of its layers one of the graph's
    `layers`, or a ValueError naming those that are not."""
    mixed = keep_float if isinstance(keep_float, KeepFloat) else KeepFloat(
        tuple(keep_float), "named by the caller" if keep_float else "all int8")
    check_known_layers(mixed.layers, layers)
    return mixed


#: NNCF's SmoothQuant migration strength for the MatMuls of `quantize_openvino_int8` (its transformer default, 0.95);
#: a negative value switches SmoothQuant off
SMOOTH_QUANT_ALPHA = 0.95


def _ov_layer_nodes(model) -> dict[str, list[str]]:  # noqa: ANN001 - openvino.Model, an optional dependency
    """{layer: its node names} of the quantisable layers of an OpenVINO model converted from vitkit's ONNX export:
    the MatMul / Convolution nodes whose second input is a weight (a constant, possibly converted or reshaped)."""
    found: dict[str, list[str]] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() not in ("MatMul", "Convolution"):
            continue
        src = op.input(1).get_source_output().get_node()
        while src.get_type_name() in ("Convert", "Reshape", "Transpose", "Unsqueeze", "Squeeze"):
            src = src.input(0).get_source_output().get_node()
        if src.get_type_name() == "Constant":
            found.setdefault(layer_name(op.get_friendly_name()), []).append(op.get_friendly_name())
    return found


def quantisable_layers(path: str | Path) -> list[str]:
    """The layers of an exported `.onnx` / `.xml` graph that int8 quantises and that `keep_float` may name, in graph
    order: the Linears and the patch embedding, by module path ("blocks.11.mlp.fc2")."""
    path = Path(path)
    if path.suffix == ".xml":
        return list(_ov_layer_nodes(_ov().Core().read_model(str(path))))
    import onnx

    return list(_layer_nodes(onnx.load(str(path), load_external_data=False).graph))


def quantize_openvino_int8(src: str | Path, dst: str | Path, calibration: torch.Tensor,
                           keep_float: KeepFloat | tuple[str, ...] = (), smooth_quant: float = SMOOTH_QUANT_ALPHA,
                           batch_size: int = 8) -> Path:
    """OpenVINO int8 IR (`dst` .xml + .bin) by NNCF's post-training quantisation of `src` (an ONNX export or IR
    `.xml`), calibrated on `calibration`, normalised images (N, C, H, W) of the user's own data (a few hundred).
    NNCF's transformer mode (`ModelType.TRANSFORMER`): the Linears' MatMuls (weights per channel, activations per
    tensor) and the attention's q k^T / a v in int8, LayerNorm, softmax and GELU in float; SmoothQuant
    (`smooth_quant`: the alpha that moves activation outliers into the weights; < 0 off) and fast bias correction.
    `keep_float`: layers (`quantisable_layers` names, or a `KeepFloat`) NNCF leaves in float (its ignored scope: mixed precision,
    `vitkit.inference.mixed`); a name the graph does not have is refused. OpenVINO runs the
    result with its int8 kernels (VNNI / AMX where the CPU has them, AVX2 otherwise). vitkit's metadata
    (preprocessing, token merging) is copied from `src`. Same calibration-set rules as `quantize_static_int8`."""
    ov = _ov()
    try:
        import nncf
    except ImportError as e:
        raise ValueError("OpenVINO int8 is NNCF's post-training quantisation: pip install 'vitkit[openvino]' "
                         "(it installs nncf)") from e
    _check_calibration(calibration)
    src, dst = Path(src), Path(dst).with_suffix(".xml")
    model = ov.Core().read_model(str(src))
    tags = _int8_tags(src, model)  # read before NNCF takes the model
    batches = [b.float().numpy() for b in calibration.split(min(batch_size, len(calibration)))]
    advanced = nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=smooth_quant))
    layers = _ov_layer_nodes(model)
    mixed = _mixed(keep_float, layers)
    scope = nncf.IgnoredScope(names=[n for k in mixed.layers for n in layers[k]]) if mixed.layers else None
    import logging

    nlog = logging.getLogger("nncf")
    level = nlog.level
    nlog.setLevel(logging.ERROR)  # its progress bars and INFO lines
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # progress bars
            q = nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(calibration), fast_bias_correction=True, ignored_scope=scope,
                              advanced_parameters=advanced)
    finally:
        nlog.setLevel(level)
    for _, rt, doc in (*tags, (INT8_KEY, "int8", json.dumps(
            {**mixed.as_doc(), "smooth_quant": smooth_quant if smooth_quant >= 0 else None}))):
        q.set_rt_info(doc, ["vitkit", rt])
    dst.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(q, str(dst), compress_to_fp16=False)
    return dst

