"""The inference backends, one table: each row names a runtime, the file format it runs, the file's suffix, the pip
extra it needs, the precisions it runs, how a model is exported for it and how the exported file is run.

| backend       | format     | suffix  | extra              | precisions                | served by `--runtime`    |
|---------------|------------|---------|--------------------|---------------------------|--------------------------|
| `openvino`    | `openvino` | `.xml`  | `vitkit[openvino]` | fp32, bf16, int8 (NNCF)   | yes                      |
| `onnxruntime` | `onnx`     | `.onnx` | `vitkit[onnx]`     | fp32, int8                | yes                      |
| `torch`       | —          | —       | —                  | fp32, bf16, bf16-autocast | yes (the model itself)   |
| `aoti`        | `aoti`     | `.pt2`  | —                  | fp32                      | no (`vitkit export` only)|

The rows' order is `--runtime auto`'s preference on a CPU (fastest measured first, BENCHMARKS.md "Serving on CPUs").
`vitkit.inference.runtime` chooses among the served rows, `vitkit export` writes any row's format
(`export_model`), `vitkit.bench.exported` times the exported files (`exported_runner`). A new runtime is one row
here: its exporter (model -> file) and runner (file -> fp32 logits) are functions of `vitkit.inference.export`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.inference.export import (
    DEFAULT_GRID,
    DEFAULT_OPSET,
    OUTPUT_KEY,
    check_int8_grid,
    describe_int8,
    export_aoti,
    export_onnx,
    export_openvino,
    exported_int8,
    exported_output,
    exported_preprocess,
    load_aoti,
    onnx_logits,
    openvino_compile,
    ort_session,
    quantisable_layers,
    quantize_int8,
    quantize_openvino_int8,
    quantize_static_int8,
)
from vitkit.inference.mixed import KeepFloat, check_keep_float, keep_float
from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils.atomic import staged_files
from vitkit.utils.options import TORCH_PRECISIONS

Runner = Callable[[torch.Tensor], torch.Tensor]
#: why OpenVINO int8 needs images: NNCF's quantisation is static (activation ranges measured on data)
OPENVINO_INT8_NEEDS_CALIBRATION = ("OpenVINO int8 is calibrated on your images (NNCF's post-training quantisation): "
                                   "give --calibrate DIR (a few hundred of your own images), or use onnxruntime, "
                                   "whose int8 without --calibrate is dynamic")


@dataclass(frozen=True)
class Backend:
    """One way vitkit runs a model. `export(model, path, opset)` writes the file (None: the torch model runs
    itself); `runner(path, precision, threads)` returns fp32 images -> fp32 logits through the file."""

    name: str  # the runtime name (--runtime, Predictor.runtime)
    format: str | None  # the export format name (vitkit export --format); None: no file
    suffix: str | None
    extra: str | None  # pip extra of the packages it needs
    packages: tuple[str, ...]
    precisions: tuple[str, ...]
    served: bool  # a runtime `build_predictor` runs (aoti: an export format only; compiling takes minutes)
    description: str
    export: Callable[[nn.Module, Path, int], Path] | None = None
    runner: Callable[[Path, str, int | None], Runner] | None = None

    def available(self) -> bool:
        """Whether the packages this backend needs are importable (torch always is)."""
        return all(importlib.util.find_spec(p) is not None for p in self.packages)


def _export_openvino(model: nn.Module, out: Path, opset: int = DEFAULT_OPSET) -> Path:
    with tempfile.TemporaryDirectory(prefix="vitkit-") as tmp:
        return export_openvino(export_onnx(model, Path(tmp) / "model.onnx", opset=opset), out)


def _run_openvino(path: Path, precision: str = "fp32", threads: int | None = None) -> Runner:
    compiled = openvino_compile(path, precision, threads)
    return lambda x: torch.from_numpy(np.asarray(compiled(x.float().cpu().numpy())[0]))


def _run_onnx(path: Path, precision: str = "fp32", threads: int | None = None) -> Runner:
    sess = ort_session(path, threads=threads, spin=False)  # int8 if the file is
    return lambda x: onnx_logits(sess, x.cpu())


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("openvino", "openvino", ".xml", "vitkit[openvino]", ("openvino", "onnx"), ("fp32", "bf16", "int8"), True,
            "the ONNX graph compiled by OpenVINO for this CPU (IR .xml + .bin); int8 = NNCF's post-training "
            "quantisation calibrated on the user's images", _export_openvino, _run_openvino),
    Backend("onnxruntime", "onnx", ".onnx", "vitkit[onnx]", ("onnxruntime", "onnx"), ("fp32", "int8"), True,
            "the ONNX export run by onnxruntime; int8 = dynamic quantisation of every MatMul/Gemm",
            lambda model, out, opset=DEFAULT_OPSET: export_onnx(model, out, opset=opset), _run_onnx),
    Backend("torch", None, None, None, (), TORCH_PRECISIONS, True,
            "the model itself, eager or torch.compile'd (inductor, weights frozen)"),
    Backend("aoti", "aoti", ".pt2", None, (), ("fp32",), False,
            "torch.export + AOTInductor: compiled C++ for this CPU, loaded without vitkit's code",
            lambda model, out, opset=DEFAULT_OPSET: export_aoti(model, out), lambda path, precision="fp32", threads=None:
            load_aoti(path)),
)}
#: the runtimes `build_predictor` serves, in auto's order of preference, and the export formats by name
RUNTIMES = ("auto", *(b.name for b in BACKENDS.values() if b.served))
FORMATS: dict[str, Backend] = {b.format: b for b in BACKENDS.values() if b.format}
EXPORT_SUFFIXES = {name: b.suffix for name, b in FORMATS.items()}


def backend_of_file(path: str | Path) -> Backend:
    """The backend that runs an exported file, by its suffix."""
    suffix = Path(path).suffix
    for b in FORMATS.values():
        if b.suffix == suffix:
            return b
    raise ValueError(f"{path}: not an exported model ({', '.join(EXPORT_SUFFIXES.values())})")


def exported_runner(path: str | Path, precision: str = "fp32", threads: int | None = None) -> Runner:
    """fp32 images -> fp32 logits through an exported file: `.onnx` (onnxruntime; int8 if the file is),
    `.xml` (OpenVINO IR, computing in `precision`) or `.pt2` (AOTInductor); `threads` intra-op threads."""
    return backend_of_file(path).runner(Path(path), precision, threads)


def is_exported(path: str | Path) -> bool:
    """Whether `path` names an exported model file (`.onnx`, `.xml`, `.pt2`) rather than a checkpoint."""
    p = Path(path)
    return p.suffix in EXPORT_SUFFIXES.values() and p.is_file()


@dataclass(frozen=True)
class ExportedConfig:
    """What predict / embed / eval read of a model's config, as an exported file records it."""

    num_classes: int  # K of the graph's logits; 0: the graph outputs a feature
    in_chans: int
    img_size: tuple[int, int]  # fixed in the graph


