"""timm's names of the families vitkit reads build timm's architectures with timm's default configs (issue #39).

The fixtures were written by timm itself from these names (tests/reference/make_timm_family_reference.py): the model
`create_model(name, **model_args)` builds has exactly the state dict and config vitkit's loader makes of that file,
and with the file's weights gives timm's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vitkit
from tests.inputs import FAMILIES
from vitkit.formats import save_pretrained

# fixture folder -> the timm name it was written from (its config.json "architecture"; siglip_hub's is that name's
# architecture built through timm's VisionTransformer class)
WRITTEN_AS = {"deit_distilled": "deit_tiny_distilled_patch16_224", "deit3": "deit3_base_patch16_224",
              "dinov2_reg": "vit_base_patch14_reg4_dinov2", "clip": "vit_base_patch16_clip_quickgelu_224",
              "siglip": "vit_base_patch16_siglip_224"}


@pytest.mark.parametrize("fixture", sorted(WRITTEN_AS))
def test_a_timm_family_name_builds_the_model_its_weights_load_into(fixture: str) -> None:
    hub = FAMILIES / f"{fixture}_hub"
    doc = json.loads((hub / "config.json").read_text())
    name = WRITTEN_AS[fixture]
    assert doc["architecture"] == name or fixture == "siglip"
    m = vitkit.create_model(name, **doc["model_args"])  # a timm user's code, unchanged: timm's own keywords
    ref = vitkit.load_pretrained(hub)
    mine, theirs = m.state_dict(), ref.state_dict()
    assert {k: tuple(v.shape) for k, v in mine.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    skip = {"name", "extra", "posemb_grid"}  # posemb_grid: a loaded DINOv2 keeps its table's grid (a load policy;
    # the table's shape is compared above)
    assert {k: v for k, v in m.config.to_dict().items() if k not in skip} == {
        k: v for k, v in ref.config.to_dict().items() if k not in skip}
    m.load_state_dict(theirs)
    out = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    with torch.no_grad():
        x = torch.from_numpy(out["x"])
        torch.testing.assert_close(m.eval()(x), torch.from_numpy(out[f"{fixture}_logits"]), rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(m(x), ref(x), rtol=0, atol=0)


def test_timm_family_names_have_timms_default_configs() -> None:
    assert vitkit.list_models("*dinov2*") == sorted(f"vit_{s}_patch14{r}_dinov2" for s in ("small", "base", "large")
                                                    for r in ("", "_reg4"))
    dino = vitkit.create_model("vit_small_patch14_reg4_dinov2")
    c = dino.config
    assert (c.img_size, c.patch_size, c.width, c.num_heads, c.num_classes, c.layer_scale, c.num_registers, c.ln_eps,
            c.gelu) == ((518, 518), 14, 384, 6, 0, 1e-5, 4, 1e-6, "exact")
    assert (dino.preprocess.mean, dino.preprocess.interpolation, dino.preprocess.crop_pct) == (
        (0.485, 0.456, 0.406), "bicubic", 1.0)
    assert vitkit.models.registry.name_img_size("vit_small_patch14_dinov2") == 518
    # the sizes timm's builders set, checked small (timm's keywords shrink the model, the family's options remain)
    small = dict(img_size=32, embed_dim=32, depth=1, num_heads=4)
    clip = vitkit.create_model("vit_base_patch16_clip_quickgelu_224", patch_size=8, **small).config
    assert (clip.pre_norm, clip.patch_bias, clip.ln_eps, clip.gelu, clip.num_classes, clip.mlp_dim) == (
        True, False, 1e-5, "quick", 512, 128)
    assert vitkit.create_model("vit_base_patch16_clip_224", patch_size=8, **small).config.gelu == "exact"
    sig = vitkit.create_model("vit_so400m_patch16_siglip_256", patch_size=8, **small, mlp_ratio=3.7362)
    assert (sig.config.pooling, sig.config.class_token, sig.config.gelu, sig.config.mlp_dim, sig.config.num_classes
            ) == ("map", False, "tanh", 119, 0)
    assert sig.preprocess.crop_pct == 0.9 and sig.preprocess.mean == (0.5, 0.5, 0.5)
    d3 = vitkit.create_model("deit3_large_patch16_384", patch_size=8, **small).config
    assert (d3.layer_scale, d3.num_classes, d3.class_token) == (1e-6, 1000, True)
    assert vitkit.create_model("deit_small_distilled_patch16_224", patch_size=8, **small).config.distill_token
    hyb = vitkit.create_model("vit_base_r50_s16_384", embed_dim=32, depth=1, num_heads=4, num_classes=3)
    assert (hyb.config.resnet_layers, hyb.config.img_size, hyb.config.total_stride, hyb.preprocess.crop_pct) == (
        (3, 4, 9), (384, 384), 16, 1.0)
    with pytest.raises(ValueError, match="SwiGLU"):
        vitkit.create_model("vit_giant_patch14_dinov2")


def test_a_timm_hybrid_name_is_the_model_vitkits_timm_loader_reads(tmp_path) -> None:  # noqa: ANN001
    """timm's R50+ViT hybrid (vision_transformer_hybrid.py): written in timm's layout and read back, the loader infers
    the very model the name built (stages (3, 4, 9), patch size 1 on the stride-16 map)."""
    m = vitkit.create_model("vit_base_r50_s16_384", img_size=64, embed_dim=32, depth=1, num_heads=4, num_classes=3)
    back = vitkit.load_pretrained(save_pretrained(m, tmp_path / "hyb", format="timm"))
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        k: tuple(v.shape) for k, v in back.state_dict().items()}
    skip = {"name", "extra", "posemb_grid"}  # posemb_grid: a loaded DINOv2 keeps its table's grid (a load policy;
    # the table's shape is compared above)
    assert {k: v for k, v in m.config.to_dict().items() if k not in skip} == {
        k: v for k, v in back.config.to_dict().items() if k not in skip}
