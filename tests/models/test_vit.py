"""The model of paper §3.1: sizes, registry names, eq. 1-4 structure, input validation, posemb."""

import json

import pytest
import torch

import vitkit
from vitkit.models.registry import canonical_name
from vitkit.models.vit import VisionTransformer, ViTConfig


def _count(name: str) -> int:
    with torch.device("meta"):
        m = vitkit.create_model(name)
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize(
    "name,exact,paper_m",
    [("vit_b16", 86_567_656, 86), ("vit_l32", 306_535_400, 307), ("vit_h14", 632_045_800, 632)],
)
def test_parameter_counts_match_table1(name: str, exact: int, paper_m: int) -> None:
    n = _count(name)
    assert n == exact  # the counts timm and the original code report for the same architecture
    assert abs(n / 1e6 - paper_m) < 1.0  # Table 1 (in millions)
    assert abs(_count("vit_l16") / 1e6 - 307) / 307 < 0.01


def test_paper_spelling_and_timm_names() -> None:
    assert canonical_name("ViT-B/16") == "vit_b16"
    assert canonical_name("vit_large_patch32_224") == "vit_l32"
    assert canonical_name("Ti/16") == "vit_ti16"
    assert {"vit_s8", "vit_b8", "vit_h14", "vit_ti16", "vit_s32"} <= set(vitkit.list_models())
    with pytest.raises(ValueError, match="unknown model"):
        vitkit.create_model("vit_q16")


def tiny(**kw) -> VisionTransformer:
    cfg = dict(img_size=32, patch_size=8, width=32, depth=2, num_heads=4, mlp_dim=64, num_classes=7)
    cfg.update(kw)
    return VisionTransformer(ViTConfig(**cfg))


def test_forward_shapes_and_zero_head() -> None:
    m = tiny()
    x = torch.randn(3, 3, 32, 32)
    assert m(x).shape == (3, 7)
    assert torch.count_nonzero(m(x)) == 0  # zero-initialised head (§3.2)
    assert m.forward_features(x).shape == (3, 1 + 16, 32)
    assert torch.all(m.cls_token == 0)


