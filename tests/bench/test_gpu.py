"""GPU paths of the benchmark (vitkit/bench/gpu.py, benchmarks/gpu_vit.py). The CPU tests run everywhere; those
marked `cuda` need a GPU and are skipped without one (they ran on an H200: BENCHMARKS.md, "On a GPU")."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.bench import Case, SuiteConfig, run_suite
from vitkit.bench.gpu import block_list, compile_blocks, dense_bf16_peak, graphed_call, logits_agreement
from vitkit.bench.peers import build_hf, enable_grad_checkpointing
from vitkit.cli import main

TINY = dict(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=10, gelu="exact")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_vit.py"


def _tiny(seed: int = 0) -> vitkit.VisionTransformer:
    torch.manual_seed(seed)
    model = vitkit.VisionTransformer(vitkit.ViTConfig(**TINY))
    torch.nn.init.normal_(model.head.weight, std=0.5)  # the head starts at zero
    return model


def _script():  # noqa: ANN202 - the benchmark script as a module (benchmarks/ is not a package)
    spec = importlib.util.spec_from_file_location("gpu_vit", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regional_compile_computes_the_same_logits() -> None:
    """compile_blocks compiles each encoder block in place (dynamo traces it; the eager backend keeps the kernels),
    and the model's logits are the uncompiled model's."""
    model = _tiny().eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = model(x)
        compile_blocks(model, backend="eager")
        got = model(x)
    assert all(hasattr(b, "_compiled_call_impl") and b._compiled_call_impl is not None for b in model.blocks)
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="compile mode must be one of"):
        compile_blocks(model, mode="fastest")


def test_block_list_finds_each_implementations_encoder_blocks() -> None:
    cfg = vitkit.ViTConfig(**TINY)
    vk = vitkit.VisionTransformer(cfg)
    assert block_list(vk) is vk.blocks
    hf = block_list(build_hf(cfg))  # transformers' encoder layers (`encoder.layer`, or `layers` in newer releases)
    assert len(hf) == cfg.depth and type(hf[0]).__name__.endswith("Layer")
    with pytest.raises(ValueError, match="no nn.ModuleList or nn.Sequential"):
        block_list(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("impl", ["vitkit", "hf-sdpa"])
def test_grad_checkpointing_keeps_the_gradients(impl: str) -> None:
    """enable_grad_checkpointing (vitkit, timm, HF alike) recomputes activations in backward: same gradients."""
    cfg = vitkit.ViTConfig(**TINY)
    x, y = torch.randn(3, 3, 32, 32), torch.tensor([1, 2, 3])

    def grads(ckpt: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = (vitkit.VisionTransformer(cfg) if impl == "vitkit" else build_hf(cfg)).train()
        if ckpt:
            enable_grad_checkpointing(model)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        return [p.grad for p in model.parameters()]

    for a, b in zip(grads(False), grads(True)):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="no gradient checkpointing switch"):
        enable_grad_checkpointing(torch.nn.Linear(2, 2))


def test_suite_trains_with_grad_checkpointing_and_checks_the_compile_mode() -> None:
    case = Case("vit_ti16", 32, 2, "train")
    sc = SuiteConfig([case], [], device="cpu", warmup=0, repeats=1, min_repeats=1, peak_sizes=(64,),
                     grad_checkpoint=True, measure_memory=False, overrides={"depth": 2})
    _, results = run_suite(sc)
    assert results[0].img_per_s > 0
    with pytest.raises(ValueError, match="unknown compile mode 'turbo'"):
        SuiteConfig([case], [], compile_mode="turbo")


def test_dense_peak_table_and_cuda_only_graphs() -> None:
    assert dense_bf16_peak("NVIDIA H200") == pytest.approx(989.4e12)
    assert dense_bf16_peak("NVIDIA H100 PCIe") == pytest.approx(756e12)
    assert dense_bf16_peak("Tesla T4") is None
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA tensor"):
        graphed_call(_tiny(), torch.randn(1, 3, 32, 32))


def test_gpu_script_smoke_records_each_section(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """benchmarks/gpu_vit.py --smoke: the same code path as on a GPU at tiny sizes on the CPU; every record is on
    disk as it is made, and --tables renders the run."""
    mod = _script()
    # the script's gc.collect() between models (10 here) would scan the whole worker's heap each time (pytest's and
    # the earlier tests' objects: ~0.2 CPU s each in a fresh process, more in a worker late in the suite); frozen,
    # each collect scans what the script made since, which is all it frees
    gc.freeze()
    try:
        assert mod.main(["--smoke", "--out", str(tmp_path), "--sections", "env,agreement,large"]) == 0
    finally:
        gc.unfreeze()
    doc = json.loads((tmp_path / "gpu_vit.json").read_text())
    recs = {(r["section"], r.get("model"), r.get("impl"), r.get("grad_checkpoint")): r for r in doc["records"]}
    agree = recs[("agreement", "vit_b16", None, None)]
    assert 0 < agree["cpu_vs_fp64"]["norm_rel"] < 1e-5 and agree["device_vs_cpu"]["norm_rel"] == 0  # cpu vs cpu
    for key in [("vit_l16", True), ("vit_l16", False), ("vit_h14", True)]:
        row = recs[("large", key[0], "vitkit", key[1])]
        assert row["img_per_s"] > 0 and row["peak_gib"] > 0 and row["params_m"] > 0
    assert not [r for r in doc["records"] if "error" in r], doc["records"]
    capsys.readouterr()
    assert mod.main(["--tables", str(tmp_path / "gpu_vit.json")]) == 0
    assert "| vit_h14 | vitkit | 2 | True |" in capsys.readouterr().out


@cuda
@pytest.mark.cuda
def test_cuda_fp32_logits_match_the_cpu() -> None:
    """The issue's bar: fp32 logits on the GPU (TF32 off) equal the CPU's within 1e-4 relative."""
    res = logits_agreement(_tiny(), torch.randn(8, 3, 32, 32), "cuda")
    assert res["device_vs_cpu"]["max_abs_over_max_ref"] < 1e-4, res
    assert res["device_vs_fp64"]["norm_rel"] < 1e-4, res


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["auto", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_cuda_graph_replay_is_the_eager_forward(backend: str, head_dim: int) -> None:
    """One CUDA graph of the bf16 forward, replayed after other work, gives the eager forward's logits (each SDPA
    backend). Its first version lost its static input to the allocator and read garbage (NaN) on an H200."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = vitkit.VisionTransformer(vitkit.ViTConfig(**{**TINY, "width": 2 * head_dim}))
    torch.nn.init.normal_(model.head.weight, std=0.5)
    model = model.cuda().to(torch.bfloat16).eval()
    x = torch.randn(1, 3, 32, 32, device="cuda", dtype=torch.bfloat16)
    ctx = sdpa_kernel(getattr(SDPBackend, backend)) if backend != "auto" else contextlib.nullcontext()
    with ctx:
        replay = graphed_call(model, x)
        with torch.no_grad():  # eager work between capture and replay: the graph's input must not be reused
            want = model(x)
            model(torch.randn(64, 3, 32, 32, device="cuda", dtype=torch.bfloat16))
        got = replay().clone()
    assert torch.isfinite(want).all() and want.abs().max() > 0.1
    torch.testing.assert_close(got, want)


