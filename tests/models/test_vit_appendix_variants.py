"""The appendix's model variants: relative position embeddings and the placements of absolute ones (D.4),
Axial-ViT (D.7). Known-answer tests on the maths, vitkit's format, the foreign formats' refusals, and a short
training run of each variant whose loss falls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.helpers import random_vit
from vitkit.models.vit import EncodeState, ViTConfig

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

_model = random_vit


# ----------------------------------------------------------------------------- Axial-ViT (D.7)
def test_axial_attention_stays_in_its_row_then_its_column() -> None:
    m = _model(block="axial", pooling="gap")
    x = torch.randn(2, 1, 16, 16)
    attns = m.intermediates(x, attention=True)["attention"]
    assert len(attns) == 2 * m.config.depth  # a row step and a column step per block
    gh, gw = m.config.grid_size
    rows = torch.arange(gh * gw) // gw
    cols = torch.arange(gh * gw) % gw
    for a_row, a_col in zip(attns[0::2], attns[1::2]):
        outside_row = rows[:, None] != rows[None, :]
        outside_col = cols[:, None] != cols[None, :]
        assert torch.all(a_row[..., outside_row] == 0) and torch.all(a_col[..., outside_col] == 0)
        torch.testing.assert_close(a_row.sum(-1), torch.ones_like(a_row.sum(-1)))  # a softmax over the row
        assert torch.all(a_row[..., ~outside_row] > 0) and torch.all(a_col[..., ~outside_col] > 0)


def test_axial_row_step_is_equivariant_to_swapping_rows() -> None:
    m = _model(block="axial", pooling="gap", depth=1)
    blk = m.blocks[0]
    class Skip(torch.nn.Module):
        def forward(self, t, state):  # noqa: ANN001, ANN202
            return t

    blk.col = Skip()  # keep the row step alone
    gh, gw = m.config.grid_size
    z = torch.randn(3, gh * gw, 32)
    swapped = z.view(3, gh, gw, 32)[:, [2, 1, 0, 3]].reshape(3, gh * gw, 32)
    with torch.no_grad():
        out = blk(z, EncodeState((gh, gw), 0))
        out_s = blk(swapped, EncodeState((gh, gw), 0))
    torch.testing.assert_close(out_s.view(3, gh, gw, 32), out.view(3, gh, gw, 32)[:, [2, 1, 0, 3]])


def test_axial_parameter_counts_match_the_definition() -> None:
    """Each Axial block is two encoder blocks; no class token (GAP)."""
    with torch.device("meta"):
        plain = vitkit.create_model("vit_b16")
        axial = vitkit.create_model("Axial-ViT-B/16")
        axial32 = vitkit.create_model("axial_vit_b32")
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    block = count(plain.blocks[0])
    assert block == 7_087_872
    assert count(axial) == count(plain) + 12 * block - 768 - 768  # + 12 blocks, - class token, - its E_pos row
    assert count(axial) == 171_620_584 and axial.config.pooling == "gap" and axial32.config.patch_size == 32
    assert {"axial_vit_b16", "axial_vit_b32"} <= set(vitkit.list_models())


# ----------------------------------------------------------------------------- relative position embeddings (D.4)
def test_relative_logits_are_the_query_against_the_offset_embedding() -> None:
    m = _model(posemb="relative")
    attn = m.blocks[0].attn
    T = m.config.num_prefix_tokens + m.config.num_patches
    assert attn.rel.table.shape == (2 * T - 1, m.config.head_dim)
    q = torch.randn(2, 2, T, m.config.head_dim)
    bias = attn.rel(q, attn.scale)
    ref = torch.empty(2, 2, T, T)
    for i in range(T):
        for j in range(T):
            ref[:, :, i, j] = (q[:, :, i] * attn.scale) @ attn.rel.table[i - j + T - 1]
    torch.testing.assert_close(bias, ref)
    # the explicit-softmax path (inspection) and SDPA agree; a zero table is the model without E_pos
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        fused = m(x)
        explicit = m.intermediates(x, attention=True)["logits"]
        torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
        none = _model(posemb="none")
        for blk in m.blocks:
            blk.attn.rel.table.zero_()
        none.load_state_dict({k: v for k, v in m.state_dict().items() if "rel.table" not in k})
        torch.testing.assert_close(m(x), none(x))


def test_relative_tables_follow_a_new_resolution() -> None:
    m = _model(posemb="relative")
    m.set_img_size(24)  # 3x3 -> ... grid 6x6: T = 37
    assert m.blocks[0].attn.rel.table.shape == (2 * 37 - 1, m.config.head_dim)
    assert m(torch.randn(1, 1, 24, 24)).shape == (1, 5)


# ----------------------------------------------------------------------------- placements (D.4)
@pytest.mark.parametrize("posemb", ["learn1d", "learn2d"])
def test_every_layer_placements(posemb: str) -> None:
    x = torch.randn(2, 1, 16, 16)
    per = _model(posemb=posemb, posemb_placement="every_layer")
    shared = _model(posemb=posemb, posemb_placement="every_layer_shared")
    key = "pos_embed" if posemb == "learn1d" else "pos_embed_row"
    assert getattr(per, key).shape[0] == 2 and getattr(shared, key).shape[0] == 1
    with torch.no_grad():  # by hand: the patch tokens, then E_pos of layer l before block l
        grid = per.config.grid_size
        z = per.patch_embed(x).flatten(2).transpose(1, 2)
        z = torch.cat([per.cls_token.expand(2, -1, -1), z], 1)
        for i, blk in enumerate(per.blocks):
            z = blk(z + per.position_embedding(grid, i))
        torch.testing.assert_close(per.forward_features(x), per.norm(z))
        # one table added at every layer, and one table at the input only, differ (from layer 2 on)
        inp = _model(posemb=posemb)
        inp.load_state_dict(shared.state_dict())
        assert not torch.allclose(inp(x), shared(x))


# ----------------------------------------------------------------------------- formats, training
@pytest.mark.parametrize("kw", [dict(block="axial", pooling="gap"), dict(posemb="relative"),
                                dict(posemb_placement="every_layer"), dict(posemb="learn2d",
                                                                           posemb_placement="every_layer_shared")])
def test_variants_save_in_vitkit_format_and_are_refused_elsewhere(tmp_path: Path, kw: dict) -> None:
    m = _model(**kw)
    vitkit.save_pretrained(m, tmp_path / "vk")
    again = vitkit.load_pretrained(tmp_path / "vk")
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        assert torch.equal(again(x), m(x))
    for fmt in ("npz", "timm", "hf"):
        with pytest.raises(ValueError, match=r"posemb|Axial|every layer"):
            vitkit.save_pretrained(m, tmp_path / f"out.{fmt}", format=fmt)


def test_bad_variant_combinations_are_refused() -> None:
    with pytest.raises(ValueError, match="no class token: use pooling='gap'"):
        ViTConfig(block="axial")
    with pytest.raises(ValueError, match="applies to learned 1D / 2D"):
        ViTConfig(posemb="relative", posemb_placement="every_layer")
    with pytest.raises(ValueError, match="posemb must be one of"):
        ViTConfig(posemb="sincos")


@pytest.mark.parametrize("sets", [["model.block='axial'", "model.pooling='gap'"], ["model.posemb='relative'"],
                                  ["model.posemb_placement='every_layer'"]])
def test_each_variant_trains(tmp_path: Path, sets: list[str]) -> None:
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    cfg = load_config("digits_demo", ["model.width=32", "model.depth=2", "model.num_heads=2", "model.mlp_dim=64",
                                      "schedule.steps=80", "schedule.warmup_steps=8", "train.batch_size=32",
                                      "train.log_every=20", "optim.lr=5e-3", "optim.label_smoothing=0.0", *sets])
    run_experiment(cfg, tmp_path / "run", progress=False)
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
              if "loss" in r]
    assert losses[-1] < 0.92 * losses[0], losses  # 80 small steps: falling, from chance (ln 10 = 2.30)
