"""Same file, same answer: predictions from image files match Hugging Face's and timm's own preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.inputs import TIMM_FIXTURE
from vitkit.cli import main
from vitkit.data.preprocess import load_image


def test_hf_folder_predictions_from_files_match_transformers(tmp_path: Path, photos: list[Path]) -> None:
    transformers = pytest.importorskip("transformers")
    from PIL import ImageOps


    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 patch_size=8, image_size=32, num_labels=6)
    torch.manual_seed(0)
    hf = transformers.ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        hf.classifier.weight.normal_(0, 1.0)  # logits that move with the input
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    proc = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=mean, image_std=std,
                                          resample=2)
    hf.save_pretrained(tmp_path / "hf")
    proc.save_pretrained(tmp_path / "hf")
    files = photos
    model = vitkit.load_pretrained(tmp_path / "hf")
    assert model.preprocess.mean == tuple(mean) and model.preprocess.std == tuple(std)
    assert main(["predict", *map(str, files), "--model", str(tmp_path / "hf"), "--topk", "6", "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    got = {Path(r["path"]).name: dict(zip(r["labels"], r["probs"]))
           for r in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())}
    for f in files:
        im = ImageOps.exif_transpose(Image.open(f)).convert("RGB")  # transformers' load_image
        ref_in = torch.from_numpy(proc(im, return_tensors="np")["pixel_values"])
        ours_in = model.preprocess.normalize(load_image(model.preprocess, f)[None])
        assert ours_in.shape == ref_in.shape
        d = (ours_in - ref_in).abs()  # resampling noise: HF rounds the resized image to uint8, vitkit does not
        assert d.mean() < 0.01 and d.max() < 0.1, (f.name, float(d.mean()), float(d.max()))
        with torch.no_grad():
            ref = hf(pixel_values=ref_in).logits.softmax(-1)[0]
        for i, p in enumerate(ref.tolist()):
            assert abs(got[f.name][cfg.id2label[i]] - p) < 0.01, (f.name, i, got[f.name][cfg.id2label[i]], p)


@pytest.mark.parametrize("processor", ["BitImageProcessor", "CLIPImageProcessor"])
def test_hf_shortest_edge_and_centre_crop_from_files_match_transformers(tmp_path: Path, processor: str,
                                                                       photos: list[Path]) -> None:
    """DINOv2's and CLIP's processors: the shorter side to `shortest_edge`, then a centre crop placed as transformers
    places it (margin // 2, where torchvision rounds). 24 / (24 / 59) is 58.99..., so a crop_pct of 24 / 59 alone
    would resize to 58; the margins are odd, so the two crop placements differ by a pixel."""
    transformers = pytest.importorskip("transformers")
    from PIL import ImageOps

    from vitkit.models.preprocess import exact_crop_pct

    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                 patch_size=8, image_size=24, num_labels=4)
    torch.manual_seed(0)
    hf = transformers.ViTForImageClassification(cfg).eval()
    proc = getattr(transformers, processor)(size={"shortest_edge": 59}, crop_size={"height": 24, "width": 24},
                                            do_center_crop=True, resample=3, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    hf.save_pretrained(tmp_path / "hf")
    proc.save_pretrained(tmp_path / "hf")
    model = vitkit.load_pretrained(tmp_path / "hf")
    pre = model.preprocess
    assert (pre.crop_mode, pre.crop_offset, pre.interpolation) == ("center", "floor", "bicubic")
    assert int(24 / pre.crop_pct) == 59 and pre.crop_pct == exact_crop_pct(24, 59) != 24 / 59
    for f in photos:
        im = ImageOps.exif_transpose(Image.open(f)).convert("RGB")
        ref_in = torch.from_numpy(proc(im, return_tensors="np")["pixel_values"])
        ours_in = pre.normalize(load_image(pre, f)[None])
        d = (ours_in - ref_in).abs()  # measured: mean <= 0.0024, max <= 0.017; torchvision's placement: 0.02-0.2
        assert d.mean() < 0.005 and d.max() < 0.05, (f.name, float(d.mean()), float(d.max()))
        with torch.no_grad():
            torch.testing.assert_close(model(ours_in).softmax(-1), hf(pixel_values=ref_in).logits.softmax(-1),
                                       atol=0.01, rtol=0)


def test_timm_hub_folder_predictions_from_files_match_timms_own_pipeline(tmp_path: Path) -> None:
    """The same files through `vitkit predict` and through timm's resolve_data_config + create_transform (bicubic,
    crop_pct 0.875, centre crop of the shorter side resized to 36 px): the same inputs within resampling noise
    (timm's torchvision resizes uint8 PIL images, vitkit floats) and the same probabilities within 0.01."""

    ref = json.loads((TIMM_FIXTURE / "reference.json").read_text())
    inputs = np.load(TIMM_FIXTURE / "inputs.npz", allow_pickle=False)
    model = vitkit.load_pretrained(TIMM_FIXTURE / "hub")
    pre = model.preprocess
    assert (pre.crop_pct, pre.crop_mode, pre.interpolation, pre.mean) == (0.875, "center", "bicubic",
                                                                          (0.485, 0.456, 0.406))
    files = sorted((TIMM_FIXTURE / "images").iterdir())
    assert len(files) == len(ref["probs"]) == 7
    for f in files:
        ours = pre.normalize(load_image(pre, f)[None])[0]
        theirs = torch.from_numpy(inputs[f.name])
        assert ours.shape == theirs.shape, f.name
        d = (ours - theirs).abs() * torch.tensor(pre.std).view(-1, 1, 1)  # on the [0, 1] pixel scale
        assert d.mean() < 0.01 and d.max() < 0.1, (f.name, float(d.mean()), float(d.max()))
    assert main(["predict", *map(str, files), "--model", str(TIMM_FIXTURE / "hub"), "--topk", "6", "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    for row in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines()):
        got = dict(zip(row["labels"], row["probs"]))
        want = ref["probs"][Path(row["path"]).name]
        assert max(abs(got[str(i)] - p) for i, p in enumerate(want)) < 0.01, (row["path"], got, want)
        assert row["labels"][0] == str(int(np.argmax(want)))


def test_a_non_square_photo_with_crop_pct_is_centre_cropped_not_squashed() -> None:
    from vitkit.models.preprocess import PreprocessConfig

    x = torch.rand(1, 3, 400, 600)
    pre = PreprocessConfig(img_size=(224, 224), crop_pct=0.9, interpolation="bilinear")
    # timm: the shorter side to floor(224 / 0.9) = 248 (so 248 x 372), then the centre 224 x 224
    want = torch.nn.functional.interpolate(x, size=(248, 372), mode="bilinear", antialias=True, align_corners=False)
    want = want.clamp(0, 1)[..., 12:236, 74:298]
    torch.testing.assert_close(pre.resize(x), want)
    squash = PreprocessConfig(img_size=(224, 224), crop_pct=0.9, crop_mode="squash")
    assert squash.resize(x).shape == (1, 3, 224, 224)
    with pytest.raises(ValueError, match="crop_mode must be one of center, squash"):
        PreprocessConfig(crop_pct=0.9, crop_mode="border")


def test_a_transformers_crop_placement_saved_to_timm_is_named(tmp_path: Path) -> None:
    """timm's pretrained_cfg cannot say "margin // 2": writing such a model to timm warns; vitkit's own format keeps it."""
    import dataclasses

    from tests.helpers import random_vit

    m = random_vit()
    m.preprocess = dataclasses.replace(m.preprocess, crop_pct=0.875, crop_mode="center", crop_offset="floor")
    with pytest.warns(UserWarning, match="timm rounds: an odd margin moves the crop by one pixel"):
        vitkit.save_pretrained(m, tmp_path / "timm", format="timm")
    vitkit.save_pretrained(m, tmp_path / "own")
    assert vitkit.load_pretrained(tmp_path / "own").preprocess.crop_offset == "floor"
    assert vitkit.load_pretrained(tmp_path / "timm").preprocess.crop_offset == "round"


def test_a_crop_saved_to_hf_is_transformers_own_crop(tmp_path: Path, photos: list[Path]) -> None:
    """A model with a centre crop (timm's crop_pct) saved as a transformers folder keeps its crop: a
    BitImageProcessor that resizes the shorter side and centre-crops, which transformers itself runs to the same
    inputs as vitkit (before, the crop was dropped: a plain resize, other pixels). The crop placement differs from
    torchvision's for odd margins; saving says so."""
    import dataclasses

    transformers = pytest.importorskip("transformers")
    from PIL import ImageOps

    from tests.helpers import random_vit
    from vitkit.models.preprocess import exact_crop_pct

    m = random_vit(in_chans=3, img_size=24)
    size = m.config.img_size[0]
    m.preprocess = dataclasses.replace(m.preprocess, crop_pct=exact_crop_pct(size, 59), crop_mode="center",
                                       interpolation="bicubic")
    with pytest.warns(UserWarning, match="transformers floors it"):
        vitkit.save_pretrained(m, tmp_path / "hf", format="hf")
    proc = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    back = vitkit.load_pretrained(tmp_path / "hf").preprocess
    assert back.crop_mode == "center" and int(size / back.crop_pct) == 59 and back.crop_offset == "floor"
    for f in photos:
        im = ImageOps.exif_transpose(Image.open(f)).convert("RGB")
        ref = torch.from_numpy(proc(im, return_tensors="np")["pixel_values"])
        d = (back.normalize(load_image(back, f)[None]) - ref).abs()
        assert d.mean() < 0.005 and d.max() < 0.05, (f.name, float(d.mean()), float(d.max()))
