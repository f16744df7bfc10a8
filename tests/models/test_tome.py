"""Token merging (ToMe, Bolya et al. 2023; vitkit/models/tome.py): an independent NumPy forward of the paper's
algorithm on the same weights, r = 0 bit-identical to no merging, protected tokens never merged, a merge of known
tokens, and the merged graph in torch.compile and ONNX."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.helpers import random_vit
from vitkit.models.tome import merge_schedule, merge_tokens


# ----------------------------------------------------------------------------- an independent NumPy forward
def _ln(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _np_merge(x: np.ndarray, k: np.ndarray, s: np.ndarray, r: int, prefix: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's bipartite soft matching for one image, written with loops: x (T, D) tokens, k (T, C) keys
    averaged over heads, s (T,) sizes. Order of the result as the paper's code: prefix, unmerged A (by descending
    similarity), B."""
    pa = list(range(prefix, len(x), 2))
    pb = list(range(prefix + 1, len(x), 2))
    kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
    best, partner = [], []
    for i in pa:
        sims = [float(kn[i] @ kn[j]) for j in pb]
        partner.append(int(np.argmax(sims)))
        best.append(max(sims))
    order = sorted(range(len(pa)), key=lambda a: -best[a])
    merged_a, kept_a = order[:r], order[r:]
    bx = {j: x[pb[j]] * s[pb[j]] for j in range(len(pb))}
    bs = {j: s[pb[j]] for j in range(len(pb))}
    for a in merged_a:
        bx[partner[a]] = bx[partner[a]] + x[pa[a]] * s[pa[a]]
        bs[partner[a]] = bs[partner[a]] + s[pa[a]]
    rows = [x[i] for i in range(prefix)] + [x[pa[a]] for a in kept_a] + [bx[j] / bs[j] for j in range(len(pb))]
    sizes = [s[i] for i in range(prefix)] + [s[pa[a]] for a in kept_a] + [bs[j] for j in range(len(pb))]
    return np.stack(rows), np.array(sizes)


