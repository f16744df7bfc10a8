"""Checkpoint families written by timm (DeiT distilled, SigLIP-style towers) load with timm's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import vitkit
from tests.inputs import FAMILIES, noise_folder
from vitkit.cli import main
from vitkit.formats import save_pretrained

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read


def test_deit_distilled_checkpoints_written_by_timm_load_with_timms_outputs(tmp_path: Path, capsys) -> None:  # noqa: ANN001

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    for path, hints in ((FAMILIES / "deit_distilled_hub", {}), (FAMILIES / "deit_distilled.safetensors",
                                                                {"num_heads": 4})):
        m = vitkit.load_pretrained(path, **hints)
        assert m.config.distill_token and m.config.num_class_tokens == 2
        with torch.no_grad():  # eval mode: the two heads averaged, as timm does
            torch.testing.assert_close(m(x), torch.from_numpy(ref["deit_distilled_logits"]), rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(m.forward_features(x), torch.from_numpy(ref["deit_distilled_features"]),
                                       rtol=2e-5, atol=2e-5)
    # saved back where the format can hold it (timm: deit_*_distilled; vitkit; transformers' DeiT: its own test in
    # test_hf_families.py), refused by name where not (the original .npz layout)
    back = save_pretrained(m, tmp_path / "back_timm", format="timm")
    assert json.loads((back / "config.json").read_text())["architecture"].startswith("deit_")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["deit_distilled_logits"]),
                                   rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="distill_token=True"):
        save_pretrained(m, tmp_path / "back_npz", format="npz")
    # the CLI paths: predict, finetune, eval on the fine-tuned model
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "deit_distilled_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--img-size", "48", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    tuned = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert tuned.config.distill_token and tuned.config.num_classes == 3
    assert main(["eval", "--model", str(tmp_path / "ft" / "model"), "--data", str(data)]) == 0


def test_siglip_style_towers_written_by_timm_load_with_timms_outputs(tmp_path: Path) -> None:

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    m = vitkit.load_pretrained(FAMILIES / "siglip_hub")
    assert m.config.pooling == "map" and m.config.num_class_tokens == 0
    with torch.no_grad():
        z = m.forward_features(x)
        for got, key in ((m(x), "siglip_logits"), (z, "siglip_features"),
                         (m.forward_head(z, pre_logits=True), "siglip_pooled")):
            torch.testing.assert_close(got, torch.from_numpy(ref[key]), rtol=2e-5, atol=2e-5, msg=key)
    back = save_pretrained(m, tmp_path / "back", format="timm")  # timm's attn_pool names again
    doc = json.loads((back / "config.json").read_text())
    assert doc["model_args"]["global_pool"] == "map" and doc["model_args"]["class_token"] is False
    assert "attn_pool.latent" in load_file(back / "model.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["siglip_logits"]),
                                   rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="SiglipVisionModel .*num_classes=5"):  # HF holds the headless tower
        save_pretrained(m, tmp_path / "hf", format="hf")
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "siglip_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["fewshot", "--model", hub, "--data", str(data), "--shots", "2"]) == 0  # features of the MAP head
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--img-size", "48", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    assert vitkit.load_pretrained(tmp_path / "ft" / "model").config.pooling == "map"


# (name, loading hints for the hub folder, for the bare file (None: no bare file), what the config must say, what
# the formats without a place for it name when they refuse it)
MORE = [
    ("mae_avg", {}, {"num_heads": 4}, dict(pooling="gap", class_token=True, fc_norm=True), "fc_norm=True"),
    ("avg_nofc", {}, None, dict(pooling="gap", class_token=True, fc_norm=False), "class_token=True"),
    ("deit3", {}, {"num_heads": 4}, dict(pooling="token", layer_scale=1e-6), "layer_scale"),
    ("dinov2_reg", {}, None, dict(pooling="token", num_registers=4, layer_scale=1e-5), "num_registers"),
    ("clip", {}, {"num_heads": 4, "gelu": "quick"}, dict(pre_norm=True, patch_bias=False, gelu="quick", ln_eps=1e-5),
     "pre_norm"),
    ("reg_gap", {}, None, dict(pooling="gap", class_token=False, num_registers=4), "num_registers"),
]


@pytest.mark.parametrize("name,hub_hints,bare_hints,expect,refused", MORE, ids=[m[0] for m in MORE])
def test_more_timm_families_load_with_timms_outputs_and_save_back(name: str, hub_hints: dict, bare_hints: dict | None,
                                                                  expect: dict, refused: str, tmp_path: Path) -> None:
    """MAE-style average pooling beside a class token (with and without fc_norm), DeiT III's and DINOv2's
    LayerScale (DINOv2 with registers, no_embed_class), OpenAI CLIP's tower (pre-norm, no patch bias, QuickGELU,
    eps 1e-5): timm's logits, features and pooled output, from the hub folder and the bare file."""
    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    paths = [(FAMILIES / f"{name}_hub", hub_hints)]
    if bare_hints is not None:
        paths.append((FAMILIES / f"{name}.safetensors", bare_hints))
    for path, hints in paths:
        m = vitkit.load_pretrained(path, **hints)
        for key, want in expect.items():
            if key != "layer_scale" or path.is_dir():  # a bare file does not say LayerScale's init (assumed)
                assert getattr(m.config, key) == want, (path, key)
        with torch.no_grad():
            z = m.forward_features(x)
            for got, what in ((m(x), "logits"), (z, "features"), (m.forward_head(z, pre_logits=True), "pooled")):
                torch.testing.assert_close(got, torch.from_numpy(ref[f"{name}_{what}"]), rtol=3e-5, atol=3e-5,
                                           msg=f"{path.name} {what}")
    back = save_pretrained(m, tmp_path / "back", format="timm")  # DINOv2's registers: no_embed_class again
    args = json.loads((back / "config.json").read_text())["model_args"]
    assert (args["class_token"], args["fc_norm"], args["pre_norm"]) == (m.config.class_token, m.config.fc_norm,
                                                                         m.config.pre_norm)
    assert args["no_embed_class"] == (name in ("dinov2_reg", "reg_gap"))
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref[f"{name}_logits"]),
                                   rtol=3e-5, atol=3e-5)
    if name == "dinov2_reg":  # timm's own layout, so the bare file (no vitkit config beside it) reads back too
        bare = save_pretrained(m, tmp_path / "bare.safetensors", format="timm")
        with torch.no_grad():
            torch.testing.assert_close(vitkit.load_pretrained(bare, num_heads=4)(x),
                                       torch.from_numpy(ref[f"{name}_logits"]), rtol=3e-5, atol=3e-5)
        # a class-token E_pos beside registers (transformers' Dinov2WithRegisters): timm's table without
        # no_embed_class, zero rows for the registers; read back exactly, and learned register rows are refused
        shifted = vitkit.load_pretrained(back)
        with torch.no_grad():
            shifted.pos_embed[:, 0] += 1.0
        out = save_pretrained(shifted, tmp_path / "shifted", format="timm")
        assert json.loads((out / "config.json").read_text())["model_args"]["no_embed_class"] is False
        written = load_file(out / "model.safetensors")
        assert written["pos_embed"].shape[1] == 1 + 4 + 16 and not written["pos_embed"][:, 1:5].any()
        bare = tmp_path / "shifted.safetensors"
        save_file(written, str(bare))  # timm's own layout, no vitkit config beside it
        with torch.no_grad():
            torch.testing.assert_close(vitkit.load_pretrained(bare, num_heads=4, layer_scale=1e-5)(x), shifted(x),
                                       rtol=1e-6, atol=1e-6)
        written["pos_embed"][:, 2] = 0.5
        save_file(written, str(bare))
        with pytest.raises(ValueError, match=r"register tokens with learned position embeddings .* rows 1..4"):
            vitkit.load_pretrained(bare, num_heads=4)
    for fmt in ("hf", "npz"):  # formats with no place for these parts refuse by name
        # (HF holds LayerScale ViTs as Dinov2Model, headless, and CLIP towers with a bias-free projection: a
        # classifier is what it refuses there; test_hf_families.py writes the headless towers)
        match = refused
        if fmt == "hf" and ("layer_scale" in expect or name == "clip"):
            match = "Dinov2(WithRegisters)?Model.*num_classes" if name != "clip" else "CLIPVisionModel.*a head with a bias"
        with pytest.raises(ValueError, match=match):
            save_pretrained(m, tmp_path / f"x.{fmt}" if fmt == "npz" else tmp_path / fmt, format=fmt)


