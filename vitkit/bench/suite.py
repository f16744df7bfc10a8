"""The benchmark suite behind `vitkit bench`: inference and training throughput of vitkit beside
same-architecture peers, timed interleaved in one process, with achieved FLOP/s against the
machine's measured matmul peak in the same dtype."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from vitkit.bench.gpu import COMPILE_MODES
from vitkit.bench.machine import matmul_peak, resolve_device
from vitkit.bench.peers import PEERS, PeerUnavailable, build_vitkit, enable_grad_checkpointing
from vitkit.bench.precision import BENCH_PRECISIONS
from vitkit.bench.timing import MAX_SPREAD, peak_memory, time_interleaved
from vitkit.models.flops import vit_flops
from vitkit.models.registry import canonical_name, vit_config
from vitkit.models.vit import ViTConfig
from vitkit.utils.hardware import fused_adam_ok
from vitkit.utils.precision import autocast, get, input_dtype

VITKIT = "vitkit"
COMPILED = "vitkit+compile"
MERGED = "vitkit+tome"  # + r: vitkit with token merging (ToMe), r tokens per block (models/tome.py)


@dataclass(frozen=True)
class Case:
    """One measurement: a model at a resolution and batch, inference or a training step, a precision."""

    model: str  # registry name, e.g. "vit_b16"
    img_size: int
    batch: int
    mode: str  # "infer" | "train"
    precision: str = "fp32"  # vitkit.utils.precision's names: fp32, bf16, bf16-autocast

    @property
    def label(self) -> str:
        return f"{self.model}@{self.img_size} b{self.batch} {self.mode} {self.precision}"


@dataclass
class Result:
    case: Case
    impl: str  # "vitkit", "vitkit+compile", "hf-sdpa", ...
    precision: str  # what this implementation actually ran ("bf16-autocast" for peers of a bf16 case)
    params: int = 0
    median_s: float = float("nan")
    spread: float = float("nan")
    img_per_s: float = float("nan")
    gflops: float = float("nan")  # achieved matmul GFLOP/s
    roofline_frac: float = float("nan")  # achieved / measured matmul peak in the same dtype
    peak_mb: float = float("nan")
    vs_vitkit: float = float("nan")  # vitkit throughput / this throughput (for peers: vitkit / peer)
    repeats: int = 0  # timed repeats behind the median
    note: str = ""

    @property
    def unreliable(self) -> str:
        """Why this row's figures cannot be trusted ('' when they can): above the measured roofline, which
        cannot happen (the peak was measured low), or repeats that disagree by more than 25%."""
        why = []
        if self.roofline_frac == self.roofline_frac and self.roofline_frac > 1.0:
            why.append(f"{100 * self.roofline_frac:.0f}% of roofline is impossible")
        if self.spread == self.spread and self.spread > MAX_SPREAD:
            why.append(f"repeats spread {100 * self.spread:.0f}% > {100 * MAX_SPREAD:.0f}%")
        return "; ".join(why)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["case"] = asdict(self.case)
        return d


@dataclass
class SuiteConfig:
    cases: list[Case]
    peers: list[str] = field(default_factory=lambda: list(PEERS))
    device: str = "auto"
    warmup: int = 1
    repeats: int = 5
    min_repeats: int = 3
    case_budget_s: float = 40.0  # fewer repeats (not below min_repeats) when a case would take longer
    compile: bool = False
    compile_mode: str = "default"  # torch.compile's mode for vitkit+compile (gpu.COMPILE_MODES)
    grad_checkpoint: bool = False  # training cases: activation checkpointing per block, vitkit and peers alike
    merge: tuple[int, ...] = ()  # token merging: also time vitkit merging each r tokens per block (inference)
    measure_memory: bool = True
    peak_sizes: tuple[int, ...] = (1024, 2048)  # square matmul sizes for the roofline
    peak_repeats: int = 10  # the peak is the fastest of these (per size), measured before and after the cases
    overrides: dict[str, Any] = field(default_factory=dict)  # ViTConfig overrides for every case (tests)

    def __post_init__(self) -> None:
        unknown = [p for p in self.peers if p not in PEERS]
        if unknown:
            raise ValueError(f"unknown peers {unknown}; known: {list(PEERS)}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {self.compile_mode!r}; known: {list(COMPILE_MODES)}")
        bad = sorted({c.precision for c in self.cases} - set(BENCH_PRECISIONS))
        if bad:
            raise ValueError(f"unknown precision {bad}; known: {list(BENCH_PRECISIONS)}")


def config_for(case: Case, gelu: str = "exact", **overrides: Any) -> ViTConfig:
    """The vitkit config of `case`; GELU exact by default, as HF's "gelu" and timm's nn.GELU."""
    name = canonical_name(case.model)
    if not name.startswith("vit_") or name[4:].rstrip("0123456789") == name[4:]:
        raise ValueError(f"bench cases take plain ViT names like vit_b16, got {case.model!r}")
    variant = name[4:].rstrip("0123456789")
    patch = int(name[4 + len(variant) :])
    return vit_config(variant, patch, img_size=case.img_size, gelu=gelu, **overrides)


def default_cases(quick: bool = False) -> list[Case]:
    """The issue's suite: Ti/S/B at 224 (batch 1 and 8), B at 384 (batch 1) in fp32; B/16 batch 8
    in bf16; training steps of Ti and S. `quick`: a one-minute smoke subset."""
    if quick:
        return [
            Case("vit_ti16", 224, 1, "infer"),
            Case("vit_ti16", 224, 8, "infer"),
            Case("vit_ti16", 224, 8, "infer", "bf16"),
            Case("vit_ti16", 224, 8, "train"),
        ]
    cases = [Case(m, 224, b, "infer") for m in ("vit_ti16", "vit_s16", "vit_b16") for b in (1, 8)]
    cases += [Case("vit_b16", 384, 1, "infer"), Case("vit_b16", 224, 8, "infer", "bf16")]
    cases += [Case(m, 224, 8, "train") for m in ("vit_ti16", "vit_s16")]
    return cases


def grid_cases(
    models: Iterable[str],
    img_sizes: Iterable[int],
    batches: Iterable[int],
    modes: Iterable[str],
    precisions: Iterable[str],
) -> list[Case]:
    """Every combination of the given axes."""
    return [Case(*c) for c in itertools.product(models, img_sizes, batches, modes, precisions)]


def _impls(case: Case, peers: list[str], compile_: bool, merge: tuple[int, ...] = ()) -> list[tuple[str, str]]:
    """(implementation, precision it runs) for a case. In a bf16 case vitkit runs bf16 weights and,
    beside it, bf16 autocast; peers run autocast (their standard bf16 path)."""
    prec = get(case.precision, BENCH_PRECISIONS).name
    if prec == "fp32":
        out = [(VITKIT, "fp32")]
    elif case.mode == "train":  # bf16 weights without fp32 master weights is not a training path
        out = [(VITKIT, "bf16-autocast")]
    else:
        out = [(VITKIT, "bf16"), (VITKIT, "bf16-autocast")] if prec == "bf16" else [(VITKIT, prec)]
    if compile_:
        out.append((COMPILED, out[0][1]))
    if case.mode == "infer":
        out += [(f"{MERGED}{r}", out[0][1]) for r in merge if r > 0]
    peer_prec = "fp32" if prec == "fp32" else "bf16-autocast"
    # HF's eager attention is reported beside its SDPA for fp32 inference only (it is the slower of the two)
    out += [(p, peer_prec) for p in peers if p != "hf-eager" or (case.mode == "infer" and prec == "fp32")]
    return out


def make_step(
    model: nn.Module, case: Case, precision: str, device: torch.device, num_classes: int
) -> tuple[Callable[[], Any], Callable[[], list[torch.Tensor]]]:
    """A zero-argument callable doing one inference batch or one training step, and one listing
    the tensors that stay resident between calls (for the memory count)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(case.batch, 3, case.img_size, case.img_size, generator=gen).to(device, input_dtype(precision))
    if case.mode == "infer":
        model.eval()

        def infer() -> Any:
            with torch.inference_mode(), autocast(precision, device):
                return model(x)

        return infer, lambda: [x, *model.parameters(), *model.buffers()]
    model.train()
    y = torch.randint(0, num_classes, (case.batch,), generator=gen).to(device)
    # on CUDA the fused AdamW (one kernel for every parameter's update); elsewhere torch's default (foreach)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam_ok(params) or None)

    def train() -> Any:
        opt.zero_grad(set_to_none=True)
        with autocast(precision, device):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        return loss

    def resident() -> list[torch.Tensor]:
        state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        return [x, y, *model.parameters(), *model.buffers(), *state]

    return train, resident


