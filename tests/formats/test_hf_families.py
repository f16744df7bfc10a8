"""Hugging Face folders of the ViT families (DeiT, DINOv2, CLIP, SigLIP, ViTMAE) written by transformers itself load
with transformers' outputs: random small models built and saved by transformers here (it runs offline), read by
vitkit, compared on the same input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.inputs import noise_folder
from vitkit.cli import main

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
             patch_size=8)
TOL = dict(rtol=2e-5, atol=2e-5)


def _saved(model: torch.nn.Module, out: Path) -> Path:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # far from the init (LayerScale, zero biases), so every tensor matters
            p.normal_(0, 0.3)
    model.eval().save_pretrained(out)
    return out


def _x() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_deit_with_teacher_averages_its_two_heads_as_transformers(tmp_path: Path) -> None:
    hf = transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(**SMALL, num_labels=5))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "deit"))
    assert m.config.distill_token and m.config.num_classes == 5 and m.config.ln_eps == 1e-12
    x = _x()
    with torch.no_grad():
        ref = hf(pixel_values=x, output_hidden_states=True)
        torch.testing.assert_close(m(x), ref.logits, **TOL)
        torch.testing.assert_close(m.forward_features(x), hf.deit.layernorm(ref.hidden_states[-1]), **TOL)
    single = transformers.DeiTForImageClassification(transformers.DeiTConfig(**SMALL, num_labels=5))
    with pytest.raises(ValueError, match="DeiTForImageClassification classifies from the class token alone"):
        vitkit.load_pretrained(_saved(single, tmp_path / "single"))


def test_dinov2_layerscale_and_pooled_class_token_match_transformers(tmp_path: Path) -> None:
    hf = transformers.Dinov2Model(transformers.Dinov2Config(**SMALL, layerscale_value=1e-5))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "dino"))
    assert m.config.layer_scale == 1e-5 and m.config.ln_eps == 1e-6 and m.config.num_classes == 0
    x = _x()
    with torch.no_grad():
        ref = hf(pixel_values=x)
        torch.testing.assert_close(m.forward_features(x), ref.last_hidden_state, **TOL)
        torch.testing.assert_close(m.forward_head(m.forward_features(x), pre_logits=True), ref.pooler_output, **TOL)
    m.config.dynamic_img_size = True  # other sizes: E_pos resampled as DINOv2 does (bicubic, antialiased)
    for side in (48, 24):
        y = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(side))
        with torch.no_grad():
            torch.testing.assert_close(m.forward_features(y), hf(pixel_values=y).last_hidden_state, **TOL)
    head = transformers.Dinov2ForImageClassification(transformers.Dinov2Config(**SMALL, num_labels=3))
    with pytest.raises(ValueError, match=r"classifier reads \[class token, mean of the patches\]"):
        vitkit.load_pretrained(_saved(head, tmp_path / "dinohead"))
    swiglu = transformers.Dinov2Model(transformers.Dinov2Config(**SMALL, use_swiglu_ffn=True))
    with pytest.raises(ValueError, match="SwiGLU"):
        vitkit.load_pretrained(_saved(swiglu, tmp_path / "swiglu"))


def test_layerscale_vits_save_as_transformers_dinov2_with_their_outputs(tmp_path: Path) -> None:
    """`--to hf` writes a ViT with LayerScale as transformers' Dinov2Model, which transformers loads to the same
    outputs: an HF DINOv2 back out, and timm's DeiT III (E_pos on the patches only: a zero class-token row)."""
    from tests.inputs import FAMILIES

    hf = transformers.Dinov2Model(transformers.Dinov2Config(**SMALL, layerscale_value=1e-5))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "dino"))
    assert main(["convert", str(tmp_path / "dino"), str(tmp_path / "back"), "--to", "hf"]) == 0
    again = transformers.Dinov2Model.from_pretrained(tmp_path / "back").eval()
    x = _x()
    with torch.no_grad():
        ref = hf(pixel_values=x)
        out = again(pixel_values=x)
        torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, **TOL)
        torch.testing.assert_close(out.pooler_output, ref.pooler_output, **TOL)
    assert vitkit.load_pretrained(tmp_path / "back").config.layer_scale == m.config.layer_scale
    deit3 = vitkit.load_pretrained(FAMILIES / "deit3_hub", num_classes=0)
    vitkit.save_pretrained(deit3, tmp_path / "deit3_hf", format="hf")
    theirs = transformers.Dinov2Model.from_pretrained(tmp_path / "deit3_hf").eval()
    with torch.no_grad():
        feats = deit3.forward_features(x)
        torch.testing.assert_close(theirs(pixel_values=x).last_hidden_state, feats, **TOL)
        torch.testing.assert_close(theirs(pixel_values=x).pooler_output, deit3.forward_head(feats, pre_logits=True),
                                   **TOL)
    with pytest.raises(ValueError, match=r"cannot save as a Hugging Face Dinov2Model .*num_classes=5"):
        vitkit.save_pretrained(vitkit.load_pretrained(FAMILIES / "deit3_hub"), tmp_path / "x", format="hf")


