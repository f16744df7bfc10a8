"""Hugging Face folders of the ViT families (DeiT, DINOv2, CLIP, SigLIP, ViTMAE) written by transformers itself load
with transformers' outputs: random small models built and saved by transformers here (it runs offline), read by
vitkit, compared on the same input."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.inputs import noise_folder
from vitkit.cli import main

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

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
    m.config.dynamic_img_size = True  # other sizes: E_pos resampled as transformers' Dinov2Model does (bicubic)
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


def test_dinov2_with_registers_reads_and_resamples_as_transformers(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    """Dinov2WithRegistersModel: registers after the class token, and E_pos resampled to other sizes by an
    antialiased bicubic (Dinov2Model's is plain): vitkit's tokens equal transformers' at every size."""
    cfg = transformers.Dinov2WithRegistersConfig(**{k: v for k, v in SMALL.items() if k != "intermediate_size"},
                                                 num_register_tokens=2, layerscale_value=1e-5)
    hf = transformers.Dinov2WithRegistersModel(cfg)
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "dreg"))
    assert (m.config.num_registers, m.config.posemb_resample, m.config.layer_scale) == (2, "bicubic_antialias", 1e-5)
    m.config.dynamic_img_size = True
    for side in (32, 48, 24):
        y = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(side))
        with torch.no_grad():
            ref = hf(pixel_values=y)
            torch.testing.assert_close(m.forward_features(y), ref.last_hidden_state, **TOL)
            torch.testing.assert_close(m.forward_head(m.forward_features(y), pre_logits=True), ref.pooler_output,
                                       **TOL)
    plain = dataclasses.replace(m.config, posemb_resample="bicubic")  # the plain resampling is measurably another
    other = vitkit.VisionTransformer(plain).eval()
    other.load_state_dict(m.state_dict())
    y = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(24))
    with torch.no_grad():
        assert (other.forward_features(y) - hf(pixel_values=y).last_hidden_state).abs().max() > 1e-3
    plain_vit = vitkit.VisionTransformer(vitkit.ViTConfig(img_size=32, patch_size=8, width=32, depth=1, num_heads=4,
                                                          mlp_dim=64, num_classes=0, posemb_resample="bicubic_antialias"))
    with caplog.at_level("WARNING", logger="vitkit"):
        vitkit.save_pretrained(plain_vit, tmp_path / "x", format="hf")
    assert "ViTModel resamples the position embeddings to other input sizes by 'bicubic'" in caplog.text


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


@pytest.mark.parametrize("registers", [0, 2])
def test_hf_families_run_through_the_commands_and_their_preprocessing_is_read(tmp_path: Path, registers: int) -> None:
    hf = (transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(
        **{k: v for k, v in SMALL.items() if k != "intermediate_size"}, num_register_tokens=registers))
          if registers else transformers.Dinov2Model(transformers.Dinov2Config(**SMALL)))
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
                 "--no-progress", "--img-size", "48", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
                 "train.batch_size=8", "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert ft.config.layer_scale == 1.0 and ft.config.num_classes == 3 and ft.config.num_registers == registers
    assert main(["predict", str(data / "c0" / "000.png"), "--model", str(tmp_path / "ft" / "model")]) == 0


def test_a_family_config_larger_than_its_weights_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    """A config.json announcing hidden_size 32768 over 32-wide weights would build ~10^10 parameters first."""
    folder = _saved(transformers.Dinov2Model(transformers.Dinov2Config(**SMALL)), tmp_path / "dino")
    doc = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**doc, "hidden_size": 32768, "num_attention_heads": 1}))
    with pytest.raises(ValueError, match="hidden_size is 32768 but the weights are 32 wide"):
        vitkit.load_pretrained(folder)
    for key, bad in (("hidden_size", "32"), ("num_attention_heads", 4.5), ("mlp_ratio", -4)):
        (folder / "config.json").write_text(json.dumps({**doc, key: bad}))
        with pytest.raises(ValueError, match=rf"config.json {key} is {bad!r}, expected a (whole|positive) number"):
            vitkit.load_pretrained(folder)


# ----------------------------------------------------------------------------- writing the families
def _from_pretrained(cls: type, folder: Path) -> torch.nn.Module:
    """transformers' own load of a folder vitkit wrote: every tensor present, none left over."""
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


