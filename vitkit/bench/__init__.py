"""Speed: timing harness, analytic FLOPs, matmul roofline, same-architecture peers, bf16 paths, exported files
timed beside eager (exported.py).

`vitkit bench` (vitkit/commands/bench.py) drives `run_suite`; see BENCHMARKS.md for results.
"""

from vitkit.bench.machine import cpu_has_native_bf16, int8_matmul_peak, machine_info, matmul_peak, resolve_device
from vitkit.bench.peers import PEERS, PeerUnavailable, peer_status
from vitkit.bench.precision import BENCH_PRECISIONS, Agreement, compare_precisions
from vitkit.bench.suite import Case, Result, SuiteConfig, default_cases, format_table, grid_cases, run_suite
from vitkit.bench.timing import Timing, peak_memory, time_interleaved
from vitkit.models.flops import FlopCount, vit_flops

__all__ = [
    "PEERS",
    "BENCH_PRECISIONS",
    "Agreement",
    "Case",
    "FlopCount",
    "PeerUnavailable",
    "Result",
    "SuiteConfig",
    "Timing",
    "compare_precisions",
    "cpu_has_native_bf16",
    "default_cases",
    "format_table",
    "grid_cases",
    "int8_matmul_peak",
    "machine_info",
    "matmul_peak",
    "peak_memory",
    "peer_status",
    "resolve_device",
    "run_suite",
    "time_interleaved",
    "vit_flops",
]