def _build(impl: str, cfg: ViTConfig) -> nn.Module:
    if impl in (VITKIT, COMPILED):
        return build_vitkit(cfg)
    if impl.startswith(MERGED):
        model = build_vitkit(cfg)
        model.set_token_merging(int(impl[len(MERGED):]))
        return model
    return PEERS[impl](cfg)


def run_case(case: Case, sc: SuiteConfig, peaks: dict[str, float], log: Callable[[str], None]) -> list[Result]:
    """Time every implementation of one case, interleaved; fill in FLOP/s, memory and ratios."""
    device = resolve_device(sc.device)
    cfg = config_for(case, **sc.overrides)
    flops_per_img = vit_flops(cfg).forward * (3 if case.mode == "train" else 1)
    results: list[Result] = []
    steps: dict[str, Callable[[], Any]] = {}
    keys: dict[str, Result] = {}
    for impl, prec in _impls(case, sc.peers, sc.compile, sc.merge):
        key = f"{impl}[{prec}]"
        res = Result(case, impl, prec)
        results.append(res)
        try:
            torch.manual_seed(0)
            model = _build(impl, cfg).to(device, input_dtype(prec))
        except PeerUnavailable as e:
            res.note = f"skipped: {e}"
            continue
        res.params = sum(p.numel() for p in model.parameters())
        if sc.grad_checkpoint and case.mode == "train":
            enable_grad_checkpointing(model)
        if impl == COMPILED:
            model = torch.compile(model, mode=None if sc.compile_mode == "default" else sc.compile_mode)
        step, resident = make_step(model, case, prec, device, cfg.num_classes)
        if sc.measure_memory and impl != COMPILED:
            step()  # the optimizer allocates its state on the first step
            res.peak_mb = peak_memory(step, resident(), device) / 2**20
        if impl == COMPILED:
            t0 = time.perf_counter()
            step()
            res.note = f"compile {time.perf_counter() - t0:.0f}s"
        steps[key] = step
        keys[key] = res
    if not steps:
        return results
    # budget the repeats from one timed call of everything
    t0 = time.perf_counter()
    for step in steps.values():
        step()
    per_round = time.perf_counter() - t0
    repeats = max(sc.min_repeats, min(sc.repeats, int(sc.case_budget_s / max(per_round, 1e-9))))
    timings = time_interleaved(steps, warmup=max(sc.warmup - 1, 0), repeats=repeats, device=device, progress=log)
    for key, t in timings.items():
        res = keys[key]
        res.median_s, res.spread, res.repeats = t.median, t.spread, len(t.samples)
        res.img_per_s = case.batch / t.median
        res.gflops = flops_per_img * case.batch / t.median / 1e9
        if res.impl.startswith(MERGED):  # fewer FLOPs than the unmerged count: no roofline fraction
            res.gflops = float("nan")
            continue
        dtype = "fp32" if res.precision == "fp32" else "bf16"
        if dtype in peaks:
            res.roofline_frac = res.gflops * 1e9 / peaks[dtype]
    base = next((r for r in results if r.impl == VITKIT and r.img_per_s == r.img_per_s), None)
    if base is not None:
        for r in results:
            r.vs_vitkit = base.img_per_s / r.img_per_s if r.img_per_s == r.img_per_s else float("nan")
    return results


