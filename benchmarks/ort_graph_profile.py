"""Why vitkit's exported ViT ran behind Hugging Face's exported ViT on onnxruntime, and why static (QDQ) int8 ran
behind dynamic int8: the graphs op by op, for BENCHMARKS.md "The onnxruntime gap, profiled".

    python benchmarks/ort_graph_profile.py [--model vit_b16] [--batch 8] [--repeats 5] [--json F]

The exports and quantisations run first; the profiling and timing then hold /tmp/vitkit_bench.lock (`--lock`), the
lock the machine's timed jobs share, so that no other timed job runs beside them.

For each graph (vitkit's export as it was: opset 17, SDPA's scale computed from the shape at run time; with only
the constant scale; as it is now: opset 20 + constant scale; vitkit with the exact GELU, like for like with HF's;
Hugging Face's ViTForImageClassification exported by the same exporter), in fp32, dynamic int8 and static int8
(QDQ as it was: int8 outputs of every MatMul; as it is now: float outputs), it reports

- the nodes onnxruntime runs after its own graph optimisation (its saved optimised model), by op type;
- onnxruntime's profiler (`enable_profiling`): time per op type per call;
- img/s, all graphs timed interleaved in one process (medians of `--repeats` rounds; no spinning threads).

The weights are random, each tensor distinct (a tensor of all ones or zeros would be shared by the exporter and
change the graph). All graphs of one model compute the same function (checked: max |logit difference| printed).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.bench.peers import PEERS
from vitkit.bench.timing import time_interleaved
from vitkit.inference.export import DEFAULT_OPSET, export_onnx, ort_session, quantize_int8, quantize_static_int8
from vitkit.models import create_model
from vitkit.models.registry import vit_config
from vitkit.models.vit import Attention
from vitkit.utils.files import scratch_dir


def _distinct(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return model.eval()


@contextlib.contextmanager
def _shape_scale(model: torch.nn.Module):  # noqa: ANN202
    """vitkit's attention as it was exported before: SDPA's scale left to SDPA (computed from q's shape in the
    graph); each layer's own scale given back after."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    saved = [m.sdpa_scale for m in layers]
    for m in layers:
        m.sdpa_scale = None
    try:
        yield layers
    finally:
        for m, scale in zip(layers, saved):
            m.sdpa_scale = scale


def _hf_export(model: torch.nn.Module, path: Path, opset: int) -> Path:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(2, 3, 224, 224),), str(path), input_names=["pixel_values"],
                          output_names=["logits"], dynamic_axes={"pixel_values": {0: "b"}}, opset_version=opset,
                          dynamo=False)
    return path


def ort_nodes(path: Path) -> dict[str, int]:
    """Op type -> count of the graph onnxruntime runs (after its graph optimisations) for `path`."""
    import onnx
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.optimized_model_filepath = str(path.with_suffix(".ortopt.onnx"))
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    nodes = onnx.load(opts.optimized_model_filepath).graph.node
    return dict(collections.Counter(n.op_type for n in nodes).most_common())