def test_equations_1_to_4_by_hand() -> None:
    """Recompute the forward pass from the equations with explicit matrix algebra."""
    m = tiny(gelu="exact", representation_size=16).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, 3, 32, 32)
    P, D, H = 8, 32, 4
    patches = x.unfold(2, P, P).unfold(3, P, P)  # B C gh gw P P
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, 3 * P * P)
    E = m.patch_embed.proj.weight.reshape(D, -1).T
    z = torch.cat([m.cls_token.expand(2, -1, -1), patches @ E + m.patch_embed.proj.bias], 1) + m.pos_embed  # eq. 1

    def ln(t, mod):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + 1e-6) * mod.weight + mod.bias

    for blk in m.blocks:
        h = ln(z, blk.norm1)
        q, k, v = (h @ blk.attn.qkv.weight.T + blk.attn.qkv.bias).chunk(3, -1)
        split = lambda t: t.reshape(2, 17, H, D // H).transpose(1, 2)  # noqa: E731
        a = torch.softmax(split(q) @ split(k).transpose(-1, -2) / (D // H) ** 0.5, -1)
        msa = (a @ split(v)).transpose(1, 2).reshape(2, 17, D) @ blk.attn.proj.weight.T + blk.attn.proj.bias
        z = z + msa  # eq. 2
        h = ln(z, blk.norm2)
        mlp = torch.nn.functional.gelu(h @ blk.mlp.fc1.weight.T + blk.mlp.fc1.bias) @ blk.mlp.fc2.weight.T + blk.mlp.fc2.bias
        z = z + mlp  # eq. 3
    y = ln(z[:, 0], m.norm)  # eq. 4
    logits = torch.tanh(y @ m.pre_logits[0].weight.T + m.pre_logits[0].bias) @ m.head.weight.T + m.head.bias
    torch.testing.assert_close(m(x), logits, rtol=1e-4, atol=1e-4)


def test_attention_weights_path_matches_fused_path() -> None:
    m = tiny().eval()
    torch.nn.init.normal_(m.head.weight)
    x = torch.randn(2, 3, 32, 32)
    out = m.intermediates(x, attention=True)
    feats, attns = out["encoded"], out["attention"]
    torch.testing.assert_close(feats, m.forward_features(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["logits"], m(x), rtol=1e-5, atol=1e-5)
    assert len(attns) == 2 and attns[0].shape == (2, 4, 17, 17)
    torch.testing.assert_close(attns[0].sum(-1), torch.ones(2, 4, 17))


@pytest.mark.parametrize("kw", [dict(pooling="gap"), dict(posemb="learn2d"), dict(posemb="none"), dict(img_size=(32, 48))])
def test_variants_run(kw) -> None:
    m = tiny(**kw)
    h, w = m.config.img_size
    assert m(torch.randn(2, 3, h, w)).shape == (2, 7)


def test_bad_input_messages() -> None:
    m = tiny()
    with pytest.raises(ValueError, match="expected 3 input channels, got 1"):
        m(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="4-D batch.*3-D"):
        m(torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match="not divisible by the patch stride 8"):
        m(torch.randn(1, 3, 30, 32))
    with pytest.raises(ValueError, match="expects 32x32 images, got 64x64"):
        m(torch.randn(1, 3, 64, 64))
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        ViTConfig(width=30, num_heads=4)


def test_higher_resolution_when_asked() -> None:
    m = tiny(dynamic_img_size=True).eval()
    torch.nn.init.normal_(m.head.weight)
    x = torch.randn(1, 3, 32, 32)
    big = torch.nn.functional.interpolate(x, size=(48, 64), mode="nearest")
    assert m(big).shape == (1, 7)
    ref = m(x)
    m2 = tiny().eval()
    m2.load_state_dict(m.state_dict())
    m2.set_img_size((48, 64))
    assert m2.pos_embed.shape == (1, 1 + 6 * 8, 32)
    torch.testing.assert_close(m2(big), m(big))
    assert ref.shape == (1, 7)


def test_resample_posemb_identity_and_class_token() -> None:
    pe = torch.randn(1, 1 + 4 * 6, 8)
    assert vitkit.resample_posemb(pe, (4, 6), (4, 6)) is pe
    out = vitkit.resample_posemb(pe, (8, 12), (4, 6), mode="bilinear")
    assert out.shape == (1, 1 + 96, 8)
    torch.testing.assert_close(out[:, 0], pe[:, 0])
    # bilinear upsampling of a constant grid stays constant
    const = torch.cat([torch.zeros(1, 1, 8), torch.ones(1, 24, 8)], 1)
    torch.testing.assert_close(vitkit.resample_posemb(const, (7, 5), (4, 6), mode="bilinear")[:, 1:], torch.ones(1, 35, 8))
    with pytest.raises(ValueError, match="old_grid"):
        vitkit.resample_posemb(torch.randn(1, 1 + 24, 8), (5, 5))


def test_config_json_roundtrip() -> None:
    cfg = ViTConfig(img_size=(32, 48), patch_size=8, width=32, depth=2, num_heads=4, mlp_dim=64, representation_size=16)
    assert ViTConfig.from_json(cfg.to_json()) == cfg
    assert json.loads(cfg.to_json())["img_size"] == [32, 48]
    with pytest.raises(ValueError, match="unknown ViTConfig fields"):
        ViTConfig.from_dict({"widht": 3})


def test_init_matches_original_code() -> None:
    m = tiny(num_classes=10)
    blk = m.blocks[0]
    assert blk.mlp.fc1.bias.abs().max() < 1e-4  # N(0, 1e-6)
    bound = (6 / (32 + 32)) ** 0.5
    assert blk.attn.qkv.weight.abs().max() <= bound
    assert 0.01 < m.pos_embed.std() < 0.03
    assert torch.all(m.head.weight == 0) and torch.all(m.head.bias == 0)


def test_save_load_roundtrip_and_errors(tmp_path) -> None:
    m = tiny().eval()
    torch.nn.init.normal_(m.head.weight)
    out = vitkit.save_pretrained(m, tmp_path / "ck")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    m2 = vitkit.load_pretrained(out)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(m(x), m2(x))
    assert not m2.training
    # truncated weights: the error names the file
    w = out / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        vitkit.load_pretrained(out)
    # mismatched config: the error names the first mismatching tensor
    vitkit.save_pretrained(m, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["model"]["mlp_dim"] = 48
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"blocks\.0\.mlp\.fc1\.weight.*\(64, 32\).*\(48, 32\)"):
        vitkit.load_pretrained(out)
    with pytest.raises(FileNotFoundError):
        vitkit.load_pretrained(tmp_path / "nothing")


def test_hybrid_registry_names_and_size() -> None:
    assert canonical_name("R50+ViT-B/16") == "vit_r50_b16"
    assert canonical_name("R50x1+ViT-L/32") == "vit_r50_l32"
    with torch.device("meta"):
        b16 = vitkit.create_model("R50+ViT-B/16", img_size=384)
        l32 = vitkit.create_model("vit_r50_l32")
    assert b16.config.resnet_layers == (3, 4, 9) and b16.config.patch_size == 1
    assert b16.config.grid_size == (24, 24)  # stride 16: stage 4 folded into stage 3 (§4.1)
    assert l32.config.resnet_layers == (3, 4, 6, 3) and l32.config.grid_size == (7, 7)
    # timm's vit_base_r50_s16_384 is the same architecture: 98.95M parameters
    assert abs(sum(p.numel() for p in b16.parameters()) / 1e6 - 98.95) < 0.01
    tiny_hybrid = vitkit.create_model("vit_r50_ti16", img_size=32, num_classes=3)
    assert tiny_hybrid(torch.randn(1, 3, 32, 32)).shape == (1, 3)


def test_flexivit_patch_size_change_keeps_a_resized_patch_s_token() -> None:
    """set_patch_size (FlexiViT's PI-resize, timm's resample_patch_embed): an image whose every 8 px patch is resized
    to 16 px (the kernel's own resize, bicubic) gives the 16 px model the tokens, so the logits, the 8 px model gave
    the original; E_pos is resampled to the new grid; the hybrid and bad sizes are refused by name."""
    import torch.nn.functional as F

    m = VisionTransformer(ViTConfig(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64,
                                    num_classes=5))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    m.eval()
    x = torch.randn(2, 3, 32, 32, generator=g)
    cells = x.unfold(2, 8, 8).unfold(3, 8, 8).permute(0, 2, 3, 1, 4, 5).reshape(-1, 3, 8, 8)  # (B*4*4, C, 8, 8)
    up = F.interpolate(cells, size=(16, 16), mode="bicubic", antialias=True, align_corners=False)
    big = up.reshape(2, 4, 4, 3, 16, 16).permute(0, 3, 1, 4, 2, 5).reshape(2, 3, 64, 64)
    with torch.no_grad():
        want, tokens = m(x), m.patch_embed(x)
        m.set_patch_size(16, img_size=64)
        assert (m.config.patch_size, m.config.grid_size) == (16, (4, 4))
        assert torch.allclose(m.patch_embed(big), tokens, atol=1e-4)
        assert torch.allclose(m(big), want, atol=1e-4)
        naive = F.interpolate(x, size=(64, 64), mode="nearest")  # another resize: other tokens
        assert (m.patch_embed(naive) - tokens).abs().max() > 1e-2
        pe = m.pos_embed.clone()
        m.set_patch_size(8)  # smaller patches at 64 px: an 8x8 grid, E_pos resampled to it (least squares kernel)
        assert m.pos_embed.shape[1] == 1 + 64 and m(big).shape == (2, 5) and not torch.equal(m.pos_embed[:, :17], pe)
    with pytest.raises(ValueError, match="hybrid's patches are cells of its ResNet stem"):
        VisionTransformer(ViTConfig(img_size=32, patch_size=2, width=32, depth=1, num_heads=2, mlp_dim=64,
                                    resnet_layers=(1,), resnet_width=0.5)).set_patch_size(4)
    with pytest.raises(ValueError, match="positive integer, got 0"):
        m.set_patch_size(0)
    with pytest.raises(ValueError, match="not divisible by the patch stride 24"):
        m.set_patch_size(24)  # 64 px is not a whole number of 24 px patches
    assert m.config.patch_size == m.patch_embed.proj.weight.shape[-1] == 8  # a refused change changes nothing


def test_factorized_position_embedding_is_row_plus_column() -> None:
    """posemb="factorized" (NaViT): E_pos(r, c) = X_r + Y_c, two tables of width D (learn2d concatenates two of
    D/2); at another grid each table is resampled along its own axis; per-layer placement is refused by name."""
    m = VisionTransformer(ViTConfig(img_size=(16, 32), patch_size=8, width=32, depth=1, num_heads=2, mlp_dim=64,
                                    num_classes=3, posemb="factorized"))
    with torch.no_grad():
        for p in (m.pos_embed_row, m.pos_embed_col, m.pos_embed_cls):
            p.normal_()
    assert m.pos_embed_row.shape == (1, 2, 32) and m.pos_embed_col.shape == (1, 4, 32)
    pe = m.position_embedding((2, 4))
    assert torch.equal(pe[0, 0], m.pos_embed_cls[0, 0])
    for r in range(2):
        for c in range(4):
            assert torch.equal(pe[0, 1 + r * 4 + c], m.pos_embed_row[0, r] + m.pos_embed_col[0, c])
    wide = m.position_embedding((2, 8))  # only the column table is resampled: every row keeps its X_r difference
    assert torch.allclose(wide[0, 1:9] - wide[0, 9:17], (m.pos_embed_row[0, 0] - m.pos_embed_row[0, 1]).expand(8, -1),
                          atol=1e-6)
    assert m(torch.randn(2, 3, 16, 32)).shape == (2, 3)
    with pytest.raises(ValueError, match="posemb_placement 'every_layer' applies to learned 1D / 2D"):
        ViTConfig(posemb="factorized", posemb_placement="every_layer")


def test_an_architecture_built_on_meta_draws_no_normal_init(monkeypatch) -> None:  # noqa: ANN001
    """A ViT built on the meta device (a writer's key check, a run's config check) calls no normal_ on its meta
    tensors (torch's meta normal_ imports torch._dynamo: ~1.3 CPU s in `vitkit convert`); on the CPU the same
    draws as nn.init.normal_ for the same seed."""
    from torch import nn

    from vitkit.models.mpp import MaskedPatchPrediction
    from vitkit.models.posemb import init_normal_

    normal = nn.init.normal_

    def refuse_meta(t: torch.Tensor, *a, **k) -> torch.Tensor:  # noqa: ANN002, ANN003
        assert not t.is_meta, "normal_ on a meta tensor"
        return normal(t, *a, **k)

    monkeypatch.setattr(nn.init, "normal_", refuse_meta)
    with torch.device("meta"):
        for kw in ({}, {"num_registers": 2, "distill_token": True}, {"posemb": "relative"}, {"posemb": "learn2d"}):
            m = tiny(**kw)
            assert all(p.is_meta for p in m.parameters())
        MaskedPatchPrediction(tiny(), (0.5,) * 3, (0.5,) * 3)
    torch.manual_seed(3)
    want = normal(torch.empty(5, 7), std=0.02)
    torch.manual_seed(3)
    assert torch.equal(init_normal_(torch.empty(5, 7), std=0.02), want)
    m = tiny(num_registers=2)  # on the CPU every normal init is drawn: no two blocks' biases alike, tokens nonzero
    assert torch.count_nonzero(m.reg_token) == m.reg_token.numel() and torch.count_nonzero(m.pos_embed) > 0
