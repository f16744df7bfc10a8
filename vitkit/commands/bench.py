"""Speed of vitkit beside same-architecture peers (Hugging Face ViT, timm when it imports):
inference img/s and latency, training-step throughput, peak memory, achieved FLOP/s and its ratio
to this machine's measured matmul peak in the same dtype. Peers are timed interleaved with vitkit
in one process; ratios are vitkit / peer (> 1: vitkit is faster). Peers and vitkit use exact GELU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vitkit.utils.options import (
    IMG_SIZE_METAVAR,
    MERGE_ROWS_HELP,
    MERGE_ROWS_METAVAR,
    TORCH_PRECISIONS,
    img_sizes_arg,
    merge_rows,
    merge_rows_arg,
    precision_list_arg,
)

HELP = "benchmark inference/training speed against HF and timm (table of ratios)"


MAX_PEAK_SIZE = 16384  # --peak-sizes: two fp32 matrices of 1 GiB each at most


def _csv(kind: type = str):  # noqa: ANN202
    return lambda s: [kind(v) for v in s.split(",") if v]


def _square_sizes(sizes: list) -> list[int]:
    """The benchmark's resolutions: square sides (an `HxW` with H != W is refused, naming it)."""
    out = []
    for s in sizes:
        h, w = (s, s) if isinstance(s, int) else s
        if h != w:
            raise ValueError(f"--img-size {h}x{w}: the benchmark times square images; give one side")
        out.append(h)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a ~1-minute smoke subset (ViT-Ti only)")
    p.add_argument("--models", type=_csv(), help="comma list, e.g. vit_ti16,vit_b16 (replaces the default suite)")
    p.add_argument("--img-size", type=img_sizes_arg, default=None, metavar=f"{IMG_SIZE_METAVAR},...",
                   help="comma list of square resolutions (default 224)")
    p.add_argument("--batch", type=_csv(int), default=None, help="comma list of batch sizes (default 1,8)")
    p.add_argument("--mode", type=_csv(), default=None, help="infer,train (default infer)")
    p.add_argument("--precision", type=precision_list_arg, default=None,
                   help=f"comma list of {', '.join(TORCH_PRECISIONS)} (default fp32)")
    p.add_argument("--peers", type=_csv(), default=None, help="hf-sdpa,hf-eager,timm or 'none' (default all)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile(vitkit) (compiles once per case)")
    p.add_argument("--compile-mode", default="default",
                   help="--compile: torch.compile's mode, e.g. max-autotune-no-cudagraphs (default: default)")
    p.add_argument("--grad-checkpoint", action="store_true",
                   help="training cases: activation checkpointing per block (vitkit and peers alike)")
    p.add_argument("--merge-rows", type=merge_rows_arg, default=None, metavar=MERGE_ROWS_METAVAR,
                   help=MERGE_ROWS_HELP)
    p.add_argument("--merge", type=merge_rows_arg, default=None, metavar=MERGE_ROWS_METAVAR,
                   help="deprecated: --merge-rows")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per implementation before timing (default: 1)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per implementation (medians reported)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    p.add_argument("--peak-sizes", type=_csv(int), default=None, metavar="N,...",
                   help="sizes n of the n x n x n matmuls whose fastest run is the roofline's peak (default 1024,2048)")
    p.add_argument("--int8-roof", action="store_true", help="also measure the CPU's int8 matmul roof (onnxruntime's "
                   "MatMulInteger, the kernel under its int8 graphs) and report it beside the float peaks")
    p.add_argument("--json", type=Path, default=None, help="write machine info, peaks and rows as JSON")
    p.add_argument("--markdown", type=Path, default=None, help="write the table as Markdown")
    p.add_argument("--data", default=None,
                   help="instead of the model suite: the input pipeline on this data (folder, shards, list, hf, ...): "
                   "loader img/s with 0, 1 and all-core workers, beside a ViT's training step at the same batch")
    p.add_argument("--data-model", default="vit_ti16", help="--data: the model whose training rate is shown")
    p.add_argument("--workers", type=_csv(int), default=None, help="--data: worker counts (default: 0,1,all cores)")


