"""LoRA on the ViT (vitkit.models.lora): per-slice updates on the fused qkv, merge = unmerged logits, only adapters
train, base weights shared."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers import random_vit
from vitkit.models.lora import (
    LoraConfig,
    LoraLinear,
    apply_lora,
    base_fingerprint,
    lora_modules,
    lora_state,
    merge_lora,
    unload_lora,
)

ALL = ("q", "k", "v", "proj", "fc1", "fc2")


def _randomise_adapters(model: nn.Module, seed: int = 1) -> None:
    """B is zero at init (the adapted model starts as the base); draw it so the updates are not zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in lora_modules(model).values():
            for b in m.lora_B.values():
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)


def _x(model: nn.Module, n: int = 3) -> torch.Tensor:
    c = model.config
    return torch.randn(n, c.in_chans, *c.img_size, generator=torch.Generator().manual_seed(7))


def test_starts_equal_to_the_base_and_shares_its_weights() -> None:
    model = random_vit()
    x = _x(model)
    before = model(x)
    qkv_w, fc1_b = model.blocks[0].attn.qkv.weight, model.blocks[1].mlp.fc1.bias
    apply_lora(model, LoraConfig(rank=4, targets=ALL))
    assert isinstance(model.blocks[0].attn.qkv, LoraLinear)
    assert model.blocks[0].attn.qkv.weight is qkv_w and model.blocks[1].mlp.fc1.bias is fc1_b  # shared, not copied
    torch.testing.assert_close(model(x), before, rtol=0, atol=0)  # B = 0: exactly the base
    # the state dict keeps the base keys and adds the adapters beside them
    keys = set(model.state_dict())
    assert {"blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.lora_A.q", "blocks.0.attn.qkv.lora_B.v",
            "blocks.1.mlp.fc2.lora_A.fc2"} <= keys


@pytest.mark.parametrize("targets", [("k",), ("q", "v"), ALL])
def test_each_slice_gets_its_own_update(targets: tuple[str, ...]) -> None:
    """The adapted qkv equals x W^T + b with (alpha / r) B_s A_s x added to exactly slice s's rows, computed here
    by hand."""
    model = random_vit()
    lin = model.blocks[0].attn.qkv
    W, b = lin.weight.detach().clone(), lin.bias.detach().clone()
    apply_lora(model, LoraConfig(rank=3, alpha=6.0, targets=targets))
    _randomise_adapters(model)
    m = model.blocks[0].attn.qkv
    x = torch.randn(2, 5, W.shape[1])
    want = x @ W.T + b
    D = W.shape[1]
    for i, s in enumerate("qkv"):
        if s in targets:
            want[..., i * D:(i + 1) * D] += 2.0 * (x @ m.lora_A[s].T @ m.lora_B[s].T)
    torch.testing.assert_close(m(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", [{}, {"block": "axial", "pooling": "gap", "class_token": False},
                                  {"num_registers": 2, "layer_scale": 0.1},
                                  {"resnet_layers": (1,), "patch_size": 1, "img_size": 32, "in_chans": 3}])
def test_merged_logits_equal_the_adapted_model(arch: dict) -> None:
    model = random_vit(**arch)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    apply_lora(model, LoraConfig(rank=4, alpha=8.0, targets=ALL))
    _randomise_adapters(model)
    x = _x(model)
    with torch.no_grad():
        adapted = model(x)
        merge_lora(model)
        merged = model(x)
    assert not lora_modules(model) and all(type(m) is nn.Linear for n, m in model.named_modules() if n.endswith("qkv"))
    assert (adapted - base_logits(base, model, x)).abs().max() > 1e-3  # the adapters do change the answer
    torch.testing.assert_close(merged, adapted, rtol=1e-5, atol=1e-5)
    sd = model.state_dict()
    assert set(sd) == set(base)  # the plain model's keys again
    assert not any(torch.equal(base[k], sd[k]) for k in base if k.endswith("qkv.weight"))  # merged weights


def base_logits(base: dict, like: nn.Module, x: torch.Tensor) -> torch.Tensor:
    from vitkit.models.vit import VisionTransformer

    fresh = VisionTransformer(like.config).eval()
    fresh.load_state_dict(base)
    with torch.no_grad():
        return fresh(x)


