"""The optimiser choice of vitkit/train/optim.py: Adam(W) on a CUDA device runs torch's fused kernel, the CPU's update
is torch's default as before unless the fused one is asked for (the compiled training step asks). The tests marked `cuda` need a GPU and are skipped without one."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers import digits_model, digits_trainer
from vitkit.train.config import TrainConfig
from vitkit.train.optim import build_optimizer, param_groups
from vitkit.utils.hardware import fused_adam_ok

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _steps(pairs: list[tuple[torch.nn.Module, torch.optim.Optimizer]], n: int = 3) -> list[dict[str, torch.Tensor]]:
    """`n` steps of each (model, optimizer) pair, every pair given the first model's gradient on the same seeded
    batches (so that the optimisers alone differ: a gradient that is zero but for rounding, as the key bias's,
    would otherwise decide the sign of a whole Adam step); the weights after them."""
    first = pairs[0][0]
    dev = next(first.parameters()).device
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        x = torch.randn(8, 1, 16, 16, generator=g).to(dev)
        y = torch.randint(0, 10, (8,), generator=g).to(dev)
        first.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(first(x), y).backward()
        grads = [p.grad.clone() for p in first.parameters()]
        for model, opt in pairs:
            for p, grad in zip(model.parameters(), grads):
                p.grad = grad.clone()
            opt.step()
    return [{k: v.detach().cpu() for k, v in model.state_dict().items()} for model, _ in pairs]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = digits_model(width=32, depth=1, num_heads=2, mlp_dim=64)
    torch.nn.init.normal_(model.head.weight, std=0.1)  # the head starts at zero: give every weight a gradient
    return model


def test_adamw_on_the_cpu_is_torchs_default_update() -> None:
    """On the CPU nothing changed: not fused, and three steps give the weights of torch's AdamW built as before,
    bit for bit (decayed and undecayed groups alike)."""
    a, b = _model(), _model()
    opt = build_optimizer(param_groups(a, 0.05), "adamw", 1e-3, 0.05)
    assert not opt.defaults.get("fused") and not fused_adam_ok(a.parameters())
    ref = torch.optim.AdamW(param_groups(b, 0.05), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05)
    got, want = _steps([(a, opt), (b, ref)])
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert not build_optimizer(_model().parameters(), "adam", 1e-3).defaults.get("fused")


def test_fused_adamw_on_the_cpu_is_the_default_step_to_float32_rounding() -> None:
    """`fused=True` on the CPU: torch's fused kernel, whose three steps on the same gradients land within float32
    rounding of the default (for-each) AdamW, both parameter groups (decayed / not); refused where it cannot run."""
    a, b = _model(), _model()
    opt = build_optimizer(param_groups(a, 0.05), "adamw", 1e-3, 0.05, fused=True)
    assert opt.defaults["fused"] is True
    ref = torch.optim.AdamW(param_groups(b, 0.05), lr=1e-3, weight_decay=0.05)
    got, want = _steps([(a, opt), (b, ref)])
    worst = max((got[k] - want[k]).abs().max().item() for k in want)
    assert 0 < worst <= 1e-6, worst  # not the same kernel, the same step
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert build_optimizer(_model().parameters(), "adam", 1e-3, fused=True).defaults["fused"] is True
    assert not build_optimizer(_model().parameters(), "adamw", 1e-3, fused=False).defaults.get("fused")
    on_meta = [torch.nn.Parameter(torch.empty(3, device="meta"))]
    with pytest.raises(ValueError, match="fused Adam\\(W\\) update needs every trained parameter a plain tensor"):
        build_optimizer(on_meta, "adamw", 1e-3, fused=True)


@cuda
@pytest.mark.cuda
def test_adamw_on_cuda_is_fused_and_updates_as_the_default() -> None:
    """All parameters on the GPU: the fused kernel, whose three steps on the same gradients land within float32
    rounding of torch's default (for-each) AdamW on the same GPU; one parameter left on the CPU: not fused."""
    a = _model().cuda()
    b = copy.deepcopy(a)
    opt = build_optimizer(param_groups(a, 0.05), "adamw", 1e-3, 0.05)
    assert opt.defaults["fused"] is True
    ref = torch.optim.AdamW(param_groups(b, 0.05), lr=1e-3, weight_decay=0.05, foreach=True)
    got, want = _steps([(a, opt), (b, ref)])
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert build_optimizer(a.parameters(), "adam", 1e-3).defaults["fused"] is True
    mixed = [*a.parameters(), torch.nn.Parameter(torch.zeros(3))]
    assert not fused_adam_ok(mixed) and not build_optimizer(mixed, "adamw", 1e-3).defaults.get("fused")


@cuda
@pytest.mark.cuda
def test_trainer_on_cuda_trains_with_the_fused_adamw_and_says_so(tmp_path, capsys) -> None:
    cfg = TrainConfig(steps=4, batch_size=32, lr=1e-3, warmup_steps=1, log_every=2, seed=0, device="cuda",
                      tensorboard=False)
    trainer = digits_trainer(_model(), cfg, tmp_path / "run", save_checkpoints=False)
    assert trainer.opt.defaults["fused"] is True
    assert "AdamW with torch's fused CUDA kernel" in capsys.readouterr().out
    before = [p.detach().clone() for p in trainer.model.parameters()]
    last = trainer.fit()
    assert last["step"] == 4 and last["loss"] == last["loss"]  # trained, and not NaN
    assert any(not torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before))