def run_suite(sc: SuiteConfig, log: Callable[[str], None] | None = None) -> tuple[dict[str, float], list[Result]]:
    """Measure the matmul peaks (for the dtypes the cases use), then every case, then the peaks again.
    Returns (peaks in FLOP/s by dtype name, results).

    The roofline is the best of both peak measurements (each the fastest of several repeats, the second
    one after the models have warmed the machine up), so a peak measured low while the thread pool or
    the clock was still ramping up cannot put a model above 100%. Rows that still exceed it, or whose
    repeats spread by more than 25%, are flagged unreliable in the table."""
    device = resolve_device(sc.device)
    dtypes = sorted({"fp32" if c.precision == "fp32" else "bf16" for c in sc.cases})

    def measure() -> dict[str, float]:
        return {d: matmul_peak(torch.float32 if d == "fp32" else torch.bfloat16, device, sc.peak_sizes,
                               repeats=sc.peak_repeats) for d in dtypes}

    peaks = measure()
    if log:
        log("matmul peak (before): " + ", ".join(f"{d} {v / 1e9:.1f} GFLOP/s" for d, v in peaks.items()))
    results: list[Result] = []
    bar = tqdm(sc.cases, desc="bench", unit="case", disable=log is None)
    for case in bar:
        bar.set_postfix_str(case.label)

        def progress(msg: str, label: str = case.label) -> None:
            bar.set_postfix_str(f"{label}: {msg}")

        results += run_case(case, sc, peaks, progress)
    after = measure()
    if log:
        log("matmul peak (after): " + ", ".join(f"{d} {v / 1e9:.1f} GFLOP/s" for d, v in after.items()))
    for d in dtypes:
        if after[d] > peaks[d]:
            peaks[d] = after[d]
    for r in results:  # the roofline fraction against the final (best) peak
        dtype = "fp32" if r.precision == "fp32" else "bf16"
        if r.gflops == r.gflops and dtype in peaks:
            r.roofline_frac = r.gflops * 1e9 / peaks[dtype]
    return peaks, results


