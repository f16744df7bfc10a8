"""Inference runtimes: one `Predictor` (fp32 images in, fp32 logits out) for every way vitkit runs a model.

The runtimes, the precisions each runs, the packages they need and how a model is exported for them are the
served rows of one table, `vitkit.inference.backends.BACKENDS` (torch, onnxruntime, openvino).

Precisions are vitkit's one vocabulary (`vitkit.utils.precision`: fp32, bf16, bf16-autocast, int8, and auto).
`resolve_runtime("auto")` picks, on a CPU, the fastest runtime that is installed for that precision by a table of
measured speeds per CPU kind (`vitkit/inference/runtime_speeds.json`: ISA x runtime x precision -> speed relative
to torch fp32, written by benchmarks/int8_openvino.py), in `BACKENDS`' order for a CPU kind it has no rows for; on a
GPU, torch. `build_predictor` is the one place
where these choices are made (and where an automatic runtime that cannot run a model falls back to torch); each
choice is logged with its reason. The optional runtimes are extras: `pip install 'vitkit[onnx]'`,
`'vitkit[openvino]'`.
"""

from __future__ import annotations

import copy
import functools
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from vitkit.inference.backends import BACKENDS, OPENVINO_INT8_NEEDS_CALIBRATION, RUNTIMES, ExportedModel, quantize_for
from vitkit.inference.cpu_fused import fused_for_cpu
from vitkit.inference.export import check_int8_grid, describe_int8, exported_int8, row_major
from vitkit.inference.mixed import check_keep_float
from vitkit.models.lora import lora_modules, merge_lora
from vitkit.utils import precision as precision_mod
from vitkit.utils.files import read_json
from vitkit.utils.hardware import isa_kind, set_threads
from vitkit.utils.precision import PRECISIONS

#: precisions each runtime runs; the order of runtimes is auto's preference on a CPU (BENCHMARKS.md)
SUPPORTED: dict[str, tuple[str, ...]] = {b.name: b.precisions for b in BACKENDS.values() if b.served}
EXTRAS = {b.name: b.extra for b in BACKENDS.values() if b.extra}


def runtime_available(runtime: str) -> bool:
    """Whether the packages `runtime` needs are importable (torch always is)."""
    return BACKENDS[runtime].available()


#: below this many images `auto` keeps fp32 / bf16 in torch: the export and graph compilation of another
#: runtime (seconds for a ViT-B) would cost more than it saves
AUTO_MIN_IMAGES = 256


SPEED_TABLE = Path(__file__).with_name("runtime_speeds.json")


@functools.cache
def speed_table(path: Path = SPEED_TABLE) -> tuple[dict[str, object], ...]:
    """The rows of the measured runtime speed table: {isa, runtime, precision, calibrated, vs_torch_fp32, model,
    batch, machine, date} (none where the file is missing)."""
    return tuple(read_json(path, "runtime speed table")["rows"]) if path.is_file() else ()


def _measured_choice(candidates: list[str], precision: str, calibrated: bool, isa: str,
                     rows: tuple[dict[str, object], ...]) -> tuple[str, str] | None:
    """(runtime, why) of the fastest of `candidates` for `precision` on CPUs of kind `isa` by the table's `rows`,
    or None where the table measured none of them there."""
    speed = {r["runtime"]: r for r in rows if r["isa"] == isa and r["precision"] == precision
             and r["runtime"] in candidates and (precision != "int8" or r["calibrated"] == calibrated)}
    if not speed:
        return None
    best = max(speed.values(), key=lambda r: float(r["vs_torch_fp32"]))
    others = ", ".join(f"{n} {float(r['vs_torch_fp32']):.2f}x" for n, r in speed.items() if r is not best)
    return str(best["runtime"]), (f"measured fastest for {precision} on {isa} CPUs: {float(best['vs_torch_fp32']):.2f}x "
                                  f"torch fp32 ({best['model']}, batch {best['batch']}, {best['date']}"
                                  f"{'; ' + others if others else ''}; runtime_speeds.json)")


