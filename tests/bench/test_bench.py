"""The benchmark harness runs and counts right. No timing assertions: speed is in BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import vitkit
from vitkit.bench import (
    Case,
    SuiteConfig,
    compare_precisions,
    format_table,
    peak_memory,
    peer_status,
    run_suite,
    time_interleaved,
    vit_flops,
)
from vitkit.bench.peers import PEERS
from vitkit.bench.suite import Result
from vitkit.cli import main
from vitkit.models.registry import vit_config

TINY = dict(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=10)


def _counted_flops(model: torch.nn.Module, x: torch.Tensor, train: bool) -> int:
    """torch's own FLOP counter; the math SDPA backend so that attention shows up as bmm."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        y = model(x)
        if train:
            y.sum().backward()
    return fc.get_total_flops()


@pytest.mark.parametrize("overrides", [{}, {"pooling": "gap"}, {"representation_size": 48}])
def test_flop_formula_matches_torch_flop_counter(overrides: dict) -> None:
    cfg = vitkit.ViTConfig(**TINY, **overrides)
    model = vitkit.VisionTransformer(cfg)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert _counted_flops(model, x, train=False) == 3 * vit_flops(cfg).forward
    # backward = 2x forward except the patch embedding, whose input needs no gradient
    f = vit_flops(cfg)
    assert _counted_flops(model, x, train=True) == 3 * (f.train_step - f.patch_embed)


def test_flops_of_b16_are_the_papers() -> None:
    f = vit_flops(vit_config("b", 16))
    assert f.forward / 1e9 == pytest.approx(35.2, abs=0.1)  # 17.6 GMACs
    assert f.train_step / 1e9 == pytest.approx(105.5, abs=0.2)
    assert vit_flops(vit_config("b", 16), img_size=384).forward > 3 * f.forward  # T^2 attention grows faster


def test_time_interleaved_collects_every_repeat() -> None:
    import time

    calls: list[str] = []
    t = time_interleaved({"a": lambda: calls.append("a") or time.sleep(0.02), "b": lambda: calls.append("b")},
                         warmup=1, repeats=3)
    assert calls == ["a", "b"] + ["a", "b"] * 3  # warm-up each, then round-robin
    assert len(t["a"].samples) == 3 and 0.019 <= t["a"].median < 0.5 and t["b"].median < 0.01
    assert t["a"].spread == (max(t["a"].samples) - min(t["a"].samples)) / t["a"].median


def test_impossible_or_noisy_rows_are_flagged_in_the_table() -> None:
    """A row above 100% of the measured roofline or with repeats spread over 25% says UNRELIABLE and why;
    the table says how many repeats each median came from."""
    case = Case("vit_ti16", 224, 8, "infer")
    ok = Result(case, "vitkit", "fp32", median_s=0.1, spread=0.10, img_per_s=80, gflops=90, roofline_frac=0.84, repeats=5)
    fast = Result(case, "hf-sdpa", "fp32", median_s=0.1, spread=0.05, img_per_s=80, gflops=140, roofline_frac=1.35,
                  repeats=5)
    noisy = Result(case, "hf-eager", "fp32", median_s=0.1, spread=6.16, img_per_s=80, gflops=50, roofline_frac=0.5,
                   repeats=3)
    assert ok.unreliable == "" and "135% of roofline is impossible" in fast.unreliable
    assert "spread 616% > 25%" in noisy.unreliable
    lines = format_table([ok, fast, noisy]).splitlines()
    assert "repeats" in lines[0]
    assert "UNRELIABLE" not in lines[2] and "UNRELIABLE: 135% of roofline" in lines[3] and "UNRELIABLE" in lines[4]
    assert lines[2].split()[-1] == "5" and lines[4].split()[-1] != "3"  # repeats column; notes after it


def test_peak_memory_counts_live_tensors() -> None:
    w = torch.zeros(1000, 1000)  # resident: 4 MB

    def fn() -> None:
        a = w + 1  # 4 MB
        b = a * 2  # 8 MB live
        del a
        c = b + 1  # 8 MB live again
        del b, c

    assert peak_memory(fn, [w]) == 3 * 4_000_000


