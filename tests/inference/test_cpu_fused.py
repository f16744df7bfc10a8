"""The torch runtime's fp32 CPU path (inference/cpu_fused.py): encoder blocks on oneDNN's fused matmuls give the
model's own answer up to fp32 rounding, judged against an fp64 forward, for every block form it covers (LayerScale
folded, erf / tanh GELU fused, no qkv bias); QuickGELU, LoRA's layers and hooked blocks are left as written; the
caller's model is untouched, weights changed in place are repacked, and gradients, recorded attention, token merging
and a hook registered later run the block itself. Packed images of different sizes (NaViT) keep their attention
mask."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import vitkit
from vitkit.inference.cpu_fused import FusedBlock, available, fused_for_cpu
from vitkit.inference.runtime import build_predictor
from vitkit.models.lora import LoraConfig, apply_lora
from vitkit.models.vit import Block

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no oneDNN fused linear")


def _model(**kw) -> torch.nn.Module:  # noqa: ANN003
    torch.manual_seed(0)
    m = vitkit.create_model("vit", img_size=32, patch_size=8, width=48, depth=3, num_heads=3, mlp_dim=96,
                            num_classes=5, **kw).eval()
    with torch.no_grad():  # off the init (zero biases, LayerScale's constant), so every tensor matters
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m


@pytest.mark.parametrize("kw", [dict(layer_scale=0.5, gelu="exact"), dict(gelu="tanh", pre_norm=True, patch_bias=False),
                                dict(qkv_bias=False)], ids=["layerscale_erf", "tanh", "no_qkv_bias"])
def test_fused_blocks_give_the_models_answer_to_fp32_rounding(kw: dict) -> None:
    m = _model(**kw)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    f = fused_for_cpu(m)
    assert sum(isinstance(b, FusedBlock) for b in f.modules()) == 3
    assert not any(isinstance(b, FusedBlock) for b in m.modules())  # the caller's model is left as it was
    x = torch.randn(4, 3, 32, 32)
    with torch.inference_mode():
        ref = copy.deepcopy(m).double()(x.double())
        plain, fused = m(x).double(), f(x).double()
    assert all(b._packed is not None for b in f.blocks)  # the fused path ran
    err = lambda y: float((y - ref).norm() / ref.norm())  # noqa: E731
    assert err(plain) < 1e-5 and err(fused) < max(3 * err(plain), 2e-6), (err(plain), err(fused))
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    with torch.no_grad():  # a weight changed in place (a training step): repacked at the next call
        m.blocks[1].mlp.fc2.weight.mul_(1.5)
        m.blocks[1].ls2.gamma.mul_(2.0) if kw.get("layer_scale") else None
    with torch.inference_mode():
        torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-4)
    pickle.dumps(f)  # packed oneDNN tensors are dropped from a copy and repacked


def test_the_torch_fp32_predictor_runs_fused_and_other_calls_run_the_block() -> None:
    m = _model(layer_scale=1.0)
    x = torch.randn(2, 3, 32, 32)
    net = build_predictor(m, "fp32", "torch")
    assert isinstance(net.module.blocks[0], FusedBlock)
    torch.testing.assert_close(net(x), m(x).detach(), atol=1e-5, rtol=1e-5)
    assert all(b._packed is not None for b in net.module.blocks)
    assert all(type(b) is Block for b in build_predictor(m, "bf16", "torch").module.blocks)
    f = net.module
    calls = []
    for b in f.blocks:  # the fallback: the block's own forward
        b.block.register_forward_hook(lambda *_: calls.append(1))
    f(x).sum()  # gradients on
    assert len(calls) == 3
    with torch.inference_mode():
        maps = f.intermediates(x, attention=True)["attention"]
    assert len(maps) == 3 and len(calls) == 6
    f.set_token_merging(2)
    with torch.inference_mode():
        m.set_token_merging(2)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


def test_only_exactly_known_blocks_are_fused() -> None:
    """QuickGELU (not oneDNN's GELU), LoRA's LoraLinear (a subclass of nn.Linear) and a block with a hook run as
    written; a hook registered after fusing (on a part, or a global module hook) is honoured at the call."""
    assert not any(isinstance(b, FusedBlock) for b in fused_for_cpu(_model(gelu="quick")).modules())
    lora = _model()
    apply_lora(lora, LoraConfig(rank=2, targets=("v", "fc2")))
    assert not any(isinstance(b, FusedBlock) for b in fused_for_cpu(lora).modules())
    hooked = _model()
    hooked.blocks[1].mlp.fc1.register_forward_hook(lambda mod, args, out: out * 0)
    assert [type(b).__name__ for b in fused_for_cpu(hooked).blocks] == ["FusedBlock", "Block", "FusedBlock"]
    m = _model()
    f = fused_for_cpu(m)
    x = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        f(x)
        handle = f.blocks[0].block.attn.proj.register_forward_hook(lambda mod, args, out: out * 0)
        m.blocks[0].attn.proj.register_forward_hook(lambda mod, args, out: out * 0)  # the same parameters
        torch.testing.assert_close(f(x), m(x))
        handle.remove()
        seen = []
        glob = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: seen.append(mod))
        try:
            f(x)
        finally:
            glob.remove()
    assert any(isinstance(mod, torch.nn.Linear) for mod in seen)


def test_fused_blocks_honour_the_packed_images_mask() -> None:
    """Packed images at their own sizes (models/packing.py) on fused blocks: each image's logits are its own."""
    m = _model(layer_scale=0.5, num_registers=2, dynamic_img_size=True)
    f = fused_for_cpu(m)
    assert sum(isinstance(b, FusedBlock) for b in f.modules()) == 3
    g = torch.Generator().manual_seed(0)
    ims = [torch.randn(3, h, w, generator=g) for h, w in ((32, 32), (16, 48), (40, 8), (8, 8))]
    with torch.inference_mode():
        want = torch.cat([m(im[None]) for im in ims])
        got = f.forward_packed(ims)
    assert ((got - want).abs().max() / want.abs().max()).item() <= 1e-5
