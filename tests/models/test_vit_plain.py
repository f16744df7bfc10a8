"""The plain-ViT baseline options (Beyer et al. 2022; Darcet et al. 2024): fixed 2-D sin-cos position
embeddings, attention pooling (MAP), register tokens; saved and loaded by vitkit's format, refused by name by
formats that cannot hold them; the plain_vit_s16_i1k recipe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vitkit.formats import load_pretrained, save_pretrained
from vitkit.models import create_model
from vitkit.models.posemb import sincos_2d
from vitkit.train.config import load_config
from vitkit.train.run import check_config, run_experiment

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

SMALL = dict(img_size=16, patch_size=4, width=32, depth=2, num_heads=4, mlp_dim=64, num_classes=5)


def test_sincos2d_equals_an_independent_numpy_table() -> None:
    gh, gw, d = 3, 5, 16
    q = d // 4
    omega = 1.0 / 10_000 ** (np.arange(q) / q)
    want = np.zeros((gh * gw, d))
    for i in range(gh):
        for j in range(gw):
            want[i * gw + j] = np.concatenate([np.sin(i * omega), np.cos(i * omega), np.sin(j * omega), np.cos(j * omega)])
    np.testing.assert_allclose(sincos_2d((gh, gw), d)[0].numpy(), want, atol=1e-6)
    model = create_model("vit", **SMALL, posemb="sincos2d", pooling="gap")
    assert not any("pos_embed" in n for n, _ in model.named_parameters())  # fixed, not learned
    torch.testing.assert_close(model.position_embedding((4, 4))[0], sincos_2d((4, 4), 32)[0])
    with pytest.raises(ValueError, match="width divisible by 4"):
        create_model("vit", **{**SMALL, "width": 30, "num_heads": 3}, posemb="sincos2d")


def test_registers_join_the_attention_and_are_dropped_at_the_output() -> None:
    torch.manual_seed(0)
    plain = create_model("vit", **SMALL)
    zero = create_model("vit", **SMALL, num_registers=0)
    zero.load_state_dict(plain.state_dict())  # zero registers: the plain ViT, tensor for tensor
    x = torch.randn(3, 3, 16, 16)
    torch.testing.assert_close(zero.forward_features(x), plain.forward_features(x), rtol=0, atol=0)

    regs = create_model("vit", **SMALL, num_registers=4)
    missing = regs.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing == ["reg_token"]  # registers add one tensor and take no position embedding
    assert regs.pos_embed.shape == plain.pos_embed.shape
    z = regs.forward_features(x)
    assert z.shape[1] == 1 + 4 + 16
    edited = z.clone()
    edited[:, 1:5] = 123.0  # the register outputs do not reach the head
    torch.testing.assert_close(regs.forward_head(edited, pre_logits=True), regs.forward_head(z, pre_logits=True))
    with torch.no_grad():
        out = regs.forward_head(z, pre_logits=True)
        regs.reg_token.add_(1.0)  # ... but they take part in the attention on the way
        assert not torch.allclose(regs.forward_head(regs.forward_features(x), pre_logits=True), out)
    gap = create_model("vit", **SMALL, num_registers=2, pooling="gap")
    zg = gap.forward_features(x)
    torch.testing.assert_close(gap.pool(zg), zg[:, 2:].mean(1))  # GAP over patches only


def test_map_head_equals_torch_multihead_attention() -> None:
    torch.manual_seed(1)
    model = create_model("vit", **SMALL, pooling="map")
    head = model.map_head
    D = 32
    ref = nn.MultiheadAttention(D, 4, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([head.q.weight, head.kv.weight]))
        ref.in_proj_bias.copy_(torch.cat([head.q.bias, head.kv.bias]))
        ref.out_proj.weight.copy_(head.proj.weight)
        ref.out_proj.bias.copy_(head.proj.bias)
    tokens = torch.randn(2, 16, D)
    y, _ = ref(head.probe.expand(2, -1, -1), tokens, tokens)
    want = (y + head.mlp(head.norm(y)))[:, 0]
    torch.testing.assert_close(head(tokens), want, rtol=1e-5, atol=1e-6)
    z = model.forward_features(torch.randn(2, 3, 16, 16))
    torch.testing.assert_close(model.pool(z), head(z))  # no class token: every token is a patch


def test_options_round_trip_in_vitkit_format_and_are_refused_by_the_others(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = create_model("vit", **SMALL, posemb="sincos2d", pooling="map", num_registers=3)
    x = torch.randn(2, 3, 16, 16)
    save_pretrained(model, tmp_path / "native")
    back = load_pretrained(tmp_path / "native")
    assert back.config.num_registers == 3 and back.config.pooling == "map" and back.config.posemb == "sincos2d"
    torch.testing.assert_close(back.forward_features(x), model.forward_features(x), rtol=0, atol=0)
    torch.testing.assert_close(back.pool(back.forward_features(x)), model.pool(model.forward_features(x)), rtol=0, atol=0)
    for fmt in ("timm", "hf", "npz"):
        with pytest.raises(ValueError, match="posemb='sincos2d'|num_registers=3|pooling='map'"):
            save_pretrained(model, tmp_path / fmt, format=fmt)
    regs = create_model("vit", **SMALL, num_registers=2).eval()  # timm: zero E_pos rows for the registers
    with torch.no_grad():
        torch.testing.assert_close(load_pretrained(save_pretrained(regs, tmp_path / "t2", format="timm"))(x), regs(x),
                                   rtol=0, atol=0)
    mapped = create_model("vit", **SMALL, pooling="map")  # timm holds MAP pooling (its attn_pool) with a classifier
    mapped.eval()
    with torch.no_grad():
        torch.testing.assert_close(load_pretrained(save_pretrained(mapped, tmp_path / "t3", format="timm"))(x),
                                   mapped(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="SiglipVisionModel .*num_classes"):  # HF: MAP towers are SigLIP's, headless
        save_pretrained(mapped, tmp_path / "t4", format="hf")


def test_plain_vit_recipe_loads_checks_and_dry_runs(tmp_path: Path) -> None:
    cfg = load_config("plain_vit_s16_i1k")
    assert cfg.model.arch["pooling"] == "gap" and cfg.model.arch["posemb"] == "sincos2d"
    assert cfg.train.batch_size == 1024 and cfg.train.mixup == 0.2
    assert cfg.data.randaugment == [2, 10] and cfg.train.warmup_steps == 10000
    check_config(cfg)
    # the recipe as written dry-run on a 2-block width-32 ViT at 32 px: its S/16's code path (gap, sincos2d)
    small = load_config("plain_vit_s16_i1k", ["model.img_size=32", "model.width=32", "model.depth=2",
                                              "model.num_heads=2", "model.mlp_dim=64", "train.precision=\"fp32\""])
    res = run_experiment(small, tmp_path / "dry", dry_run=2, progress=False)
    assert res["steps"] == 2