def test_a_family_vitkit_does_not_build_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"eva02\.safetensors.*'blocks\.0\.attn\.q_bias' \(EVA's attention"):
        vitkit.load_pretrained(FAMILIES / "eva02.safetensors", num_heads=4)


def test_a_bare_timm_file_with_a_class_token_says_its_pooling_is_assumed(caplog) -> None:  # noqa: ANN001
    """A bare file with a class token and no fc_norm cannot tell token from average pooling: timm's default
    ('token') is assumed and logged; pooling='gap' gives the output of the model trained with global_pool='avg'."""
    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "avg_nofc.safetensors"
        save_file(load_file(FAMILIES / "avg_nofc_hub" / "model.safetensors"), str(f))
        assumed = vitkit.load_pretrained(f, num_heads=4)
        assert assumed.config.pooling == "token" and "timm's default 'token'" in assumed.config.extra["assumed"]["pooling"]
        told = vitkit.load_pretrained(f, num_heads=4, pooling="gap")
        with torch.no_grad():
            torch.testing.assert_close(told(x), torch.from_numpy(ref["avg_nofc_logits"]), rtol=3e-5, atol=3e-5)
            assert not torch.allclose(assumed(x), told(x))
    with pytest.raises(ValueError, match="the file says pooling='gap', but pooling='token' was given"):
        vitkit.load_pretrained(FAMILIES / "avg_nofc_hub", pooling="token")


