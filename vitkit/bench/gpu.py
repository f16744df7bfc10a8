"""GPU paths of the benchmark, all of them PyTorch's own: regional `torch.compile` (each encoder block compiled once,
the identical blocks sharing its code), CUDA-graph replay for batch-1 latency, gradient checkpointing for the peers,
model FLOP utilisation against the GPU's dense bf16 peak and against a measured matmul, and fp32 agreement of a
device's logits with the CPU's. The model layer is untouched: fused SDPA is already its attention
(`F.scaled_dot_product_attention`), bf16 autocast is `vitkit.utils.precision`, fused AdamW is `suite.make_step`'s
optimizer on CUDA. `benchmarks/gpu_vit.py` drives these; BENCHMARKS.md ("On a GPU") has the results."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from vitkit.bench.timing import Timing, time_interleaved

# Dense (no sparsity) bf16 tensor-core peak of the GPUs we have measured on, TFLOP/s, from NVIDIA's datasheets;
# the SXM parts (nvidia-smi names them plainly) come last so that a PCIe or NVL name matches its own row first.
DENSE_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H200 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("A100", 312.0),
)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def dense_bf16_peak(device_name: str) -> float | None:
    """The datasheet dense bf16 peak in FLOP/s of a GPU called `device_name`; None for one not in the table."""
    for key, tflops in DENSE_BF16_TFLOPS:
        if key in device_name:
            return tflops * 1e12
    return None


def block_list(model: nn.Module) -> nn.ModuleList | nn.Sequential:
    """The encoder's blocks: the `nn.ModuleList` or `nn.Sequential` holding the most parameters whose members are
    all of one class (vitkit's `blocks` list, timm's `blocks` Sequential, transformers' encoder layers)."""
    lists = [m for m in model.modules() if isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) > 0
             and len({type(b) for b in m}) == 1]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no nn.ModuleList or nn.Sequential of identical blocks")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def compile_blocks(model: nn.Module, mode: str = "default", backend: str = "inductor") -> nn.Module:
    """Regional compilation: `torch.compile` each encoder block in place (the same Python code for every block,
    so the blocks after the first reuse its compiled kernels: a fraction of a whole-model compile's time). The
    patch embedding and head stay eager (< 1% of the FLOPs). Returns `model`."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}; got {mode!r}")
    opts: dict[str, Any] = {"backend": backend, "dynamic": False}
    if backend == "inductor" and mode != "default":
        opts["mode"] = mode
    for blk in block_list(model):
        blk.compile(**opts)
    return model


def graphed_call(model: nn.Module, x: torch.Tensor, warmup: int = 3) -> Callable[[], torch.Tensor]:
    """A zero-argument callable replaying one CUDA graph of `model(x)` (no autograd): the launch overhead of a small
    batch's few hundred kernels goes, the kernels stay. `x` is copied into the graph's static input once, which the
    callable keeps alive (`.static_input`): freed, its memory would be reused and the graph would read garbage."""
    if x.device.type != "cuda":
        raise ValueError(f"CUDA graphs need a CUDA tensor; the input is on {x.device}")
    static = x.clone()
    side = torch.cuda.Stream(x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(warmup):
            model(static)
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = model(static)

    def replay() -> torch.Tensor:
        graph.replay()  # reads `static`: this closure must hold it, or the allocator hands its memory to others
        return out

    replay.static_input = static  # type: ignore[attr-defined]

    return replay


def time_throughput(
    fns: dict[str, Callable[[], Any]], iters: int, samples: int, warmup: int, device: torch.device | str
) -> dict[str, Timing]:
    """Seconds per call of each callable: `samples` interleaved samples (round-robin), each `iters` calls back to
    back between two device synchronisations, divided by `iters` (the launch queue stays full within a sample)."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")

    def many(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(iters):
                fn()
        return run

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    timed = time_interleaved({k: many(f) for k, f in fns.items()}, warmup=0, repeats=samples, device=device)
    return {k: Timing([s / iters for s in t.samples]) for k, t in timed.items()}


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """Within the block, CUDA float32 matmuls and convolutions are float32 (no TF32); restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _rel(a: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    d = (a.double() - ref.double()).abs()
    return {"max_abs_over_max_ref": (d.max() / ref.double().abs().max()).item(),
            "norm_rel": (d.norm() / ref.double().norm()).item()}


def logits_agreement(model: nn.Module, x: torch.Tensor, device: torch.device | str) -> dict[str, Any]:
    """fp32 logits of `model` on `device` (TF32 off) against the same model's fp32 logits on the CPU, each also against
    a float64 CPU reference: max |diff| / max |ref| and ||diff|| / ||ref||. `model` is not modified."""
    model = model.eval()
    with torch.no_grad():
        cpu = model.float()(x.float())
        ref = copy.deepcopy(model).double()(x.double())
        on_dev = copy.deepcopy(model).to(device)
        with exact_fp32():
            dev = on_dev(x.to(device)).cpu()
    return {"device": str(device), "shape": list(cpu.shape), "device_vs_cpu": _rel(dev, cpu),
            "device_vs_fp64": _rel(dev, ref), "cpu_vs_fp64": _rel(cpu, ref)}


def mfu(img_per_s: float, flops_per_img: float, peak: float | None) -> float | None:
    """Model FLOP utilisation: achieved matmul FLOP/s (analytic count, `vitkit.models.flops`) over `peak`."""
    return img_per_s * flops_per_img / peak if peak else None