@dataclass(frozen=True)
class ExportedModel:
    """An exported file (`vitkit export`) as the inference commands use a model: its runtime (`backend`), its own
    preprocessing and labels, and what its fixed graph outputs (`output`: "logits" or a feature; `pooled`: the
    family's pooled feature it was exported from; `precision`: fp32 or int8). `feature` / `normalize`: what
    `vitkit embed` takes of the output (`as_features`)."""

    path: Path
    backend: Backend
    preprocess: PreprocessConfig
    config: ExportedConfig
    output: str
    pooled: str
    precision: str
    normalized: bool = False
    feature: str = ""
    normalize: bool = False
    note: str = ""

    def as_features(self, feature: str, normalize: bool) -> "ExportedModel":
        """This file giving `feature` per image (`vitkit embed --pool`): its graph's output, which must be that
        feature ("pooled": the family's pooled output the file was exported from), L2-normalised if asked."""
        want = self.pooled if feature == "pooled" else feature
        if want != self.output:
            raise ValueError(f"--pool {feature}: {self.path}'s graph outputs {self.output!r}"
                             f"{f' (the pooled output of its model is {self.pooled!r})' if feature == 'pooled' else ''}"
                             f", not {want!r}: a fixed graph gives only its output; use --pool "
                             f"{'pooled' if self.output == self.pooled else self.output}, or embed with the checkpoint")
        return dataclasses.replace(self, feature=want, normalize=normalize and not self.normalized)

    def runner(self, precision: str, threads: int | None) -> Runner:
        """fp32 images -> the graph's fp32 output on this file's runtime."""
        return self.backend.runner(self.path, precision, threads)