@pytest.mark.parametrize("family", ["deit", "dinov2_reg", "clip", "siglip"])
def test_the_families_save_as_their_transformers_class_with_their_outputs(tmp_path: Path, family: str) -> None:
    """A folder transformers wrote (a random small model) reads into vitkit, `convert --to hf` writes it back as the
    same transformers class, and transformers loads that with every tensor and the original's outputs; vitkit reads
    its own folder back to the same config."""
    cls, cfg = {
        "deit": (transformers.DeiTForImageClassificationWithTeacher, transformers.DeiTConfig(**SMALL, num_labels=5)),
        "dinov2_reg": (transformers.Dinov2WithRegistersModel, transformers.Dinov2WithRegistersConfig(
            **{k: v for k, v in SMALL.items() if k != "intermediate_size"}, num_register_tokens=3,
            layerscale_value=1e-5, hidden_act="gelu_pytorch_tanh")),
        "clip": (transformers.CLIPVisionModelWithProjection, transformers.CLIPVisionConfig(**SMALL, projection_dim=12)),
        "siglip": (transformers.SiglipVisionModel, transformers.SiglipVisionConfig(**SMALL)),
    }[family]
    hf = cls(cfg)
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "theirs"))
    assert main(["convert", str(tmp_path / "theirs"), str(tmp_path / "back"), "--to", "hf"]) == 0
    doc = json.loads((tmp_path / "back" / "config.json").read_text())
    assert doc["architectures"] == [cls.__name__]
    again = _from_pretrained(cls, tmp_path / "back")
    x = _x()
    with torch.no_grad():
        ref, out = hf(pixel_values=x), again(pixel_values=x)
        for field in ("logits", "last_hidden_state", "pooler_output", "image_embeds"):
            if field in ref:
                torch.testing.assert_close(out[field], ref[field], **TOL)
    back = vitkit.load_pretrained(tmp_path / "back").config  # extra differs: the written folder has a processor
    assert dataclasses.replace(back, extra={}) == dataclasses.replace(m.config, extra={})


def test_a_headless_deit_saves_as_deitmodel(tmp_path: Path) -> None:
    """DeiTModel (no classes) back out, its pooler (Dense + tanh on the class token, read as vitkit's
    representation layer) with it: every tensor written, the tokens and pooler_output the original's."""
    hf = transformers.DeiTModel(transformers.DeiTConfig(**SMALL))
    vitkit.save_pretrained(vitkit.load_pretrained(_saved(hf, tmp_path / "deit")), tmp_path / "back", format="hf")
    again, info = transformers.DeiTModel.from_pretrained(tmp_path / "back", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    x = _x()
    with torch.no_grad():
        got, want = again.eval()(pixel_values=x), hf.eval()(pixel_values=x)
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, **TOL)
        torch.testing.assert_close(got.pooler_output, want.pooler_output, **TOL)


@pytest.mark.parametrize("name", ["deit_distilled", "dinov2_reg", "clip", "siglip"])
def test_timm_families_save_for_transformers_with_timms_outputs(tmp_path: Path, name: str) -> None:
    """timm's own files (DeiT distilled, DINOv2 with registers, a CLIP and a SigLIP tower) written for transformers
    give timm's outputs there: the logits of DeiT's two heads, else the tokens and the pooled features of the
    headless tower (a CLIP, SigLIP or DINOv2 classifier has no transformers class and is refused by name)."""
    import numpy as np

    from tests.inputs import FAMILIES

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    cls = {"deit_distilled": transformers.DeiTForImageClassificationWithTeacher,
           "dinov2_reg": transformers.Dinov2WithRegistersModel, "clip": transformers.CLIPVisionModel,
           "siglip": transformers.SiglipVisionModel}[name]
    if name != "deit_distilled":
        why = {"clip": "a head with a bias", "siglip": "num_classes=5", "dinov2_reg": "num_classes=5"}[name]
        with pytest.raises(ValueError, match=rf"cannot save as a Hugging Face {cls.__name__}\w* .*{why}"):
            vitkit.save_pretrained(vitkit.load_pretrained(FAMILIES / f"{name}_hub"), tmp_path / "x", format="hf")
    m = vitkit.load_pretrained(FAMILIES / f"{name}_hub", **({} if name == "deit_distilled" else {"num_classes": 0}))
    vitkit.save_pretrained(m, tmp_path / "hf", format="hf")
    theirs = _from_pretrained(cls, tmp_path / "hf")
    with torch.no_grad():
        out = theirs(pixel_values=x)
        if name == "deit_distilled":
            torch.testing.assert_close(out.logits, torch.from_numpy(ref[f"{name}_logits"]), **TOL)
            torch.testing.assert_close(out.last_hidden_state if "last_hidden_state" in out else
                                       theirs.deit(pixel_values=x).last_hidden_state,
                                       torch.from_numpy(ref[f"{name}_features"]), **TOL)
            return
        torch.testing.assert_close(out.pooler_output, torch.from_numpy(ref[f"{name}_pooled"]), **TOL)
        tokens = out.last_hidden_state
        if name == "clip":  # transformers' last_hidden_state is before post_layernorm; timm's tokens after it
            tokens = getattr(theirs, "vision_model", theirs).post_layernorm(tokens)  # transformers 4 | 5
        torch.testing.assert_close(tokens, torch.from_numpy(ref[f"{name}_features"]), **TOL)