def resolve_runtime(runtime: str, precision: str, device: str | torch.device = "cpu", n_images: int | None = None,
                    available: Callable[[str], bool] = runtime_available, calibrated: bool = False,
                    isa: str | None = None) -> tuple[str, str]:
    """(runtime, why) for `precision` (already resolved). `auto` on a CPU takes, among the installed runtimes that
    run `precision` (OpenVINO int8 only `calibrated`: NNCF's quantisation is static), the fastest measured on this
    CPU kind (`isa`, default `isa_kind()`) by `speed_table`, or the first in `SUPPORTED`'s order where the table has
    no row for it; except that a job of fewer than `AUTO_MIN_IMAGES` images stays in torch where torch runs the
    precision; on a GPU, torch. An explicit runtime that cannot run `precision`, or is not installed, is refused
    with what to do instead."""
    if runtime not in RUNTIMES:
        raise ValueError(f"--runtime must be one of {', '.join(RUNTIMES)}; got {runtime!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not resolved: pass it through vitkit.utils.precision.resolve")
    gpu = torch.device(device).type != "cpu"
    if runtime == "auto":
        if gpu:
            if precision == "int8":
                raise ValueError("int8 runs on the CPU (onnxruntime, OpenVINO); use --device cpu, or fp32 / bf16 on "
                                 "the GPU")
            return "torch", "on a GPU"
        if n_images is not None and n_images < AUTO_MIN_IMAGES and precision in SUPPORTED["torch"]:
            return "torch", f"{n_images} images: exporting to a faster runtime would cost more than it saves"
        candidates = [n for n, ps in SUPPORTED.items() if precision in ps and (n == "torch" or available(n))
                      and not (n == "openvino" and precision == "int8" and not calibrated)]
        kind = isa or isa_kind()
        measured = _measured_choice(candidates, precision, calibrated, kind, speed_table())
        if measured is not None:
            return measured
        if candidates:
            return candidates[0], f"no measurement for {kind} CPUs in runtime_speeds.json: BACKENDS' order"
        wants = [n for n, ps in SUPPORTED.items() if precision in ps
                 and not (n == "openvino" and precision == "int8" and not calibrated)]
        raise ValueError(f"{precision} needs {' or '.join(wants)}: pip install '{EXTRAS[wants[0]]}'")
    if precision not in SUPPORTED[runtime]:
        others = [n for n, ps in SUPPORTED.items() if precision in ps]
        raise ValueError(f"--runtime {runtime} does not run {precision} (it runs {', '.join(SUPPORTED[runtime])}); "
                         f"{precision} runs on {', '.join(others)}")
    if gpu and runtime != "torch":
        raise ValueError(f"--runtime {runtime} runs on the CPU here; use --runtime torch with --device {device}")
    if runtime != "torch" and not available(runtime):
        raise ValueError(f"--runtime {runtime} is not installed: pip install '{EXTRAS[runtime]}'")
    if runtime == "openvino" and precision == "int8" and not calibrated:
        raise ValueError(OPENVINO_INT8_NEEDS_CALIBRATION)
    return runtime, "asked for"


def snapshot(model: nn.Module, weights: torch.dtype = torch.float32, log: Callable[[str], None] | None = None
             ) -> nn.Module:
    """A copy of `model` with all its state (weights, buffers, inference options such as token merging, hooks) in
    eval mode with `weights`-typed floating-point parameters: what a predictor runs, so that nothing done to the
    caller's model afterwards changes it, and nothing it does changes the caller's model. A cast of other weights
    to fp32 (a bf16 model into an fp32 predictor) is told to `log`."""
    snap = copy.deepcopy(model).eval()
    other = sorted({str(p.dtype).removeprefix("torch.") for p in snap.parameters() if p.is_floating_point()
                    and p.dtype != weights})
    if other and weights == torch.float32 and log is not None:
        log(f"note: the model's weights are {', '.join(other)}; this fp32 predictor runs an fp32 copy of them")
    return snap.to(weights) if other else snap


def inference_model(model: nn.Module, precision: str | precision_mod.Precision = "fp32",
                    compile: bool = False, fused: bool = True, device: str | torch.device | None = None,
                    log: Callable[[str], None] | None = None) -> nn.Module:
    """A snapshot of `model` (`snapshot`: the caller's model is left as it was, and later changes to it do not
    reach this one) ready to predict in torch: eval mode, on `device`, the precision's weights (bf16 for "bf16",
    fp32 otherwise), optionally compiled by inductor with its weights frozen into the graph (`FrozenCompiled`);
    fp32 on the CPU uncompiled runs its plain blocks with oneDNN's fused matmuls (`fused`, inference/cpu_fused.py).
    Feed it inputs of `input_dtype(precision)` (and run it under the precision's autocast context)."""
    prec = precision_mod.get(precision)
    model = snapshot(model, prec.weights, log)
    if device is not None:
        model = model.to(device)
    if compile:
        return FrozenCompiled(model)
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return fused_for_cpu(model) if fused and prec.name == "fp32" and on_cpu else model


