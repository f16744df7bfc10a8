"""Training options: gradient checkpointing recomputes the same activations (same loss and
gradients, dropout included) and the run config's switch reaches the model the engine trains;
`train.compile` runs the training step through torch.compile (and, on the CPU, torch's fused AdamW) with the eager
step's losses and weights within 1e-5 over 4 steps; a step reads the device once."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import differing_keys, digits_model, digits_trainer
from vitkit.train import engine, run
from vitkit.train.config import TrainConfig, load_config
from vitkit.train.engine import Trainer
from vitkit.train.metrics import read_metrics

TINY = ["model.img_size=16", "model.patch_size=8", "model.width=16", "model.depth=2", "model.num_heads=2",
        "model.mlp_dim=32", "model.representation_size=16", "train.tensorboard=false"]


def _tiny_model():
    torch.manual_seed(0)
    return digits_model(width=32, depth=3, num_heads=2, mlp_dim=64, dropout=0.1, attn_dropout=0.1, drop_path=0.1)


def test_grad_checkpointing_gives_the_same_loss_and_gradients() -> None:
    model = _tiny_model().train()
    x, y = torch.randn(8, 1, 16, 16), torch.arange(8) % 10
    out = []
    for ckpt in (False, True):
        model.set_grad_checkpointing(ckpt)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same dropout / drop-path draws; the recomputation replays them
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        out.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (l0, g0), (l1, g1) = out
    d_loss = (l0 - l1).abs().item()
    d_grad = max((g0[n] - g1[n]).abs().max().item() for n in g0)
    assert d_loss <= 1e-6 and d_grad <= 1e-6, (d_loss, d_grad)
    print(f"grad checkpointing: |d loss| {d_loss:.1e}, max |d grad| {d_grad:.1e}")


def test_grad_checkpointing_option_reaches_the_trained_model(tmp_path: Path, monkeypatch) -> None:
    trainers: list[Trainer] = []
    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint

    class Recording(Trainer):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            trainers.append(self)

    def counting(*a, **kw):
        calls.append(1)
        return checkpoint(*a, **kw)

    monkeypatch.setattr(run, "Trainer", Recording)
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counting)
    cfg = load_config("pretrain_i1k_b16", TINY + ["model.grad_checkpointing=true"])
    run.run_experiment(cfg, tmp_path, dry_run=1, progress=False)
    (t,) = trainers
    assert t.model.grad_checkpointing is True
    assert len(calls) == 2  # one training step of a 2-block model: each block ran under checkpoint


def _fit(out: Path, compile_: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    cfg = TrainConfig(steps=4, batch_size=16, lr=1e-3, warmup_steps=0, log_every=1, compile=compile_,
                      weight_decay=0.05)
    t = digits_trainer(model, cfg, out)
    assert isinstance(t.forward_model, torch._dynamo.eval_frame.OptimizedModule) == bool(compile_)
    assert bool(t.opt.defaults.get("fused")) == bool(compile_)  # the compiled step takes the fused AdamW (CPU)
    t.fit()
    return [r["loss"] for r in read_metrics(out / "metrics.jsonl")], t.model.state_dict()


# "eager" runs dynamo's tracing without code generation; "inductor" compiles for real (a cold compile of
# this 1-block model's training step takes ~24 s on 2 CPU cores, ~4 s with the inductor cache warm)
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compile_option_trains_like_eager(tmp_path: Path, backend: str) -> None:
    torch._dynamo.reset()
    ref_losses, ref_w = _fit(tmp_path / "no_compile", "")
    losses, w = _fit(tmp_path / backend, backend)
    d_loss = max(abs(a - b) for a, b in zip(ref_losses, losses))
    d_w = max((ref_w[k] - w[k]).abs().max().item() for k in ref_w)
    assert len(losses) == 4 and d_loss < 1e-5 and d_w < 1e-5, (d_loss, d_w)
    print(f"compile={backend}: |d loss| {d_loss:.1e}, max |d w| {d_w:.1e} over 4 steps")


def test_a_training_step_reads_the_device_once(tmp_path: Path, monkeypatch) -> None:
    """No host read between the forward, backward and update of a step: the loss and correct count of its
    micro-batches stay tensors until the optimizer step is queued, then come back in one read; the figures logged
    are the same as the loss computed by hand."""
    torch.manual_seed(0)
    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    before = copy.deepcopy(model)
    cfg = TrainConfig(steps=1, batch_size=16, grad_accum=2, lr=1e-3, warmup_steps=0, clip_norm=None, log_every=1,
                      tensorboard=False)
    t = digits_trainer(model, cfg, tmp_path)
    reads = []
    item, read_back = torch.Tensor.item, engine._read_back

    def counting(*a, **kw):
        reads.append(a)
        return read_back(*a, **kw)

    def refuse(self):  # noqa: ANN001 - torch's own AdamW reads its step counter (a CPU tensor, not the device)
        if any(self is st.get("step") for st in t.opt.state.values()):
            return item(self)
        raise AssertionError("a .item() inside the training step")

    monkeypatch.setattr(engine, "_read_back", counting)
    monkeypatch.setattr(torch.Tensor, "item", refuse)
    b = t.data.load(0)
    loss, acc, n = t.train_step(0, b.x, b.y)
    monkeypatch.setattr(torch.Tensor, "item", item)
    assert len(reads) == 1 and n == 16 and isinstance(loss, float) and 0.0 <= acc <= 1.0
    with torch.no_grad():
        logits = before.train()(b.x)
    assert loss == pytest.approx(float(F.cross_entropy(logits, b.y)), rel=1e-5)
    assert acc == pytest.approx(float((logits.argmax(-1) == b.y).float().mean()))


def test_run_config_switches_reach_the_engine(tmp_path: Path) -> None:
    assert load_config(None, ["train.compile=true"]).train.compile == "inductor"
    assert load_config(None, ["train.compile=eager"]).train.compile == "eager"
    assert load_config("pretrain_i1k_b16", ["train.parallel=fsdp"]).train.parallel == "fsdp"
    assert load_config("pretrain_jft_b16").train.parallel == "ddp"
    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    with pytest.raises(ValueError, match="parallel mode 'zero3'"):
        digits_trainer(model, TrainConfig(parallel="zero3"), tmp_path)
    assert load_config(None, ["train.world_invariant=true"]).train.world_invariant is True
    with pytest.raises(ValueError, match="world_invariant works with parallel = ddp"):
        TrainConfig(world_invariant=True, parallel="fsdp")


def test_world_invariant_reduction(tmp_path: Path, monkeypatch) -> None:
    """With one micro-batch in one process the world-invariant path is the default path, bit for bit; a world
    size that does not divide grad_accum is refused, naming both."""
    def run(invariant: bool) -> dict:
        torch.manual_seed(0)
        model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, dropout=0.1)
        cfg = TrainConfig(steps=3, batch_size=16, lr=1e-3, warmup_steps=1, mixup=0.2, cutmix=1.0, clip_norm=1.0,
                          world_invariant=invariant, tensorboard=False)
        digits_trainer(model, cfg, tmp_path / str(invariant)).fit()
        return model.state_dict()

    plain, invariant = run(False), run(True)
    assert differing_keys(plain, invariant) == []
    monkeypatch.setattr("vitkit.distributed.world_size", lambda: 3)
    with pytest.raises(ValueError, match="grad_accum divisible by the number of processes: grad_accum 4, 3 processes"):
        digits_trainer(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32),
                       TrainConfig(batch_size=24, grad_accum=4, world_invariant=True), tmp_path / "three")


def test_layer_wise_lr_decay_gives_the_documented_rates(tmp_path: Path) -> None:
    """Block i (0-based) of L trains at lr x decay^(L - i), the embeddings at decay^(L + 1), the final norm and
    the head at the full lr; weight decay still skips biases, norms and position embeddings."""
    from vitkit.train.optim import param_groups

    model = digits_model(width=16, depth=3, num_heads=2, mlp_dim=32)
    groups = param_groups(model, 0.05, layer_decay=0.5)
    scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    wd = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    expected = {"patch_embed.proj.weight": 0.5**4, "cls_token": 0.5**4, "pos_embed": 0.5**4,
                "blocks.0.attn.qkv.weight": 0.5**3, "blocks.1.mlp.fc1.bias": 0.5**2, "blocks.2.norm2.weight": 0.5,
                "norm.weight": 1.0, "head.weight": 1.0, "head.bias": 1.0}
    for name, s in expected.items():
        assert scale[id(named[name])] == s, name
    assert wd[id(named["blocks.0.attn.qkv.weight"])] == 0.05 and wd[id(named["pos_embed"])] == 0.0
    assert len(scale) == len(named)  # every parameter in exactly one group
    # through a recipe: the optimizer's groups run at lr x scale at every step; the log shows the schedule's lr
    cfg = TrainConfig(steps=2, batch_size=16, lr=1e-3, warmup_steps=0, schedule="constant", layer_decay=0.5,
                      log_every=1, tensorboard=False)
    t = digits_trainer(model, cfg, tmp_path)
    t.fit()
    assert sorted({g["lr"] for g in t.opt.param_groups}) == [1e-3 * 0.5**k for k in (4, 3, 2, 1, 0)]
    assert [r["lr"] for r in read_metrics(tmp_path / "metrics.jsonl") if "lr" in r] == [1e-3, 1e-3]
    assert load_config("digits_finetune", ["optim.layer_decay=0.75"]).train.layer_decay == 0.75
    with pytest.raises(ValueError, match="optim.layer_decay must be a number in"):
        load_config("digits_finetune", ["optim.layer_decay=1.5"])


@pytest.mark.parametrize("k", [0, 1])
def test_freezing_trains_only_the_top(tmp_path: Path, k: int) -> None:
    """train_blocks = 0 is a linear probe (the head alone); k = 1 adds the last block and the final norm.
    Frozen weights are bitwise unchanged after training; the trained ones moved."""
    model = digits_model(width=16, depth=3, num_heads=2, mlp_dim=32)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(steps=3, batch_size=16, lr=1e-2, warmup_steps=0, train_blocks=k, log_every=1, tensorboard=False)
    t = digits_trainer(model, cfg, tmp_path)
    t.fit()
    for n, p in model.named_parameters():
        trained = n.startswith("head.") or (k == 1 and (n.startswith("blocks.2.") or n.startswith("norm.")))
        changed = not torch.equal(p, before[n])
        assert p.requires_grad == trained and (changed if n.endswith("weight") and trained else True), n
        if not trained:
            assert not changed, n