def test_an_mae_encoder_saves_as_vitmodel_and_gap_models_are_refused_by_name(tmp_path: Path) -> None:
    """An MAE encoder is a plain ViT: written as ViTModel, whose last_hidden_state is ViTMAEModel's without its
    patch shuffle. A GAP + fc_norm classifier (timm's MAE fine-tunes) has no transformers ViT class: refused."""
    from tests.inputs import FAMILIES

    hf = transformers.ViTMAEForPreTraining(transformers.ViTMAEConfig(**SMALL, mask_ratio=0.0))
    vitkit.save_pretrained(vitkit.load_pretrained(_saved(hf, tmp_path / "mae")), tmp_path / "vit", format="hf")
    vit = transformers.ViTModel.from_pretrained(tmp_path / "vit", add_pooling_layer=False).eval()
    x = _x()
    noise = torch.arange(16, dtype=torch.float32).expand(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(vit(pixel_values=x).last_hidden_state,
                                   hf.vit(pixel_values=x, noise=noise).last_hidden_state, **TOL)
    with pytest.raises(ValueError, match=r"cannot save as a Hugging Face ViT: GAP pooling.*fc_norm=True"):
        vitkit.save_pretrained(vitkit.load_pretrained(FAMILIES / "mae_avg_hub"), tmp_path / "x", format="hf")


@pytest.mark.parametrize("family", ["vit", "deit", "clip", "siglip"])
def test_hf_models_at_other_sizes_give_transformers_interpolated_outputs(tmp_path: Path, family: str) -> None:
    """transformers resamples E_pos for another input size (interpolate_pos_encoding=True) by a plain bicubic;
    vitkit's model read from its folder (posemb_resample "bicubic") gives the same tokens at 48, 24 and 48x24 px."""
    cls, cfg = {
        "vit": (transformers.ViTModel, transformers.ViTConfig(**SMALL)),
        "deit": (transformers.DeiTModel, transformers.DeiTConfig(**SMALL)),
        "clip": (transformers.CLIPVisionModel, transformers.CLIPVisionConfig(**SMALL)),
        "siglip": (transformers.SiglipVisionModel, transformers.SiglipVisionConfig(**SMALL)),
    }[family]
    hf = cls(cfg)
    m = vitkit.load_pretrained(_saved(hf, tmp_path / family))
    assert m.config.posemb_resample == "bicubic"
    m.config.dynamic_img_size = True
    for h, w in ((48, 48), (24, 24), (48, 24)):
        y = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(h + w))
        with torch.no_grad():
            ref = hf(pixel_values=y, interpolate_pos_encoding=True)
            out = m.intermediates(y)
            tokens = out["blocks"][-1] if family == "clip" else out["encoded"]  # CLIP: before post_layernorm
            torch.testing.assert_close(tokens, ref.last_hidden_state, **TOL)


def test_a_transformers_model_vitkit_does_not_build_is_refused_by_its_model_type(tmp_path: Path) -> None:
    """SigLIP 2's NaFlex tower and BEiT (relative position biases) are not ViT families vitkit builds: the folder
    is refused naming its model_type and what is read, not as an unknown format."""
    sig2 = transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(
        **{k: v for k, v in SMALL.items() if k != "image_size"}, num_patches=16))
    beit = transformers.BeitModel(transformers.BeitConfig(**SMALL, use_relative_position_bias=True))
    for name, model in (("siglip2_vision_model", sig2), ("beit", beit)):
        folder = _saved(model, tmp_path / name)
        with pytest.raises(ValueError, match=rf"a transformers '{name}' model, which vitkit does not build; it reads "
                                             r"the ViT families vit, vit_msn, deit, dinov2"):
            vitkit.load_pretrained(folder)
        assert main(["inspect", "--model", str(folder), "--out", str(tmp_path / "i")]) == 2