class FrozenCompiled(nn.Module):
    """`model` compiled by torch.compile (inductor) with its weights frozen into the graph as constants: folded
    (casts of weights done once) and, on the CPU, prepacked for oneDNN's matmuls and convolution with their bias and
    activation fused (inductor's freezing passes). Inductor freezes only where its global
    `torch._inductor.config.freezing` is set while dynamo traces and grad is off (`is_parameter_freezing`): a
    `torch.compile(options={"freezing": True})` sets it for inductor alone, after dynamo has made the weights graph
    inputs, and freezes nothing. So every call runs under that setting (a recompile, for a new batch size, freezes
    too) and no_grad. The weights are read at the first call; one changed in place after it (`load_state_dict`, an
    in-place op; a move to another device or dtype) is refused at the next call (its copy in the graph would be
    stale): build a new one. (A change through `.data` bypasses the version counter this check reads.) The global
    setting is patched per call: a compile on another thread at the same moment would freeze too. A frozen graph
    keeps its weights after its predictor is dropped, until `torch._dynamo.reset()` (torch 2.13). It compiles with
    inductor's Python wrapper (the default): the C++ wrapper (`cpp_wrapper`) saves host time per call and compiles
    faster cold, but a frozen fp32 graph bypasses inductor's FX graph cache (its prepacked weights are mkldnn
    tensors), and the C++ wrapper's one library, keyed by the constants' identities, is then rebuilt whole in every
    new process, where the Python wrapper finds its kernels' libraries (benchmarks/results/compile_cpp_wrapper.md).
    A model carrying unmerged LoRA adapters is compiled merged: the graph is of a copy made at the first call with
    `merge_lora` (W + (alpha / r) B A, Hu et al. §4.1), so it has the plain model's matmuls and kernels, not two more
    per adapted projection; its logits equal the adapted model's up to fp32 rounding. The copy keeps the model's
    hooks and token merging; the check above reads the model's own tensors (its adapters' A and B included)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        call = FrozenCompiled._call
        # dynamo keeps compiled graphs per code object: one of this instance's own, so that no graph compiled from
        # the model's forward without freezing (a torch.compile(model) elsewhere in the process) is reused here,
        # and that other predictors' graphs do not count against dynamo's recompile limit (8) for this one
        own = types.FunctionType(call.__code__.replace(), call.__globals__, call.__name__)
        self.compiled = torch.compile(types.MethodType(own, self))
        self._frozen: list[tuple[str, torch.Tensor, int, torch.device, torch.dtype]] | None = None
        self._graph: list[nn.Module] = []  # what is compiled, set at the first call (a list: not a submodule)

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return self._graph[0](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._inductor import config as inductor_config  # imported by torch.compile already (seconds cold)

        if self._frozen is not None:
            self._check_unchanged()
        x = row_major(x)
        if self._frozen is None:  # the weights are read now: adapters merged into a copy (writable's rule)
            self._graph = [merge_lora(copy.deepcopy(self.model)) if lora_modules(self.model) else self.model]
        with inductor_config.patch(freezing=True), torch.no_grad():
            out = self.compiled(x)
        if self._frozen is None:
            state = (*self.model.named_parameters(), *self.model.named_buffers())
            self._frozen = [(n, t, t._version, t.device, t.dtype) for n, t in state]
        return out

    def _check_unchanged(self) -> None:
        for name, t, version, device, dtype in self._frozen:
            if t._version != version or t.device != device or t.dtype != dtype:
                raise RuntimeError(f"{name} changed after the compiled model froze its weights into the graph at its "
                                   "first call (the graph would answer with the old one); build a new predictor "
                                   "from the changed model (build_predictor / inference_model)")


class Predictor(nn.Module):
    """A model as it is served: `predictor(x)` takes fp32 images (B, C, H, W) and returns fp32 logits (B, K),
    whatever runtime and precision run inside. `description` says which (for logs and tables)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], runtime: str, precision: str,
                 description: str, module: nn.Module | None = None) -> None:
        super().__init__()
        self.fn, self.runtime, self.precision, self.description = fn, runtime, precision, description
        self.module = module  # the torch model, for the torch runtime (so .eval() / .to() reach it)
        self.eval()  # built for inference: a caller that restores the previous mode (train(was_training)) keeps it

    @torch.inference_mode()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def batch_dynamic(x: torch.Tensor) -> torch.Tensor:
    """`x` (an alias or a `row_major` copy: the caller's tensor is left unmarked) with its batch dimension marked
    dynamic for torch.compile, so that the first call compiles one graph for every batch size. Unmarked, the first
    batch compiles a graph for its size and the next size compiles a second, dynamic one: two compiles for any job
    whose last batch is short. A first batch of 1 is still compiled for its own (dynamo specializes sizes 0 and 1)."""
    x = row_major(x.detach())
    torch._dynamo.maybe_mark_dynamic(x, 0)
    return x