def ort_profile(path: Path, x: np.ndarray, runs: int, threads: int) -> dict[str, float]:
    """Op type -> ms per call by onnxruntime's profiler over `runs` calls (after one warm-up)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    opts.profile_file_prefix = str(path.with_suffix(""))
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    sess.run(None, {"pixel_values": x})
    for _ in range(runs):
        sess.run(None, {"pixel_values": x})
    trace = json.loads(Path(sess.end_profiling()).read_text())
    per: dict[str, float] = collections.defaultdict(float)
    for ev in trace:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            per[ev["args"]["op_name"]] += ev["dur"] / 1e3 / (runs + 1)
    return dict(sorted(per.items(), key=lambda t: -t[1]))


def build(model_name: str, tmp: Path, calib: torch.Tensor) -> tuple[dict[str, Path], dict[str, Any]]:
    """The graphs compared, by label; and the notes on each."""
    size, patch = model_name[4:-2], int(model_name[-2:])
    tanh = _distinct(create_model(model_name), 0)
    exact = _distinct(create_model(model_name, gelu="exact"), 0)
    hf = _distinct(PEERS["hf-eager"](vit_config(size, patch, gelu="exact")), 0)
    g: dict[str, Path] = {}
    with _shape_scale(tanh):
        g["vitkit tanh, before (opset 17, scale from shape)"] = export_onnx(tanh, tmp / "before.onnx", opset=17)
    g["vitkit tanh, constant scale, opset 17"] = export_onnx(tanh, tmp / "scale17.onnx", opset=17)
    g["vitkit tanh, now (opset 20, constant scale)"] = export_onnx(tanh, tmp / "now.onnx")
    g["vitkit exact GELU, now"] = export_onnx(exact, tmp / "exact.onnx")
    g["HF ViT exact GELU (opset 17)"] = _hf_export(hf, tmp / "hf.onnx", 17)
    g["HF ViT exact GELU (opset 20)"] = _hf_export(hf, tmp / "hf20.onnx", DEFAULT_OPSET)
    for label, src in (("vitkit tanh, now", tmp / "now.onnx"), ("vitkit exact GELU, now", tmp / "exact.onnx"),
                       ("HF ViT exact GELU", tmp / "hf20.onnx")):
        stem = src.stem
        g[f"{label} int8-dyn"] = quantize_int8(src, tmp / f"{stem}.dyn.onnx")
        with _int8_outputs():
            g[f"{label} int8-static, before (int8 MatMul outputs)"] = quantize_static_int8(
                src, tmp / f"{stem}.st0.onnx", calib)
        g[f"{label} int8-static, now (float MatMul outputs)"] = quantize_static_int8(src, tmp / f"{stem}.st.onnx", calib)
    # each graph against its fp32 source (int8: the error of the quantisation)
    x = calib[:2].numpy()
    refs = {"vitkit tanh": tanh, "vitkit exact": exact, "HF": hf}
    notes = {}
    for label, path in g.items():
        ref = refs["HF" if label.startswith("HF") else "vitkit exact" if "exact" in label else "vitkit tanh"]
        with torch.no_grad():
            want = ref(calib[:2]).numpy()
        got = ort_session(path, threads=2).run(None, {"pixel_values": x})[0]
        notes[label] = {"max_abs_diff_to_torch": float(np.abs(got - want).max())}
    return g, notes


@contextlib.contextmanager
def _int8_outputs():  # noqa: ANN202
    """The static quantisation as it was: every quantised MatMul's output quantised too (onnxruntime then runs
    QLinearMatMul -> DequantizeLinear -> Add)."""
    import onnxruntime.quantization as q

    real = q.quantize_static

    def old(*a, extra_options=None, **k):  # noqa: ANN002, ANN003, ANN202
        extra = dict(extra_options or {})
        extra.pop("OpTypesToExcludeOutputQuantization", None)
        return real(*a, extra_options=extra, **k)

    q.quantize_static = old
    try:
        yield
    finally:
        q.quantize_static = real


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_b16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile-runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--lock", default="/tmp/vitkit_bench.lock", help="the timed jobs' shared lock file")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    tmp = scratch_dir("vitkit-ortprof-")
    calib = torch.randn(16, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    graphs, notes = build(a.model, tmp, calib)
    print(f"exported and quantised in {time.perf_counter() - t0:.0f} s", flush=True)
    x = torch.randn(a.batch, 3, 224, 224, generator=torch.Generator().manual_seed(2)).numpy()
    with open(a.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"holding {a.lock}", flush=True)
        rows = timed(graphs, notes, x, a)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads,
                                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                      "load_average": os.getloadavg(), "rows": rows}, indent=1))


def timed(graphs: dict[str, Path], notes: dict[str, Any], x: np.ndarray, a: argparse.Namespace) -> dict[str, Any]:
    """Node counts, onnxruntime's profile and the interleaved img/s of every graph."""
    rows = {}
    for label, path in graphs.items():
        rows[label] = {**notes[label], "nodes": ort_nodes(path),
                       "profile_ms": ort_profile(path, x, a.profile_runs, a.threads)}
        top = ", ".join(f"{k} {v:.1f}" for k, v in list(rows[label]["profile_ms"].items())[:8])
        print(f"{label}: {sum(rows[label]['nodes'].values())} nodes; ms per call: {top}", flush=True)
    fns = {}
    for label, path in graphs.items():
        sess = ort_session(path, threads=a.threads, spin=False)
        fns[label] = (lambda s: lambda: s.run(None, {"pixel_values": x}))(sess)
    t = time_interleaved(fns, warmup=1, repeats=a.repeats,
                         progress=lambda m: print(f"  {m}", flush=True) if "repeat" in m else None)
    base = a.batch / t["vitkit tanh, before (opset 17, scale from shape)"].median
    for label, tm in t.items():
        rows[label].update(img_per_s=a.batch / tm.median, vs_before=a.batch / tm.median / base, spread=tm.spread)
        print(f"{label:70s} {a.batch / tm.median:6.2f} img/s  {a.batch / tm.median / base:5.2f}x  "
              f"spread {100 * tm.spread:.0f}%  max|diff| {rows[label]['max_abs_diff_to_torch']:.1e}", flush=True)
    return rows


if __name__ == "__main__":
    main()