@cuda
@pytest.mark.cuda
def test_bench_cli_trains_on_cuda(tmp_path: Path) -> None:
    """`vitkit bench --device cuda`: a bf16 training case (fused AdamW) with checkpointing, and its allocator peak."""
    out = tmp_path / "b.json"
    args = ["bench", "--device", "cuda", "--models", "vit_ti16", "--img-size", "32", "--batch", "4", "--mode",
            "infer,train", "--precision", "bf16", "--peers", "none", "--repeats", "2", "--grad-checkpoint"]
    assert main(args + ["--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert {r["case"]["mode"] for r in rows} == {"infer", "train"}
    assert all(r["img_per_s"] > 0 and r["peak_mb"] > 0 for r in rows)


def test_profile_groups_kernels_by_name() -> None:
    """benchmarks/gpu_profile.py's grouping of the kernel names seen on the H200: cuDNN's SDPA kernels (which also
    name sm90 and wgmma) are attention, cuBLAS's nvjet and the patch convolution matmul, Inductor's fusions other."""
    spec = importlib.util.spec_from_file_location("gpu_profile", SCRIPT.with_name("gpu_profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    seen = {
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0":
            "attention",
        "nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_bias_TNN": "matmul",
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x5_nhwc_align8>":
            "matmul",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "triton_poi_fused_gelu_gelu_backward_view_0": "other",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float>": "other",
    }
    assert {name: mod.group_of(name) for name in seen} == seen


def test_checks_script_reads_the_suites_counts_and_failures() -> None:
    """benchmarks/gpu_checks.py reads pytest's last line (plain, or between '=' as pytest-xdist's -ra run ends it) and
    the ids of failed and erroring tests, which it runs again alone with and without CUDA."""
    spec = importlib.util.spec_from_file_location("gpu_checks", SCRIPT.with_name("gpu_checks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    log = ("FAILED tests/train/test_optim.py::test_adamw_on_cuda - AssertionError: Tensor-likes are not close!\n"
           "ERROR tests/x/test_y.py::test_z[fp32-4] - RuntimeError: boom\n"
           "7 failed, 1390 passed, 14 skipped, 89 warnings in 210.13s (0:03:30)\n")
    assert mod.SUMMARY.findall(log) == [("7 failed, 1390 passed, 14 skipped, 89 warnings", "210.13")]
    assert mod.SUMMARY.findall("==== 1 failed, 2 passed, 7 deselected in 10.13s ====")[0][0].startswith("1 failed")
    assert mod.FAILED.findall(log) == ["tests/train/test_optim.py::test_adamw_on_cuda", "tests/x/test_y.py::test_z[fp32-4]"]
    assert mod.SUMMARY.findall("collected 0 items\n") == []