def load_exported(path: str | Path) -> ExportedModel:
    """An exported file, read for predict / embed / eval: its runtime must be installed, and it must carry vitkit's
    metadata (its preprocessing and what it outputs); each refusal names what is missing."""
    p = Path(path)
    backend = backend_of_file(p)
    if not backend.available():
        need = ", ".join(x for x in backend.packages if importlib.util.find_spec(x) is None)
        raise ValueError(f"{p}: an {backend.format} export runs on {backend.name}, which is not installed (missing: "
                         f"{need}): pip install '{backend.extra}'")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its "holds no preprocessing" warning: refused by name below
        pre = exported_preprocess(p)
    out = exported_output(p)
    if pre is None or out is None:
        missing = " and ".join(w for w, v in (("its preprocessing", pre), (OUTPUT_KEY, out)) if v is None)
        raise ValueError(f"{p}: holds no {missing} (exported by another tool or an older vitkit): vitkit cannot tell "
                         "how to feed it or what it outputs; export the checkpoint again with `vitkit export`")
    k = out["num_classes"] if out["output"] == "logits" else 0
    if k and pre.labels and len(pre.labels) != k:
        raise ValueError(f"{p}: {len(pre.labels)} class names for a {k}-way head")
    return ExportedModel(p, backend, pre, ExportedConfig(k, pre.channels, pre.img_size), str(out["output"]),
                         str(out.get("pooled", "pre_logits")), str(out.get("precision", "fp32")),
                         bool(out.get("normalized", False)))


def output_paths(fmt: str, out: str | Path, int8: bool = False) -> list[Path]:
    """Every file an export of format `fmt` to `out` writes: the OpenVINO IR's `.bin` beside its `.xml`, and the
    int8 file beside the fp32 one (`<out>.int8.onnx`; OpenVINO: `<out>.int8.xml` + `.int8.bin`)."""
    out = Path(out)
    paths = [out] + ([out.with_suffix(".bin")] if fmt == "openvino" else [])
    if int8 and fmt == "openvino":
        return paths + [out.with_suffix(".int8.xml"), out.with_suffix(".int8.bin")]
    return paths + ([out.with_suffix(".int8.onnx")] if int8 else [])


def _earlier_export(f: Path) -> bool:
    """A file an earlier export wrote (so writing it again destroys no input)."""
    return f.suffix in EXPORT_SUFFIXES.values() or (f.suffix == ".bin" and f.with_suffix(".xml").is_file()
                                                    and f.with_suffix(".xml").read_bytes()[:200].lstrip().startswith(b"<?xml"))


def refuse_overwriting_inputs(outputs: list[Path], source: Path | None) -> None:
    """A ValueError when an output would replace the source checkpoint or one of its files (never allowed, with or
    without --overwrite): a source file itself, or a file of a source folder that no earlier export wrote."""
    if source is None or not source.exists():
        return
    inputs = [source] if source.is_file() else [f for f in source.iterdir() if f.is_file() and not _earlier_export(f)]
    for out in outputs:
        for f in inputs:
            if out.resolve() == f.resolve():
                raise ValueError(f"the export would write {out}, which is the checkpoint's own file {f}: an export "
                                 "never replaces its input; choose another --out")


@dataclass
class ParityReport:
    batch_sizes: tuple[int, ...]
    max_abs_diff: float
    max_abs_logit: float
    top1_agreement: float
    inputs: str = "random inputs"


@torch.no_grad()
def check_parity(
    model: nn.Module, path: str | Path, batch_sizes: tuple[int, ...] = (1, 3), seed: int = 0,
    images: torch.Tensor | None = None, most: int = 32,
) -> ParityReport:
    """Run inputs of several batch sizes through PyTorch and the exported file; compare logits. The inputs are
    random (N(0, 1), `seed`) unless `images` (normalised, N x C x H x W) are given: then batches of `batch_sizes`
    and one of the rest, `most` images in all. An int8 graph calibrated on images is compared on images: on noise
    its top-1 agreement says little (its ranges were fitted to data, not to noise)."""
    run = exported_runner(path)
    cfg = model.config
    was_training = model.training  # the caller's model compared in eval mode, and given back as it came
    model.eval()
    try:
        return _parity(model, run, cfg, batch_sizes, seed, images, most)
    finally:
        model.train(was_training)


