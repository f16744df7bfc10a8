"""The one intermediates API (`VisionTransformer.intermediates`, big_vision's dict): what inspect, fewshot, masked
patch prediction and timm's forward_intermediates read, checked against the model's own forward pass."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import random_vit
from vitkit.models.vit import VisionTransformer


def _model(**kw) -> VisionTransformer:  # noqa: ANN003
    return random_vit(depth=3, **kw)


@pytest.mark.parametrize("kw", [{}, {"pooling": "gap"}, {"pooling": "map"}, {"distill_token": True},
                                {"representation_size": 16}, {"num_registers": 2},
                                {"posemb": "learn2d", "posemb_placement": "every_layer"},
                                {"block": "axial", "pooling": "gap"}])
def test_every_intermediate_agrees_with_the_forward_pass(kw: dict) -> None:
    m = _model(**kw)
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        out = m.intermediates(x, attention=True)
        logits, feats = m(x), m.forward_features(x)
    torch.testing.assert_close(out["logits"], logits, rtol=1e-5, atol=1e-5)  # a distilled model: the two heads' mean
    torch.testing.assert_close(out["encoded"], feats, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["pre_logits"], m.forward_head(feats, pre_logits=True), rtol=1e-5, atol=1e-5)
    assert len(out["blocks"]) == m.config.depth
    torch.testing.assert_close(m.norm(out["blocks"][-1]), out["encoded"])  # eq. 4's LN on the last block
    T = m.config.num_prefix_tokens + m.config.num_patches
    assert out["embedded"].shape == (3, T, 32)
    n_attn = 2 * m.config.depth if m.config.block == "axial" else m.config.depth
    assert len(out["attention"]) == n_attn
    for a in out["attention"]:  # each map a softmax over its keys (an axial map: over the patch's row or column)
        assert a.shape == (3, 2, T, T)
        torch.testing.assert_close(a.sum(-1), torch.ones(3, 2, T))


def test_stopping_early_and_recording_end_with_the_call() -> None:
    m = _model()
    x = torch.randn(2, 1, 16, 16)
    early = m.intermediates(x, last_block=0)
    assert len(early["blocks"]) == 1 and "encoded" not in early and "attention" not in early
    torch.testing.assert_close(early["blocks"][0], m.intermediates(x)["blocks"][0])
    plain = {n: dict(vars(mod)) for n, mod in m.named_modules()}  # recording is an argument of one call:
    t = m.encode(m.embed(x), attention=True)  # no layer is set from outside, before, during or after it
    assert len(t.attention) == m.config.depth and {n: dict(vars(mod)) for n, mod in m.named_modules()} == plain
    torch.testing.assert_close(t.z, m.forward_features(x))
