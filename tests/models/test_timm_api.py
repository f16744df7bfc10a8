"""A timm user's habits: timm names keep resolution and GELU, timm keywords, the timm API on the same weights as timm."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vitkit
from tests.helpers import digits_model
from tests.inputs import FAMILIES, TIMM_FIXTURE


def test_timm_names_keep_their_resolution_and_gelu_and_timm_keywords_mean_the_same() -> None:
    with torch.device("meta"):  # its config is what is read: a B/16's 86M random weights drawn took 1.5 CPU s
        m = vitkit.create_model("vit_base_patch16_384", num_classes=0)
    assert m.config.img_size == (384, 384) and m.config.gelu == "exact" and m.config.grid_size == (24, 24)
    assert vitkit.create_model("vit_tiny_patch16_224").config.gelu == "exact"
    assert vitkit.create_model("ViT-Ti/16").config.gelu == "tanh"  # the paper's names: the original code's GELU
    m = vitkit.create_model("vit_tiny_patch16_224", drop_path_rate=0.1, drop_rate=0.2, attn_drop_rate=0.05,
                            global_pool="avg", class_token=False, in_chans=1, num_classes=7, img_size=32)
    c = m.config
    assert (c.drop_path, c.dropout, c.attn_dropout, c.pooling, c.in_chans, c.num_classes, c.img_size) == (
        0.1, 0.2, 0.05, "gap", 1, 7, (32, 32))
    assert not c.class_token and c.fc_norm  # timm: fc_norm=None means a norm after pooling when global_pool='avg'
    for kw, match in ((dict(pretrained=True, drop_rate=0.1), "drop_rate would change the architecture the weights"),
                      (dict(pos_embed="rope"), "unknown keyword 'pos_embed'"),
                      (dict(global_pool="map"), "global_pool='map' beside a class token is not a model vitkit builds"),
                      (dict(global_pool="map", class_token=True), "global_pool='map' beside a class token")):
        with pytest.raises(ValueError, match=match):
            vitkit.create_model("vit_tiny_patch16_224", **kw)
    for name, match in (("vit_base_patch16_224_in21k", "without further suffixes"),
                        ("vit_base_patch16_224.augreg_in21k", "names pretrained weights")):
        with pytest.raises(ValueError, match=match):
            vitkit.create_model(name)


@pytest.mark.parametrize("family, kw", [("mae_avg", {}), ("avg_nofc", {"fc_norm": False})])
def test_global_pool_avg_builds_timms_model(family: str, kw: dict) -> None:
    """timm's `vit_base_patch16_224(global_pool='avg', ...)` keeps its class token and moves the final norm after
    pooling (fc_norm) unless told not to: the model vitkit builds from the same keywords holds timm's weights
    (strict) and gives timm's logits (the fixtures were written by timm from exactly these keywords)."""
    args = json.loads((FAMILIES / f"{family}_hub" / "config.json").read_text())["model_args"]
    assert args["global_pool"] == "avg" and args.get("fc_norm") == kw.get("fc_norm")
    m = vitkit.create_model("vit_base_patch16_224", img_size=32, patch_size=8, width=32, depth=2, num_heads=4,
                            mlp_dim=128, num_classes=5, global_pool="avg", **kw)
    assert m.config.class_token and m.config.pooling == "gap" and m.config.fc_norm == kw.get("fc_norm", True)
    m.load_state_dict(vitkit.load_pretrained(FAMILIES / f"{family}_hub").state_dict())
    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    with torch.no_grad():
        torch.testing.assert_close(m.eval()(torch.from_numpy(ref["x"])), torch.from_numpy(ref[f"{family}_logits"]),
                                   rtol=2e-5, atol=2e-5)


def test_integer_images_get_vitkits_own_message() -> None:
    m = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    with pytest.raises(ValueError, match="expected normalised float images, got a torch.uint8 tensor"):
        m(torch.zeros(1, 1, 16, 16, dtype=torch.uint8))


def test_timm_api_methods_match_timms_outputs_on_the_same_weights() -> None:

    api = json.loads((TIMM_FIXTURE / "api.json").read_text())
    ref = np.load(TIMM_FIXTURE / "api.npz", allow_pickle=False)
    m = vitkit.load_pretrained(TIMM_FIXTURE / "hub")
    x = torch.from_numpy(ref["x"])

    def close(a: torch.Tensor, key: str) -> None:
        torch.testing.assert_close(a, torch.from_numpy(ref[key]), rtol=2e-5, atol=2e-5, msg=key)

    with torch.no_grad():
        feats = m.forward_features(x)
        close(feats, "forward_features")
        close(m.forward_head(feats, pre_logits=True), "forward_head_pre_logits")
        close(m(x), "logits")
        for name, kw in {"all_nchw": {}, "last1_nlc_norm": dict(indices=1, output_fmt="NLC", norm=True),
                         "first_nchw": dict(indices=[0])}.items():
            inter = m.forward_intermediates(x, intermediates_only=True, **kw)
            assert len(inter) == len([k for k in ref.files if k.startswith(f"inter_{name}_")])
            for i, t in enumerate(inter):
                close(t, f"inter_{name}_{i}")
        final, inter = m.forward_intermediates(x, indices=[-1], return_prefix_tokens=True)
        close(final, "inter_final")
        close(inter[0][0], "inter_prefix_spatial")
        close(inter[0][1], "inter_prefix_tokens")
    assert (m.num_features, m.num_classes) == (api["num_features"], api["num_classes"])
    assert json.loads(json.dumps(m.group_matcher())) == api["group_matcher"]
    assert m.no_weight_decay() <= set(api["no_weight_decay"])  # timm also names tokens this model does not have
    m.reset_classifier(3)
    assert m.num_classes == api["after_reset"]["num_classes"]
    assert list(m.get_classifier().weight.shape) == api["after_reset"]["classifier"]
    assert m.get_classifier().weight.abs().sum() > 0  # timm's default init, not the paper's zero head
    m.reset_classifier(0)
    assert m.num_classes == 0 and type(m.get_classifier()).__name__ == api["after_reset_0"]["classifier"]
    with pytest.raises(ValueError, match="pools with 'token'"):
        m.reset_classifier(3, global_pool="avg")
    m.set_input_size(48)
    assert m.config.img_size == (48, 48)
    m.set_input_size(patch_size=24)  # FlexiViT's resize of the patch embedding (tests/models/test_vit.py)
    assert (m.config.patch_size, m.config.grid_size, m.patch_embed.proj.weight.shape[-1]) == (24, (2, 2), 24)
    with pytest.raises(ValueError, match="square"):
        m.set_input_size(patch_size=(16, 8))