def _torch_predictor(model: nn.Module, precision: str, compile: bool, device: str | torch.device,
                     say: Callable[[str], None]) -> Predictor:
    prec = precision_mod.get(precision)  # looked up once; the model and its inputs follow it
    net = inference_model(model, prec, compile, device=device, log=say)
    prepare = batch_dynamic if compile else lambda x: x

    def run(x: torch.Tensor) -> torch.Tensor:
        with prec.context(device):
            return net(prepare(x.to(device, prec.input_dtype))).float()

    how = "eager"
    if compile:
        how = "torch.compile (inductor, weights frozen at the first call" + \
            ("; LoRA adapters merged for the graph)" if lora_modules(model) else ")")
    return Predictor(run, "torch", precision, f"torch {how}, {precision}", module=net)


def build_predictor(model: nn.Module, precision: str | None = "fp32", runtime: str | None = "torch", compile: bool = False,
                    device: str | torch.device = "cpu", threads: int | None = None,
                    log: Callable[[str], None] | None = None, n_images: int | None = None,
                    calibration: torch.Tensor | None = None, keep_float: int | tuple[str, ...] = 0,
                    int8_grid: str | None = None) -> Predictor:
    """`model` as a `Predictor` on `runtime` in `precision`: the one place where both are decided. "auto" for either
    is resolved here (`precision.resolve`, `resolve_runtime` with `n_images`, the size of the job); `runtime=None`
    is torch (the reference numbers), or onnxruntime for int8 (the portable int8; `auto` may pick OpenVINO). A
    runtime that `auto` chose but that cannot run this model (an exporter or graph compiler refusing it) falls back to torch, saying so; one
    asked for by name is refused with the reason. onnxruntime and OpenVINO run an ONNX export of `model` (fixed
    resolution, any batch) written to a temporary folder. `threads`: intra-op threads (default: torch's).
    `compile` applies to the torch runtime only. `log` is told every choice and why. `calibration` (normalised
    images of the user's data) makes int8 static, calibrated on them (`quantize_static_int8`), instead of dynamic.
    `keep_float` (int8 on onnxruntime / OpenVINO): the layers kept in float, mixed precision
    (`vitkit.inference.mixed.keep_float`: N, the N with the largest int8 error measured on `calibration`; or names).
    `int8_grid`: static int8's grid on onnxruntime (`vitkit.inference.export.INT8_GRIDS`). Every path runs a snapshot of `model` (`snapshot`): the caller's model is not changed (not even put in eval
    mode), and nothing done to it afterwards (weights, `set_token_merging`, hooks) changes the predictor."""
    say = log or (lambda _m: None)
    if isinstance(model, ExportedModel):
        if keep_float or int8_grid:
            flag = "--int8-keep-float" if keep_float else "--int8-grid"
            raise ValueError(f"{flag}: {model.path} is already exported; choose how it is quantised when exporting "
                             f"(vitkit export --precision int8 {flag} ...)")
        return _exported_predictor(model, precision, runtime, compile, device, threads, say, calibration)
    precision, why = precision_mod.resolve(precision, device)
    asked = runtime or ("onnxruntime" if precision == "int8" else "torch")
    default = runtime is None
    if asked != "auto":  # an option the asked runtime cannot take is refused before whether it is installed
        check_int8_grid(int8_grid, precision, calibration is not None, asked)
    runtime, rwhy = resolve_runtime(asked, precision, device, n_images, calibrated=calibration is not None)
    if default and runtime == "torch":
        rwhy = "the default: the reference numbers"
    elif default:
        rwhy = "the default for int8: the portable path (--runtime auto: the fastest measured on this CPU)"
    if asked == "auto" and compile and runtime != "torch":
        runtime, rwhy = "torch", "--compile asks for torch.compile"
    if asked == "auto" and int8_grid and runtime != "onnxruntime":
        runtime, rwhy = "onnxruntime", "--int8-grid is onnxruntime's static int8"
    set_threads(threads)
    if calibration is not None and precision != "int8":
        raise ValueError(f"calibration images are for int8 (static quantisation); precision is {precision}")
    check_keep_float(keep_float, precision, calibration is not None)
    check_int8_grid(int8_grid, precision, calibration is not None, runtime)
    try:
        net = _build(model, precision, runtime, compile, device, threads, say, calibration, keep_float, int8_grid)
    except Exception as e:  # noqa: BLE001 - an export or graph compiler refusing this model, reported below
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if asked != "auto" or runtime == "torch" or precision not in SUPPORTED["torch"]:
            raise ValueError(f"the {runtime} runtime could not run this model ({type(e).__name__}: {reason})") from e
        say(f"note: {runtime} could not run this model ({reason}); running it in torch")
        runtime, rwhy = "torch", f"{runtime} failed on this model"
        net = _build(model, precision, runtime, compile, device, threads, say)
    say(f"precision: {precision} ({why}); runtime: {net.description} ({rwhy})")
    return net