def _fmt(v: float, spec: str) -> str:
    return "-" if v != v else format(v, spec)


def format_table(results: list[Result], markdown: bool = False) -> str:
    """One row per (case, implementation): img/s, median latency, spread of the repeats
    ((max - min) / median), GFLOP/s, % of roofline, peak MB, ratio, the number of timed repeats, and
    "UNRELIABLE: why" in the note of a row above 100% of the roofline or with a spread over 25%."""
    head = [
        "case",
        "impl",
        "precision",
        "params M",
        "img/s",
        "latency ms",
        "spread %",
        "GFLOP/s",
        "% roofline",
        "peak MB",
        "vitkit/impl",
        "repeats",
        "note",
    ]
    rows = [
        [
            r.case.label.rsplit(" ", 1)[0],
            r.impl,
            r.precision,
            _fmt(r.params / 1e6, ".1f") if r.params else "-",
            _fmt(r.img_per_s, ".2f"),
            _fmt(r.median_s * 1e3, ".0f"),
            _fmt(r.spread * 100, ".0f"),
            _fmt(r.gflops, ".1f"),
            _fmt(r.roofline_frac * 100, ".0f"),
            _fmt(r.peak_mb, ".0f"),
            _fmt(r.vs_vitkit, ".2f"),
            str(r.repeats) if r.repeats else "-",
            "; ".join(x for x in (("UNRELIABLE: " + r.unreliable) if r.unreliable else "", r.note) if x),
        ]
        for r in results
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt_row = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt_row(head), fmt_row(["-" * w for w in widths])] + [fmt_row(r) for r in rows])