@pytest.mark.parametrize("name", ["mae_avg", "dinov2_reg", "clip"])
def test_the_new_families_run_through_predict_and_finetune(name: str, tmp_path: Path) -> None:
    data = noise_folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / f"{name}_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--img-size", "48", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    src, ft = vitkit.load_pretrained(hub).config, vitkit.load_pretrained(tmp_path / "ft" / "model").config
    keep = ("pooling", "class_token", "fc_norm", "layer_scale", "pre_norm", "patch_bias", "gelu", "ln_eps",
            "num_registers")
    assert {k: getattr(ft, k) for k in keep} == {k: getattr(src, k) for k in keep} and ft.num_classes == 3
    assert main(["eval", "--model", str(tmp_path / "ft" / "model"), "--data", str(data)]) == 0
    # two images: each of the 8 in c0 was a row of 3 + heads panels in the attention-map figure (its layout and PNG);
    # 4 principal components of E drawn, not 28 panels (the same figure code, a second less per family)
    assert main(["inspect", "--model", hub, "--images", *map(str, sorted((data / "c0").iterdir())[:2]), "--out",
                 str(tmp_path / "insp"), "--no-progress", "--components", "4"]) == 0
    pytest.importorskip("onnxruntime")
    assert main(["export", hub, "--out", str(tmp_path / "m.onnx")]) == 0  # parity with PyTorch checked inside


