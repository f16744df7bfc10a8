"""One forward path (issue 49): every option composes with every other, or refuses. A LoRA-adapted or hooked model
through the predictor gives the model's own answer; a predictor is a snapshot (the caller's mode, merging and dtype
are its own); under token merging `embed`, few-shot and the model's pooling agree (sizes weighted), and what has no
meaning (patch features, NCHW maps, inspect's maps) is refused by name; a distilled DeiT's pre-logits are timm's
everywhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import random_vit
from tests.models.test_tome import _np_forward
from vitkit.data.base import FileDataset
from vitkit.inference.evaluate import eval_loader
from vitkit.inference.features import embed
from vitkit.inference.fewshot import extract_features
from vitkit.inference.runtime import build_predictor
from vitkit.inspect.report import InspectImage, collect_attention
from vitkit.models.lora import LoraConfig, apply_lora

TORCH_PATHS = ["fp32", "bf16", "bf16-autocast"]


def _images(tmp_path: Path, n: int = 4, size: int = 16) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        p = tmp_path / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(p)
        paths.append(str(p))
    return paths


def test_a_lora_model_through_the_predictor_is_the_adapted_model() -> None:
    """The fused fp32 path must not read `.weight` past a LoraLinear: the predictor gives the eager answer (old
    code: the base model's)."""
    m = random_vit(img_size=32, in_chans=3, depth=2)
    apply_lora(m, LoraConfig(rank=2, targets=("q", "v", "fc1")))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = m(x)
    torch.testing.assert_close(build_predictor(m, "fp32", "torch")(x), want, rtol=1e-4, atol=1e-4)


def test_forward_hooks_are_honoured_by_the_predictor() -> None:
    """Hooks on a Linear and on a Block run in every torch path (old code: the fused path ignored them)."""
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    h = random_vit(img_size=32, in_chans=3, depth=2)
    h.blocks[0].mlp.fc1.register_forward_hook(lambda mod, args, out: out * 3)
    h.blocks[1].register_forward_hook(lambda mod, args, out: out.flip(1))
    with torch.no_grad():
        want = h(x)
    for precision in TORCH_PATHS:
        got = build_predictor(h, precision, "torch")(x)
        torch.testing.assert_close(got, want, rtol=0.05 if precision != "fp32" else 1e-4, atol=0.05)


@pytest.mark.parametrize("precision", TORCH_PATHS)
def test_a_predictor_leaves_the_callers_training_mode(precision: str) -> None:
    m = random_vit(img_size=32, in_chans=3, depth=2).train()
    build_predictor(m, precision, "torch")
    assert m.training and all(mod.training for mod in m.modules())


@pytest.mark.parametrize("precision", TORCH_PATHS)
def test_a_predictor_is_a_snapshot_of_the_model(precision: str) -> None:
    """A later set_token_merging (or weight change) of the caller's model does not reach the predictor, on every
    torch path (old code: the bf16-autocast path followed it)."""
    m = random_vit(img_size=32, in_chans=3, depth=2, pooling="gap")
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    net = build_predictor(m, precision, "torch")
    before = net(x)
    m.set_token_merging(4)
    with torch.no_grad():
        m.head.weight.mul_(2)
    torch.testing.assert_close(net(x), before, rtol=0, atol=0)


def test_a_bf16_model_into_an_fp32_predictor_is_cast_and_said() -> None:
    m = random_vit(img_size=32, in_chans=3, depth=2)
    told: list[str] = []
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    net = build_predictor(m.to(torch.bfloat16), "fp32", "torch", log=told.append)
    assert any("bfloat16" in t and "fp32 copy" in t for t in told), told
    assert next(m.parameters()).dtype == torch.bfloat16  # the caller's model stays bf16
    with torch.no_grad():
        torch.testing.assert_close(net(x), m.float()(x), rtol=1e-4, atol=1e-4)


def test_merged_features_agree_between_embed_fewshot_and_the_weighted_pooling(tmp_path: Path) -> None:
    """GAP over merged tokens counts each token by its patch count; `embed` (pooled = the head's input), few-shot's
    pre_logits and the hand-written weighted mean agree, and the head on them gives an independent NumPy forward's
    logits (old code: embed pooled unweighted)."""
    m = random_vit(pooling="gap", in_chans=1, depth=2)
    m.set_token_merging([4, 3])
    paths = _images(tmp_path)
    emb = embed(m, paths, "pooled").features
    ds = FileDataset(paths, [0] * len(paths), [""], 1)
    few, _ = extract_features(m, eval_loader(ds, m.preprocess, 8), "pre_logits")
    np.testing.assert_allclose(emb, few, rtol=1e-5, atol=1e-5)
    x = next(eval_loader(ds, m.preprocess, 8).iterate(0, 1)).x
    with torch.no_grad():
        t = m.tokens(x)
        s = t.patch_sizes
        assert s is not None and s.max() > 1
        weighted = (t.patches * s).sum(1) / s.sum(1)
        assert (weighted - t.patches.mean(1)).abs().max() > 1e-3  # the weights matter here
        np.testing.assert_allclose(emb, weighted.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(m.head(weighted).double().numpy(),
                                   _np_forward(m.double(), x.double().numpy(), [4, 3]), rtol=1e-4, atol=1e-4)
        mean = embed(m.float(), paths, "mean").features
        np.testing.assert_allclose(mean, weighted.numpy(), rtol=1e-5, atol=1e-5)


def test_what_merged_tokens_cannot_give_is_refused_by_name(tmp_path: Path) -> None:
    m = random_vit(in_chans=1, depth=2)
    m.set_token_merging(3)
    x = torch.randn(2, 1, 16, 16)
    with pytest.raises(ValueError, match="'patch'.*merges tokens"):
        embed(m, _images(tmp_path, 1), "patch")
    with pytest.raises(ValueError, match="NCHW.*merges tokens"):
        m.forward_intermediates(x, output_fmt="NCHW")
    with torch.no_grad():
        final, inter = m.forward_intermediates(x, output_fmt="NLC")
        assert [y.shape[1] for y in inter] == [16 - 3, 16 - 6]  # the merged patch tokens of each block
        torch.testing.assert_close(final, m.forward_features(x))
    img = InspectImage("noise", torch.rand(1, 16, 16))
    with pytest.raises(ValueError, match="merges tokens"):
        collect_attention(m, [img], progress=False)
    gap = random_vit(pooling="gap", in_chans=1, depth=2)
    gap.set_token_merging(3)
    with pytest.raises(ValueError, match="sizes"):  # a bare tensor cannot carry the merged tokens' sizes
        gap.forward_head(gap.forward_features(x))


def test_a_distilled_models_pre_logits_are_the_mean_of_its_two_tokens_everywhere(tmp_path: Path) -> None:
    """timm's VisionTransformerDistilled.forward_head(pre_logits=True): (x[:, 0] + x[:, 1]) / 2, in forward_head,
    intermediates, few-shot and embed alike (old code: few-shot and forward_head used the class token)."""
    m = random_vit(distill_token=True, in_chans=1, depth=2)
    paths = _images(tmp_path, 3)
    ds = FileDataset(paths, [0] * len(paths), [""], 1)
    x = next(eval_loader(ds, m.preprocess, 8).iterate(0, 1)).x
    with torch.no_grad():
        z = m.forward_features(x)
        want = ((z[:, 0] + z[:, 1]) / 2).numpy()
        np.testing.assert_allclose(m.forward_head(z, pre_logits=True).numpy(), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(m.intermediates(x)["pre_logits"].numpy(), want, rtol=1e-6, atol=1e-6)
    few, _ = extract_features(m, eval_loader(ds, m.preprocess, 8), "pre_logits")
    np.testing.assert_allclose(few, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(embed(m, paths, "pre_logits").features, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw,r", [({}, [0, 3]), ({"block": "axial", "pooling": "gap"}, 0)], ids=["merged", "axial"])
def test_gradient_checkpointing_runs_the_same_path(kw: dict, r: int | list[int]) -> None:
    """Checkpointed training gives the same loss and gradients as plain training, also with a merge schedule whose
    first layer merges nothing (a replay must not read a later layer's r) and for Axial-ViT's row / column blocks."""
    m = random_vit(depth=2, **kw).train()
    m.set_token_merging(r)
    x = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    grads = []
    for checkpointing in (False, True):
        m.set_grad_checkpointing(checkpointing)
        m.zero_grad()
        loss = m(x).square().sum()
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in m.parameters()]))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b)