def test_hf_peer_has_the_same_architecture() -> None:
    cfg = vitkit.ViTConfig(**TINY, gelu="exact")
    ours = sum(p.numel() for p in vitkit.VisionTransformer(cfg).parameters())
    hf = PEERS["hf-sdpa"](cfg)
    assert sum(p.numel() for p in hf.parameters()) == ours
    assert hf(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_missing_peer_is_skipped_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_timm(name: str, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if name.startswith("timm"):
            raise ImportError("torchvision wheels do not load")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_timm)
    assert peer_status(["timm"])["timm"].startswith("skipped: timm does not import")


def test_suite_runs_and_reports_ratios() -> None:
    cases = [Case("vit_ti16", 32, 2, "infer"), Case("vit_ti16", 32, 2, "infer", "bf16"), Case("vit_ti16", 32, 2, "train")]
    sc = SuiteConfig(cases, ["hf-sdpa", "timm"], warmup=1, repeats=1, min_repeats=1, peak_sizes=(256,), overrides={"depth": 2})
    peaks, results = run_suite(sc)
    assert set(peaks) == {"fp32", "bf16"}
    ok = [r for r in results if not r.note.startswith("skipped")]
    assert {(r.impl, r.precision) for r in ok} >= {("vitkit", "fp32"), ("vitkit", "bf16"), ("hf-sdpa", "bf16-autocast")}
    for r in ok:
        assert r.img_per_s > 0 and r.gflops > 0 and r.peak_mb > 0 and r.vs_vitkit > 0 and r.repeats == 1
        # the roofline fraction is against the best of the peaks measured before and after the cases
        dtype = "fp32" if r.precision == "fp32" else "bf16"
        assert r.roofline_frac == pytest.approx(r.gflops * 1e9 / peaks[dtype])
    assert all(r.vs_vitkit == 1.0 for r in ok if r.impl == "vitkit" and r.precision in ("fp32", "bf16"))
    table = format_table(results)
    assert "vitkit/impl" in table and "hf-sdpa" in table


def test_bf16_agrees_with_fp32() -> None:
    model = vitkit.VisionTransformer(vitkit.ViTConfig(**TINY))
    torch.nn.init.normal_(model.head.weight, std=0.5)
    x = torch.randn(64, 3, 32, 32)
    labels = torch.randint(0, 10, (64,))
    for a in compare_precisions(model, x, labels):
        assert a.n == 64 and 0.8 <= a.top1_agreement <= 1.0
        assert a.mean_abs_logit_diff < 0.05 and a.max_abs_logit_diff < 0.5  # bf16 keeps 8 bits of mantissa
        ref_acc = (model(x).argmax(-1) == labels).float().mean().item()
        assert a.reference_accuracy == pytest.approx(ref_acc) and abs(a.accuracy - ref_acc) <= 1 - a.top1_agreement
    assert next(model.parameters()).dtype == torch.float32  # the input model is untouched


def test_bench_command_prints_a_table(tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "bench.json"
    args = ["bench", "--models", "vit_ti16", "--img-size", "32", "--batch", "2", "--repeats", "1", "--warmup", "0",
            "--peak-sizes", "256"]  # the roofline's matmuls (and the int8 roof's) at 256, not 1024 and 2048
    assert main(args + ["--peers", "hf-sdpa", "--no-memory", "--json", str(out), "--markdown", str(tmp_path / "b.md"),
                        "--int8-roof"]) == 0
    text = capsys.readouterr().out
    assert "vitkit/impl" in text and "matmul peak" in text and "torch:" in text and "int8 " in text
    doc = json.loads(out.read_text())
    assert doc["peaks"]["int8"] > 0  # the int8 roof (onnxruntime's MatMulInteger) beside the float peaks
    assert doc["peak_sizes"] == [256]
    assert {r["impl"] for r in doc["results"]} == {"vitkit", "hf-sdpa"}
    assert (tmp_path / "b.md").read_text().startswith("| case |")


def test_bench_data_measures_the_loader_beside_the_model(tmp_path, capsys) -> None:  # noqa: ANN001
    """`vitkit bench --data PATH`: loader img/s for each worker count and RandAugment setting, the model's training
    img/s at the same batch, and a bound that follows from the two."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(48):
        d = tmp_path / "imgs" / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(d / f"{i}.jpg", quality=90)
    out = tmp_path / "data.json"
    assert main(["bench", "--data", str(tmp_path / "imgs"), "--batch", "8", "--img-size", "32", "--workers", "0,1",
                 "--data-model", "vit_ti16", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert [(r["randaugment"], r["workers"]) for r in rows] == [([0, 0.0], 0), ([0, 0.0], 1), ([2, 10.0], 0),
                                                                ([2, 10.0], 1)]
    assert all(r["img_per_s"] > 0 for r in rows) and doc["model_train_img_per_s"] > 0
    printed = capsys.readouterr().out
    for r in rows:  # the bound column says which side is slower
        want = "loader" if r["img_per_s"] < doc["model_train_img_per_s"] else "model"
        assert f"{r['img_per_s']:9.1f} {r['img_per_s_per_worker']:10.1f}  {want}" in printed
    assert "vit_ti16 training step (fp32, same batch)" in printed


def test_bench_merge_times_token_merging_beside_vitkit(tmp_path, capsys) -> None:  # noqa: ANN001
    """`vitkit bench --merge-rows 4,8`: vitkit with ToMe at each r, timed in the same interleaved rounds, with a ratio
    and no roofline fraction (its FLOPs are fewer than the unmerged count)."""
    out = tmp_path / "bench.json"
    args = ["bench", "--models", "vit_ti16", "--img-size", "64", "--batch", "2", "--repeats", "1", "--warmup", "0",
            "--peak-sizes", "256"]
    assert main(args + ["--peers", "none", "--no-memory", "--merge-rows", "4,8", "--json", str(out)]) == 0
    rows = {r["impl"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {"vitkit", "vitkit+tome4", "vitkit+tome8"}
    for name in ("vitkit+tome4", "vitkit+tome8"):
        assert rows[name]["img_per_s"] > 0 and rows[name]["vs_vitkit"] > 0
        assert rows[name]["roofline_frac"] is None or rows[name]["roofline_frac"] != rows[name]["roofline_frac"]
    assert "vitkit+tome8" in capsys.readouterr().out


SCRATCH_SCRIPT = """
import os, sys
from vitkit.utils.files import scratch_dir
for how in sys.argv[1:]:
    # each case a process of its own, forked from this one: it exits as a script does, through the interpreter's
    # exit (its atexit hooks), normally or by the exception
    pid = os.fork()
    if pid == 0:
        d = scratch_dir("vitkit-test-")
        (d / "graph.onnx").write_bytes(b"x" * 1000)
        print(how, d, flush=True)
        if how == "raise":
            raise RuntimeError("a benchmark that fails half way")
        sys.exit(0)
    print(how, "exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def test_a_scratch_folder_is_gone_when_its_process_exits(tmp_path: Path, preloaded) -> None:  # noqa: ANN001
    """The benchmark scripts' exported graphs (GBs a run) live in `scratch_dir`, which the process removes as it
    exits, also by an exception; and no script under benchmarks/ makes a temporary folder nobody removes. (The
    script runs as `python -c` would, forked from the suite's preloaded interpreter: tests.helpers.Preloaded, whose
    children end through the interpreter's exit steps, atexit's hooks among them.)"""
    r = preloaded.run(SCRATCH_SCRIPT, "ok", "raise", preload=["vitkit.utils.files"],
                      env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " exit " not in line)
    codes = dict(line.split(" exit ") for line in r.stdout.splitlines() if " exit " in line)
    for how in ("ok", "raise"):
        made = Path(lines.get(how, ""))
        assert made.parent == tmp_path and made.name.startswith("vitkit-test-"), r.stdout + r.stderr
        assert (codes[how] == "0") == (how == "ok"), r.stderr
        assert not made.exists(), f"{made} left behind ({how})"
    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    leaks = [p.name for p in bench.glob("*.py") if "mkdtemp(" in p.read_text()]
    assert leaks == [], f"use vitkit.utils.files.scratch_dir or a TemporaryDirectory in {leaks}"


@pytest.mark.slow
def test_malloc_threshold_script_sets_each_threshold_it_names(tmp_path: Path) -> None:
    """benchmarks/malloc_threshold.py, a seconds-long slice (2 steps, one round): each configuration's fine-tune
    runs in its own process with the threshold it names, as the run's header says."""
    from tests.helpers import digits_model

    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "malloc_threshold.py"
    # the script's own TMPDIR, to see its scratch go: a short folder, not tmp_path (the fine-tunes' loader workers
    # pass batches through a Unix socket under TMPDIR, whose path has a length limit: vitkit.data.loader)
    scratch = Path(tempfile.mkdtemp(prefix="vk-"))
    try:
        r = subprocess.run([sys.executable, str(script), "--model", str(tmp_path / "m"), "--modes", "glibc,4",
                            "--steps", "2", "--rounds", "1", "--json", str(tmp_path / "r.json")],
                           capture_output=True, text=True, env={**os.environ, "TMPDIR": str(scratch)})
        assert r.returncode == 0, r.stderr[-2000:]
        runs = json.loads((tmp_path / "r.json").read_text())["runs"]
        assert runs["glibc"][0]["malloc"] == "malloc: glibc's default"
        assert runs["4"][0]["malloc"].startswith("malloc: blocks >= 4096 KiB are mmapped"), runs["4"]
        assert [p.name for p in scratch.iterdir() if p.name.startswith("vitkit-malloc-")] == []  # its scratch is gone
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