def test_openai_and_openclip_clip_state_dicts_load_their_image_tower(tmp_path: Path) -> None:
    """A CLIP written by OpenCLIP (`visual.*` names, the text tower beside): the image tower loads with OpenCLIP's
    image embeddings and tokens (tests/reference/make_openclip_reference.py); the GELU, which the file does not
    record, must be given. Saved for transformers it is a CLIPVisionModelWithProjection with OpenCLIP's
    embeddings."""
    folder = FAMILIES.parent / "openclip"
    ref = np.load(folder / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    with pytest.raises(ValueError, match="does not record its GELU: OpenAI's CLIP uses QuickGELU"):
        vitkit.load_pretrained(folder / "clip_quickgelu.pt")
    m = vitkit.load_pretrained(folder / "clip_quickgelu.pt", gelu="quick")
    c = m.config
    assert (c.pre_norm, c.patch_bias, c.ln_eps, c.num_heads, c.num_classes) == (True, False, 1e-5, 2, 12)
    assert "num_heads" in c.extra["assumed"]  # CLIP's 64-wide heads: assumed, and said
    with torch.no_grad():
        torch.testing.assert_close(m(x), torch.from_numpy(ref["image_embeds"]), rtol=3e-5, atol=3e-5)
        torch.testing.assert_close(m.forward_features(x)[:, 1:], torch.from_numpy(ref["tokens"]), rtol=3e-5,
                                   atol=3e-5)
    transformers = pytest.importorskip("transformers")
    hf = save_pretrained(m, tmp_path / "hf", format="hf")
    theirs = transformers.CLIPVisionModelWithProjection.from_pretrained(hf).eval()
    with torch.no_grad():
        torch.testing.assert_close(theirs(pixel_values=x).image_embeds, torch.from_numpy(ref["image_embeds"]),
                                   rtol=3e-5, atol=3e-5)


@pytest.mark.parametrize("name", ["mae_avg", "deit3", "dinov2_reg"])
def test_timm_files_resample_their_position_embeddings_as_timm_at_other_sizes(name: str) -> None:
    """At another input size timm resamples E_pos antialiased (resample_abs_pos_embed): a timm file read by vitkit
    says so (posemb_resample) and gives timm's own dynamic_img_size tokens at 48 and 24 px -- with a class-token
    row, with E_pos on the patches only (DeiT III), and beside registers (DINOv2). The plain bicubic would not."""
    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    m = vitkit.load_pretrained(FAMILIES / f"{name}_hub")
    assert m.config.posemb_resample == "bicubic_antialias"
    m.config.dynamic_img_size = True
    plain = vitkit.VisionTransformer(m.config.replace(posemb_resample="bicubic")).eval()
    plain.load_state_dict(m.state_dict())
    for side in (48, 24):
        y, want = torch.from_numpy(ref[f"x_{side}"]), torch.from_numpy(ref[f"{name}_features_{side}"])
        with torch.no_grad():
            torch.testing.assert_close(m.forward_features(y), want, rtol=3e-5, atol=3e-5)
            assert (plain.forward_features(y) - want).abs().max() > 1e-3


def test_a_timm_dinov2_keeps_its_own_table_beside_a_smaller_input_size_and_converts_it_back(tmp_path: Path) -> None:
    """timm's DINOv2 hub folder whose pretrained_cfg runs it at 24 px beside its 4x4 (32 px) table, as timm's
    vit_*_dinov2 run at 224 beside 518: vitkit keeps the table and resamples from it once per size (timm's
    antialiased resample_abs_pos_embed), so at 24, 32 and 48 px it gives timm's tokens, also after set_img_size one
    size after the other; convert to timm, hf and vitkit writes the 4x4 table back (image size 32) and reloads so."""
    import shutil

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    src = shutil.copytree(FAMILIES / "dinov2_reg_hub", tmp_path / "hub")
    doc = json.loads((src / "config.json").read_text())
    doc["pretrained_cfg"]["input_size"] = [3, 24, 24]
    (src / "config.json").write_text(json.dumps(doc))
    xs = {32: ref["x"], 48: ref["x_48"], 24: ref["x_24"]}
    want = {32: ref["dinov2_reg_features"], 48: ref["dinov2_reg_features_48"], 24: ref["dinov2_reg_features_24"]}

    def same_at_every_size(path: Path) -> None:
        m = vitkit.load_pretrained(path)
        assert (m.config.img_size, m.config.posemb_grid, m.preprocess.img_size) == ((24, 24), (4, 4), (24, 24))
        with torch.no_grad():
            for side in (32, 48, 24):
                m.set_img_size(side)
                torch.testing.assert_close(m.forward_features(torch.from_numpy(xs[side])),
                                           torch.from_numpy(want[side]), rtol=3e-5, atol=3e-5)

    same_at_every_size(src)
    prev = src
    for fmt in ("timm", "vitkit", "timm"):
        out = tmp_path / f"{fmt}_from_{prev.name}"
        assert main(["convert", str(prev), str(out), "--to", fmt]) == 0
        same_at_every_size(out)
        prev = out
    assert json.loads((prev / "config.json").read_text())["model_args"]["img_size"] == [32, 32]
    # transformers' Dinov2WithRegistersModel holds no head: the backbone, written as hf and read back
    save_pretrained(vitkit.load_pretrained(prev, num_classes=0), tmp_path / "hf", format="hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["image_size"] == 32
    same_at_every_size(tmp_path / "hf")