@pytest.mark.parametrize("projection", [False, True])
def test_clip_vision_towers_match_transformers(tmp_path: Path, projection: bool) -> None:
    cfg = transformers.CLIPVisionConfig(**SMALL, projection_dim=12)
    hf = transformers.CLIPVisionModelWithProjection(cfg) if projection else transformers.CLIPVisionModel(cfg)
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "clip"))
    c = m.config
    assert (c.pre_norm, c.patch_bias, c.gelu, c.ln_eps) == (True, False, "quick", 1e-5)
    x = _x()
    with torch.no_grad():
        ref = hf(pixel_values=x)
        out = m.intermediates(x)
        # HF's last_hidden_state is the last block's output (its post_layernorm acts on the pooled token only)
        torch.testing.assert_close(out["blocks"][-1], ref.last_hidden_state, **TOL)
        if projection:
            assert c.num_classes == 12
            torch.testing.assert_close(m(x), ref.image_embeds, **TOL)
        else:
            torch.testing.assert_close(out["pooled"], ref.pooler_output, **TOL)


def test_siglip_vision_tower_matches_transformers(tmp_path: Path) -> None:
    hf = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**SMALL))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "siglip"))
    assert m.config.pooling == "map" and not m.config.class_token and m.config.gelu == "tanh"
    x = _x()
    with torch.no_grad():
        ref = hf(pixel_values=x)
        torch.testing.assert_close(m.forward_features(x), ref.last_hidden_state, **TOL)
        torch.testing.assert_close(m.forward_head(m.forward_features(x), pre_logits=True), ref.pooler_output, **TOL)


def test_vit_mae_encoder_matches_transformers_without_masking(tmp_path: Path) -> None:
    hf = transformers.ViTMAEForPreTraining(transformers.ViTMAEConfig(**SMALL, mask_ratio=0.0))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "mae"))  # the decoder is left out
    x = _x()
    noise = torch.arange(16, dtype=torch.float32).expand(2, 16)  # the identity shuffle: tokens stay in place
    with torch.no_grad():
        ref = hf.vit(pixel_values=x, noise=noise)
        torch.testing.assert_close(m.forward_features(x), ref.last_hidden_state, **TOL)


def test_hf_families_run_through_the_commands_and_their_preprocessing_is_read(tmp_path: Path) -> None:
    hf = transformers.Dinov2Model(transformers.Dinov2Config(**SMALL))
    folder = _saved(hf, tmp_path / "dino")
    (folder / "preprocessor_config.json").write_text(json.dumps({  # DINOv2's: shortest edge 36, centre crop 32
        "image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": 36},
        "resample": 3, "do_center_crop": True, "crop_size": {"height": 32, "width": 32}, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225]}))
    pre = vitkit.load_pretrained(folder).preprocess
    assert (pre.crop_pct, pre.crop_mode, pre.interpolation) == (32 / 36, "center", "bicubic")
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    assert main(["fewshot", "--model", str(folder), "--data", str(data), "--shots", "2"]) == 0
    assert main(["finetune", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "ft"),
                 "--no-progress", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
                 "train.batch_size=8", "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert ft.config.layer_scale == 1.0 and ft.config.num_classes == 3
    assert main(["predict", str(data / "c0" / "000.png"), "--model", str(tmp_path / "ft" / "model")]) == 0


def test_a_family_config_larger_than_its_weights_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    """A config.json announcing hidden_size 32768 over 32-wide weights would build ~10^10 parameters first."""
    folder = _saved(transformers.Dinov2Model(transformers.Dinov2Config(**SMALL)), tmp_path / "dino")
    doc = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**doc, "hidden_size": 32768, "num_attention_heads": 1}))
    with pytest.raises(ValueError, match="hidden_size is 32768 but the weights are 32 wide"):
        vitkit.load_pretrained(folder)