def test_vit_msn_folders_are_plain_vits_with_transformers_logits(tmp_path: Path) -> None:
    """ViTMSN (Assran et al. 2022) is a plain ViT in transformers: its folders load by the ViT path, the classifier
    on the normed class token (transformers 5 writes its blocks outside the `vit.` prefix: read too)."""
    hf = transformers.ViTMSNForImageClassification(transformers.ViTMSNConfig(**SMALL, num_labels=4))
    m = vitkit.load_pretrained(_saved(hf, tmp_path / "msn"))
    assert m.config.num_classes == 4 and m.config.pooling == "token"
    x = _x()
    with torch.no_grad():
        torch.testing.assert_close(m(x), hf(pixel_values=x).logits, **TOL)
    encoder = transformers.ViTMSNModel(transformers.ViTMSNConfig(**SMALL))
    e = vitkit.load_pretrained(_saved(encoder, tmp_path / "msn_encoder"))
    with torch.no_grad():
        torch.testing.assert_close(e.forward_features(x), encoder(pixel_values=x).last_hidden_state, **TOL)


@pytest.mark.parametrize("registers", [0, 2])
def test_dinov2_keeps_its_own_position_table_at_every_size_and_through_every_convert(tmp_path: Path,
                                                                                   registers: int) -> None:
    """A DINOv2 folder's table (7x7: image_size 98, patch 14, as the hub's 37x37 at 518) beside its processor's
    smaller crop (42 px, as the hub's 224): vitkit keeps the table as it came and resamples from it once for each
    size, so at the crop, at the table's own size and between (set_img_size one after the other, img_size=, a
    dynamic size) it gives transformers' tokens; convert to vitkit, timm and hf and back writes the 7x7 table and
    image_size 98, and each reloads with the same tokens (transformers' own reload too)."""
    kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=98, patch_size=14,
              layerscale_value=1e-5)
    hf = (transformers.Dinov2WithRegistersModel(transformers.Dinov2WithRegistersConfig(**kw, num_register_tokens=2))
          if registers else transformers.Dinov2Model(transformers.Dinov2Config(**kw, intermediate_size=64)))
    folder = _saved(hf, tmp_path / "dino")
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": 48}, "resample": 3,
        "do_center_crop": True, "crop_size": {"height": 42, "width": 42}, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225]}))
    sides = (98, 70, 42)
    xs = {s: torch.randn(2, 3, s, s, generator=torch.Generator().manual_seed(s)) for s in sides}
    with torch.no_grad():
        want = {s: hf(pixel_values=xs[s]).last_hidden_state for s in sides}

    def same_at_every_size(src: Path) -> None:
        m = vitkit.load_pretrained(src)
        assert (m.config.img_size, m.config.posemb_grid, m.preprocess.img_size) == ((42, 42), (7, 7), (42, 42))
        assert m.pos_embed.shape[1] == 1 + 49  # the table as it came
        dyn = vitkit.load_pretrained(src)
        dyn.config.dynamic_img_size = True
        with torch.no_grad():
            for s in sides:  # set_img_size 98, then 70, then 42: each from the kept table, never from the last one
                m.set_img_size(s)
                for got in (m.forward_features(xs[s]), dyn.forward_features(xs[s]),
                            vitkit.load_pretrained(src, img_size=s).forward_features(xs[s])):
                    torch.testing.assert_close(got, want[s], **TOL)
        assert m.pos_embed.shape[1] == 1 + 49

    same_at_every_size(folder)
    if importlib.util.find_spec("onnxruntime") is not None:  # an export's fixed graph: the table resampled once
        from vitkit.inference.export import export_onnx, onnx_logits, ort_session

        m = vitkit.load_pretrained(folder)
        for s in (None, 98):  # the processor's 42 px, and the table's own 98 px (export's img_size=)
            path = export_onnx(m, tmp_path / f"dino{s}.onnx", img_size=s)
            with torch.no_grad():
                torch.testing.assert_close(onnx_logits(ort_session(path), xs[s or 42]), want[s or 42][:, 0], **TOL)
        assert (m.config.img_size, m.config.posemb_grid) == ((42, 42), (7, 7))  # the caller's model unchanged
    prev = folder
    for fmt in ("vitkit", "timm", "hf", "vitkit"):
        out = tmp_path / f"{fmt}_from_{prev.name}"
        assert main(["convert", str(prev), str(out), "--to", fmt]) == 0
        same_at_every_size(out)
        prev = out
        if fmt == "hf":  # what transformers reads back: the 98 px table, not one resampled to the crop
            assert json.loads((out / "config.json").read_text())["image_size"] == 98
            again = type(hf).from_pretrained(out).eval()
            with torch.no_grad():
                for s in sides:
                    torch.testing.assert_close(again(pixel_values=xs[s]).last_hidden_state, want[s], **TOL)