def _build(model: nn.Module, precision: str, runtime: str, compile: bool, device: str | torch.device,
           threads: int | None, say: Callable[[str], None], calibration: torch.Tensor | None = None,
           keep_float: int | tuple[str, ...] = 0, int8_grid: str | None = None) -> Predictor:
    if runtime == "torch":
        return _torch_predictor(model, precision, compile, device, say)
    if compile:
        raise ValueError(f"--compile applies to the torch runtime; {runtime} compiles the graph itself")
    t0 = time.perf_counter()
    backend = BACKENDS[runtime]
    mixed = None
    with tempfile.TemporaryDirectory(prefix="vitkit-") as tmp:
        snap = snapshot(model, torch.float32, say)
        path = backend.export(snap, Path(tmp) / f"model{backend.suffix}", 17)
        if precision == "int8":
            path, mixed = quantize_for(runtime, snap, path, Path(tmp) / f"model.int8{backend.suffix}", calibration,
                                       keep_float, say, int8_grid)
        run = backend.runner(path, precision, threads or torch.get_num_threads())
    say(f"{runtime}: exported and compiled the model in {time.perf_counter() - t0:.1f} s")
    what = "int8 (dynamic quantisation of MatMul/Gemm)" if precision == "int8" else precision
    if precision == "int8" and calibration is not None:
        what = f"int8 (static QDQ, calibrated on {len(calibration)} images)"
    if precision == "int8" and runtime == "openvino":
        what = f"int8 (NNCF post-training quantisation, calibrated on {len(calibration)} images)"
    if mixed is not None and mixed.layers:
        what = what[:-1] + f"; {len(mixed.layers)} layers kept in float)"
    return Predictor(run, runtime, precision, f"{runtime}, {what}")


def _exported_predictor(model: ExportedModel, precision: str | None, runtime: str | None, compile: bool,
                        device: str | torch.device, threads: int | None, say: Callable[[str], None],
                        calibration: torch.Tensor | None) -> Predictor:
    """An exported file as a `Predictor` on its own runtime, in its own precision: what a fixed graph cannot do
    (another runtime or precision, a GPU, compilation, calibration) is refused by name."""
    name, own = model.backend.name, model.precision
    if runtime not in (None, "auto", name):
        raise ValueError(f"--runtime {runtime}: {model.path} is an {model.backend.format} export, run by {name}")
    if torch.device(device).type != "cpu":
        raise ValueError(f"--device {device}: {model.path} runs on the CPU ({name})")
    if compile:
        raise ValueError(f"--compile applies to the torch runtime; {model.path} is a compiled graph ({name})")
    if calibration is not None:
        raise ValueError(f"--calibrate: {model.path} is already exported ({own}); calibrate when exporting "
                         "(vitkit export --precision int8 --calibrate ...)")
    usable = [own] if own == "int8" else [p for p in model.backend.precisions if p != "int8"]
    asked = own if precision in (None, "auto") else precision
    if asked not in usable:
        raise ValueError(f"--precision {precision}: {model.path} is an {own} {model.backend.format} graph, run in "
                         f"{' or '.join(usable)}" + ("; export the checkpoint with --precision int8 for int8"
                                                     if asked == "int8" else ""))
    set_threads(threads)
    t0 = time.perf_counter()
    run = model.runner(asked, threads or torch.get_num_threads())
    fn = run
    if model.normalize:
        fn = lambda x: torch.nn.functional.normalize(run(x), dim=-1)  # noqa: E731
    say(f"{name}: loaded {model.path} in {time.perf_counter() - t0:.1f} s")
    what = asked
    if asked == "int8":
        doc = exported_int8(model.path)
        kept = doc["keep_float"] if doc else []
        say(f"int8 mixed precision: layers kept in float: {', '.join(kept) or 'none'} ({doc['rule']})" if doc else
            f"int8: {model.path.name} does not record which layers it keeps in float (an older vitkit's export)")
        if doc and "smooth_quant" in doc:
            say(describe_int8(doc))
        what = f"int8, {len(kept)} layers kept in float" if kept else asked
    say(f"precision: {what} (the export's own); runtime: {name}, {what} ({model.path.name}: the file's own)")
    return Predictor(fn, name, asked, f"{name}, {what} ({model.path.name})")