def _parity(model: nn.Module, run: Runner, cfg: Any, batch_sizes: tuple[int, ...], seed: int,
            images: torch.Tensor | None, most: int) -> ParityReport:
    if images is None:
        gen = torch.Generator().manual_seed(seed)
        batches = [torch.randn(b, cfg.in_chans, *cfg.img_size, generator=gen) for b in batch_sizes]
        what = "random inputs"
    else:
        images, batches, start = images[:most], [], 0
        for b in (*batch_sizes, len(images)):  # the last batch: the rest
            if start < len(images):
                batches.append(images[start:start + b])
                start += b
        what = f"{len(images)} of your images"
    worst, scale, agree, n = 0.0, 0.0, 0, 0
    for x in batches:
        ref = model(x.to(next(model.parameters()).dtype)).float()
        got = run(x)
        worst = max(worst, (got - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
        agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
        n += len(x)
    return ParityReport(tuple(len(x) for x in batches), worst, scale, agree / n, what)


def check_export(fmt: str, int8: bool = False, calibrated: bool = False) -> None:
    """A ValueError for an export vitkit does not write (checked before a model is loaded)."""
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if int8 and fmt not in ("onnx", "openvino"):
        raise ValueError(f"--precision int8 is written as ONNX (onnxruntime) or OpenVINO IR (NNCF), not {fmt}: "
                         "use --format onnx or --format openvino")
    if int8 and fmt == "openvino" and not calibrated:
        raise ValueError(OPENVINO_INT8_NEEDS_CALIBRATION)


def quantize_for(backend: str, model: nn.Module, src: Path, dst: Path, calibration: torch.Tensor | None,
                 keep: int | tuple[str, ...] = 0, log: Callable[[str], None] | None = None,
                 grid: str | None = None) -> tuple[Path, KeepFloat]:
    """`src`, the fp32 export of `model` for `backend` (onnxruntime or openvino), quantised to int8 at `dst`:
    OpenVINO by NNCF (calibrated), onnxruntime static where `calibration` is given, dynamic otherwise; with the
    layers `keep` (`vitkit.inference.mixed.keep_float`: a count measured on `calibration`, or names) kept in float,
    said to `log` and stored in the file; `grid`: static int8's grid (`INT8_GRIDS`; default `DEFAULT_GRID`), its
    recipe said to `log` too. Returns (the int8 file, the mixed precision)."""
    check_int8_grid(grid, "int8", calibration is not None, backend)
    mixed = keep_float(model, calibration, keep, quantisable_layers(src)) if keep else KeepFloat((), "all int8")
    if mixed.layers and log is not None:
        log(f"int8 mixed precision: {mixed.describe()}")
    if backend == "openvino":
        out = quantize_openvino_int8(src, dst, calibration, mixed)
    elif calibration is not None:
        out = quantize_static_int8(src, dst, calibration, keep_float=mixed, grid=grid or DEFAULT_GRID)
    else:
        return quantize_int8(src, dst, mixed), mixed
    if log is not None:
        log(describe_int8(exported_int8(out)))
    return out, mixed


def export_model(model: nn.Module, fmt: str, out: str | Path, opset: int = DEFAULT_OPSET, int8: bool = False,
                 calibration: torch.Tensor | None = None, keep: int | tuple[str, ...] = 0,
                 log: Callable[[str], None] | None = None, grid: str | None = None) -> dict[str, Path]:
    """Export `model` (fp32, eval) as `fmt` (onnx | openvino | aoti) to `out`, and with `int8` its quantisation
    beside: ONNX dynamic, or static calibrated on `calibration` (normalised images of the user's own); OpenVINO
    NNCF's post-training quantisation calibrated on them (`quantize_openvino_int8`, calibration required); `keep`:
    the layers kept in float and `grid` static int8's grid (`quantize_for`, said to `log`); returns {"<fmt> fp32": path, "<fmt> int8": path}."""
    check_export(fmt, int8, calibration is not None)
    check_keep_float(keep, "int8" if int8 else "fp32", calibration is not None)
    check_int8_grid(grid, "int8" if int8 else "fp32", calibration is not None, FORMATS[fmt].name)
    out = Path(out)
    with staged_files(out) as staged:  # every file complete before any earlier one is replaced
        FORMATS[fmt].export(model, staged, opset)
        if int8:
            quantize_for(FORMATS[fmt].name, model, staged, staged.with_suffix(f".int8{FORMATS[fmt].suffix}"),
                         calibration, keep, log, grid)
    paths = {f"{fmt} fp32": out}
    if int8:
        paths[f"{fmt} int8"] = out.with_suffix(f".int8{FORMATS[fmt].suffix}")
    return paths