@pytest.mark.parametrize("undo", [merge_lora, unload_lora])
def test_a_hook_on_an_adapted_linear_stays_on_its_replacement(undo) -> None:  # noqa: ANN001
    """A forward hook on an adapted Linear runs on the plain Linear that replaces it (the compiled predictor merges
    a copy), and its handle still removes it."""
    model = random_vit()
    apply_lora(model, LoraConfig(rank=2, targets=("q", "v")))
    seen = []
    handle = model.blocks[0].attn.qkv.register_forward_hook(lambda mod, args, out: seen.append(type(mod)) or out * 0)
    x = _x(model)
    with torch.no_grad():
        hooked = model(x)
        undo(model)
        torch.testing.assert_close(model(x), hooked, rtol=1e-5, atol=1e-5)
        handle.remove()
        assert not torch.allclose(model(x), hooked)
    assert seen == [LoraLinear, nn.Linear]


def test_merge_leaves_the_base_weights_untouched_and_unload_gives_them_back() -> None:
    model = random_vit()
    x = _x(model)
    with torch.no_grad():
        before = model(x)
    w = model.blocks[0].attn.qkv.weight
    saved = w.detach().clone()
    apply_lora(model, LoraConfig(rank=2, targets=("q", "v", "fc1")))
    _randomise_adapters(model)
    merged = model.blocks[0].attn.qkv.merged()
    assert torch.equal(w, saved) and not torch.equal(merged.weight, saved)
    unload_lora(model)
    assert model.blocks[0].attn.qkv.weight is w
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("train", [(), ("head",), ("head", "norm", "bias")])
def test_only_the_adapters_and_the_chosen_extras_get_gradients(train: tuple[str, ...]) -> None:
    model = random_vit().train()
    apply_lora(model, LoraConfig(rank=2, targets=("q", "v", "fc2"), train=train))
    _randomise_adapters(model)
    model(_x(model)).square().mean().backward()
    for name, p in model.named_parameters():
        adapter = ".lora_A." in name or ".lora_B." in name
        extra = (("head" in train and name.startswith("head.")) or ("bias" in train and name.endswith(".bias"))
                 or ("norm" in train and (".norm" in name or name.startswith("norm."))))
        if adapter or extra:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None and not p.requires_grad, name
    assert set(lora_state(model)) == {n for n, p in model.named_parameters() if p.requires_grad}


def test_a_qkv_adapter_trains_only_its_slice() -> None:
    """One SGD step with only "k" adapted changes the merged k rows and leaves q and v bit for bit."""
    model = random_vit().train()
    apply_lora(model, LoraConfig(rank=2, targets=("k",), train=()))
    _randomise_adapters(model)
    model(_x(model)).square().mean().backward()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    before = model.blocks[0].attn.qkv.merged().weight.detach()
    opt.step()
    after = model.blocks[0].attn.qkv.merged().weight.detach()
    D = before.shape[1]
    assert torch.equal(before[:D], after[:D]) and torch.equal(before[2 * D:], after[2 * D:])
    assert not torch.equal(before[D:2 * D], after[D:2 * D])


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    grads = []
    for ckpt in (False, True):
        model = random_vit().train()
        apply_lora(model, LoraConfig(rank=2, targets=ALL))
        _randomise_adapters(model)
        model.set_grad_checkpointing(ckpt)
        model(_x(model)).square().mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    for n, g in grads[0].items():
        torch.testing.assert_close(grads[1][n], g, rtol=1e-5, atol=1e-6)


def test_fingerprint_names_the_base_not_the_head_or_the_adapters() -> None:
    a, b = random_vit(), random_vit()
    assert base_fingerprint(a) == base_fingerprint(b)
    a.reset_head(7)
    apply_lora(a, LoraConfig(rank=2))
    assert base_fingerprint(a) == base_fingerprint(b) == a.lora_base_hash
    with torch.no_grad():
        b.blocks[1].mlp.fc2.weight[0, 0] += 1e-3
    assert base_fingerprint(b) != base_fingerprint(a)


def test_bad_configs_and_models_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown.*'qv'.*choose from q, k, v"):
        LoraConfig(targets=("qv",))
    with pytest.raises(ValueError, match="lora.rank"):
        LoraConfig(rank=0)
    with pytest.raises(ValueError, match="lora.train"):
        LoraConfig(train=("everything",))
    assert LoraConfig(targets="v,q").targets == ("q", "v")
    model = apply_lora(random_vit(), LoraConfig())
    with pytest.raises(ValueError, match="already carries LoRA"):
        apply_lora(model, LoraConfig())
    from vitkit.models import create_model

    with pytest.raises(ValueError, match="BiT ResNet"):
        apply_lora(create_model("bit_r50x1", num_classes=3, img_size=32), LoraConfig())