def _np_forward(model, images: np.ndarray, r: list[int]) -> np.ndarray:
    """Logits of `model` (token or GAP pooling, class token / registers, no distillation) with ToMe merging r[i]
    tokens in block i: patch embedding, blocks with proportional attention, merging between attention and MLP."""
    sd = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    cfg = model.config
    P, H, Dh = cfg.patch_size, cfg.num_heads, cfg.head_dim
    prefix = cfg.num_prefix_tokens
    out = []
    for img in images:
        C, Hh, W = img.shape
        patches = img.reshape(C, Hh // P, P, W // P, P).transpose(1, 3, 0, 2, 4).reshape(-1, C * P * P)
        x = patches @ sd["patch_embed.proj.weight"].reshape(cfg.width, -1).T + sd["patch_embed.proj.bias"]
        if cfg.class_token:
            x = np.concatenate([sd["cls_token"][0], x])
        x = x + sd["pos_embed"][0]
        if cfg.num_registers:
            c = cfg.num_class_tokens
            x = np.concatenate([x[:c], sd["reg_token"][0], x[c:]])
        s = np.ones(len(x))
        for i in range(cfg.depth):
            p = f"blocks.{i}."
            h = _ln(x, sd[p + "norm1.weight"], sd[p + "norm1.bias"], cfg.ln_eps)
            qkv = h @ sd[p + "attn.qkv.weight"].T + sd[p + "attn.qkv.bias"]
            q, k, v = (qkv[:, j * cfg.width:(j + 1) * cfg.width].reshape(-1, H, Dh).transpose(1, 0, 2) for j in range(3))
            logits = q @ k.transpose(0, 2, 1) / math.sqrt(Dh) + np.log(s)[None, None, :]
            a = np.exp(logits - logits.max(-1, keepdims=True))
            a = a / a.sum(-1, keepdims=True)
            o = (a @ v).transpose(1, 0, 2).reshape(len(x), cfg.width)
            x = x + o @ sd[p + "attn.proj.weight"].T + sd[p + "attn.proj.bias"]
            if r[i]:
                x, s = _np_merge(x, k.mean(0), s, r[i], prefix)
            h = _ln(x, sd[p + "norm2.weight"], sd[p + "norm2.bias"], cfg.ln_eps)
            h = _gelu_tanh(h @ sd[p + "mlp.fc1.weight"].T + sd[p + "mlp.fc1.bias"])
            x = x + h @ sd[p + "mlp.fc2.weight"].T + sd[p + "mlp.fc2.bias"]
        x = _ln(x, sd["norm.weight"], sd["norm.bias"], cfg.ln_eps)
        pooled = x[0] if cfg.pooling == "token" else (x[prefix:] * s[prefix:, None]).sum(0) / s[prefix:].sum()
        out.append(pooled @ sd["head.weight"].T + sd["head.bias"])
    return np.stack(out)


@pytest.mark.parametrize("overrides,r", [
    ({}, [3, 3]),  # class token, constant r
    ({"num_registers": 2}, [5, 2]),  # registers after the class token, a schedule
    ({"pooling": "gap"}, [4, 4]),  # GAP weighted by size
    ({"pooling": "gap", "class_token": True, "img_size": (16, 20)}, [2, 6]),  # a class token beside GAP, odd A / B
])
def test_matches_a_numpy_forward_of_the_paper(overrides: dict, r: list[int]) -> None:
    model = random_vit(in_chans=3, **overrides).double()
    model.set_token_merging(r)
    x = torch.randn(3, 3, *model.config.img_size, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        got = model(x).numpy()
    want = _np_forward(model, x.numpy(), r)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    model.set_token_merging(0)
    with torch.no_grad():
        unmerged = model(x).numpy()
    assert np.abs(got - unmerged).max() > 1e-3  # the merging did change the answer


def test_r0_is_bit_identical_to_no_merging() -> None:
    model = random_vit(pooling="gap", class_token=True, num_registers=1)
    x = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(x)
        ref_feat = model.intermediates(x)["pooled"]
        model.set_token_merging(0)
        assert torch.equal(model(x), ref)
        model.set_token_merging([0, 0])
        assert torch.equal(model(x), ref)
        assert torch.equal(model.intermediates(x)["pooled"], ref_feat)


def test_protected_tokens_are_never_merged() -> None:
    """The class, distillation and register tokens keep their exact values however much is merged (here: their keys
    equal to a patch's, so an unprotected matching would pick them first)."""
    B, prefix, N, D = 2, 4, 10, 6
    x = torch.randn(B, prefix + N, D, generator=torch.Generator().manual_seed(0))
    metric = x.clone()
    metric[:, :prefix] = metric[:, prefix + 1: prefix + 2]  # identical to the first B token
    out, size = merge_tokens(x, metric, None, 5, prefix)
    assert out.shape == (B, prefix + N - 5, D)
    assert torch.equal(out[:, :prefix], x[:, :prefix]) and torch.equal(size[:, :prefix], torch.ones(B, prefix, 1))
    assert torch.equal(size.sum(1), torch.full((B, 1), float(prefix + N)))  # every patch is counted once


def test_merges_the_planned_pairs_of_distinct_tokens() -> None:
    """Six distinct patch tokens, A = (0, 2, 4) and B = (1, 3, 5), keys chosen so that A0 matches B5 exactly and A2
    B1 nearly; r = 2 merges exactly those, keeps A4 and every B token, and the merged ones are the size-weighted
    means of their members."""
    x = torch.arange(6 * 3, dtype=torch.float64).view(1, 6, 3) + 1
    k = torch.tensor([[1, 0, 0], [0, 1, 0.1], [0, 1, 0.2], [-1, -1, 0], [0, 0, 1], [1, 0, 0]], dtype=torch.float64)[None]
    size = torch.tensor([[2.0, 1, 1, 1, 1, 3]], dtype=torch.float64)[..., None]
    out, s = merge_tokens(x, k, size, 2, 0)
    assert out.shape == (1, 4, 3)
    assert torch.equal(out[0, 0], x[0, 4])  # the unmerged A token
    assert torch.allclose(out[0, 1], (x[0, 1] + x[0, 2]) / 2)  # B1 took A2
    assert torch.equal(out[0, 2], x[0, 3])
    assert torch.allclose(out[0, 3], (2 * x[0, 0] + 3 * x[0, 5]) / 5)  # B5 took A0, weighted by size
    assert s[0, :, 0].tolist() == [1.0, 2.0, 1.0, 5.0]


def test_schedule_is_clipped_and_checked() -> None:
    assert merge_schedule(8, 3, 17, 1) == (8, 4, 2)  # 16 patches: at most half of what is left each layer
    assert merge_schedule([0, 3], 2, 10, 1) == (0, 3)
    with pytest.raises(ValueError, match="one r per layer: 2 layers, got 3"):
        merge_schedule([1, 1, 1], 2, 10, 1)
    with pytest.raises(ValueError, match=">= 0"):
        random_vit().set_token_merging(-1)


def test_refused_where_positions_need_the_full_grid() -> None:
    with pytest.raises(ValueError, match="relative"):
        random_vit(posemb="relative").set_token_merging(2)
    with pytest.raises(ValueError, match="Axial"):
        random_vit(block="axial", pooling="gap", class_token=False).set_token_merging(2)


def test_map_pooling_and_distillation_token_run_merged() -> None:
    """MAP's probe attends to the merged tokens with their sizes; a distilled model's second head reads its own
    token; the encoder output shrinks by the merged count."""
    for kw in ({"pooling": "map", "class_token": False}, {"distill_token": True}):
        model = random_vit(**kw)
        x = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
        model.set_token_merging(3)
        with torch.no_grad():
            out = model.intermediates(x)
        assert out["encoded"].shape[1] == model.config.num_prefix_tokens + 16 - 3 - 3
        assert torch.allclose(out["logits"], model(x), atol=1e-6)


def test_merged_model_exports_to_onnx(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("onnxruntime")
    from vitkit.inference.backends import check_parity
    from vitkit.inference.export import export_onnx

    model = random_vit(img_size=32, num_registers=1)
    model.set_token_merging(12)
    path = export_onnx(model, tmp_path / "m.onnx")
    rep = check_parity(model, path, batch_sizes=(1, 3))
    assert rep.max_abs_diff < 1e-4 * max(rep.max_abs_logit, 1.0) and rep.top1_agreement == 1.0
