"""ONNX export with a dynamic batch axis, checked against PyTorch with onnxruntime, optional int8
dynamic quantisation, and a side-by-side speed measurement.

The resolution is fixed in the exported graph: resampling the position embeddings for another
grid is Python-level shape logic that tracing records at the export resolution. To serve another
resolution, export again with `img_size=` (the model's E_pos is resampled first, paper §3.2).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vitkit.bench.timing import Timing, time_interleaved
from vitkit.models.vit import VisionTransformer

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "logits"


def _ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise ValueError("ONNX export checks need onnxruntime: pip install 'vitkit[onnx]'") from e
    return onnxruntime


def export_onnx(
    model: VisionTransformer,
    path: str | Path,
    *,
    img_size: int | tuple[int, int] | None = None,
    opset: int = 17,
    dynamic_batch: bool = True,
) -> Path:
    """Write `model` (eval mode, fp32) as ONNX: input `pixel_values` (B, C, H, W), output `logits`.

    `img_size` moves a copy of the model to that resolution first (E_pos resampled in 2D).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).float().eval()
    if img_size is not None:
        model.set_img_size(img_size)
    cfg = model.config
    x = torch.zeros(2, cfg.in_chans, *cfg.img_size)
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
    return path


def ort_session(path: str | Path, threads: int | None = None, spin: bool = True):  # noqa: ANN201 - optional dep
    """An onnxruntime CPU session for `path` (threads: intra-op threads, default all cores).

    `spin=False` stops onnxruntime's worker threads from busy-waiting after a call. Timing it
    interleaved with PyTorch needs that: spinning threads keep the cores busy through PyTorch's turn,
    which slowed PyTorch and made onnxruntime look 5-179x faster than it is."""
    ort = _ort()
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def onnx_logits(session, images: torch.Tensor, batch_size: int = 256) -> torch.Tensor:  # noqa: ANN001
    """Logits of an onnxruntime `session` on `images`, batch by batch."""
    outs = [session.run(None, {INPUT_NAME: b.float().numpy()})[0] for b in images.split(batch_size)]
    return torch.from_numpy(np.concatenate(outs))


@dataclass
class ParityReport:
    batch_sizes: tuple[int, ...]
    max_abs_diff: float
    max_abs_logit: float
    top1_agreement: float


@torch.no_grad()
def check_parity(
    model: nn.Module, path: str | Path, batch_sizes: tuple[int, ...] = (1, 3), seed: int = 0
) -> ParityReport:
    """Run random inputs of several batch sizes through PyTorch and onnxruntime; compare logits."""
    sess = ort_session(path)
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    model = model.eval()
    worst, scale, agree, n = 0.0, 0.0, 0, 0
    for b in batch_sizes:
        x = torch.randn(b, cfg.in_chans, *cfg.img_size, generator=gen)
        ref = model(x.to(next(model.parameters()).dtype)).float()
        got = onnx_logits(sess, x)
        worst = max(worst, (got - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
        agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
        n += b
    return ParityReport(tuple(batch_sizes), worst, scale, agree / n)


def quantize_int8(src: str | Path, dst: str | Path) -> Path:
    """onnxruntime dynamic quantisation: int8 weights of MatMul/Gemm, activations quantised per call."""
    _ort()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return Path(dst)


def bench_onnx(
    model: nn.Module, paths: dict[str, str | Path], batch: int = 8, warmup: int = 1, repeats: int = 5
) -> dict[str, Timing]:
    """Time PyTorch eager and each ONNX file under onnxruntime on one batch, interleaved."""
    cfg = model.config
    x = torch.randn(batch, cfg.in_chans, *cfg.img_size)
    xn = x.numpy()
    model = model.eval()

    def torch_step() -> None:
        with torch.inference_mode():
            model(x)

    fns = {"pytorch": torch_step}
    for name, p in paths.items():
        sess = ort_session(p, threads=torch.get_num_threads(), spin=False)  # no busy-waiting into PyTorch's turn
        fns[name] = lambda sess=sess: sess.run(None, {INPUT_NAME: xn})
    return time_interleaved(fns, warmup=warmup, repeats=repeats)