def run_data(args: argparse.Namespace) -> int:
    from vitkit.bench.loader import format_pipeline, measure_pipeline, train_rate
    from vitkit.bench.machine import machine_info
    from vitkit.data.datasets import DataConfig, open_splits

    batch = (args.batch or [64])[0]
    img = _square_sizes(args.img_size or [224])[0]
    ds = open_splits(DataConfig.from_flag(args.data, 3))["train"]
    info = machine_info()
    print("  ".join(f"{k}: {v}" for k, v in info.items()))
    print(f"{args.data}: {len(ds)} training images; batch {batch}, Inception crop to {img} px + flip")
    rows = measure_pipeline(ds, img, batch, args.workers)
    rate = train_rate(args.data_model, batch, img)
    print(format_pipeline(rows, args.data_model, rate))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"machine": info, "data": args.data, "batch": batch, "img_size": img, "rows": rows,
               "model": args.data_model, "model_train_img_per_s": rate}
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    from vitkit.bench.timing import MAX_BATCH, MAX_REPEATS
    from vitkit.utils import check_int

    for b in args.batch or []:  # before any model is built
        check_int("--batch", b, high=MAX_BATCH)
    for n in args.peak_sizes or []:
        check_int("--peak-sizes", n, high=MAX_PEAK_SIZE)
    check_int("--repeats", args.repeats, high=MAX_REPEATS)
    if args.data:
        return run_data(args)
    from vitkit.bench import (
        PEERS,
        SuiteConfig,
        cpu_has_native_bf16,
        default_cases,
        format_table,
        grid_cases,
        int8_matmul_peak,
        machine_info,
        peer_status,
        resolve_device,
        run_suite,
    )
    from vitkit.utils.hardware import set_threads

    set_threads(args.threads)
    device = resolve_device(args.device)
    peers = list(PEERS) if args.peers is None else [p for p in args.peers if p != "none"]
    precisions = args.precision or ["fp32"]
    if args.models or args.img_size or args.batch or args.mode or args.precision:
        cases = grid_cases(
            args.models or ["vit_b16"], _square_sizes(args.img_size or [224]), args.batch or [1, 8], args.mode or ["infer"], precisions
        )
    else:
        cases = default_cases(quick=args.quick)
    sc = SuiteConfig(
        cases=cases,
        peers=peers,
        device=str(device),
        warmup=args.warmup,
        repeats=min(args.repeats, 3) if args.quick else args.repeats,
        compile=args.compile,
        compile_mode=args.compile_mode,
        grad_checkpoint=args.grad_checkpoint,
        merge=merge_rows(args.merge_rows, args.merge),
        measure_memory=not args.no_memory,
        **({"peak_sizes": tuple(args.peak_sizes)} if args.peak_sizes else {}),
    )
    info = machine_info(device)
    print("  ".join(f"{k}: {v}" for k, v in info.items()))
    status = peer_status(peers)
    for name, s in status.items():
        print(f"peer {name}: {s}")
    if device.type == "cpu" and any(c.precision != "fp32" for c in cases) and not cpu_has_native_bf16():
        print("note: this CPU has no native bf16 matmul (no avx512_bf16 / amx_bf16): bf16 is emulated and slower")
    peaks, results = run_suite(sc, log=print)
    if args.int8_roof:
        peaks["int8"] = int8_matmul_peak("onnxruntime", sc.peak_sizes, sc.peak_repeats)
    print("matmul peak: " + ", ".join(f"{k} {v / 1e9:.1f} G{'OP' if k == 'int8' else 'FLOP'}/s"
                                      for k, v in peaks.items()))
    print("vitkit/impl = vitkit img/s / impl img/s; % roofline = achieved matmul FLOP/s / measured matmul peak")
    print(format_table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"machine": info, "peers": status, "peaks": peaks, "peak_sizes": list(sc.peak_sizes),
               "results": [r.to_dict() for r in results]}
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(format_table(results, markdown=True) + "\n")
    return 0
