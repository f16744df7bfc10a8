"""Writes tests/fixtures/timm_preprocess/: a timm hub folder written by timm itself, image files, and what timm's
own pipeline predicts for each file. vitkit's test (tests/test_hostile_round2.py) checks that `vitkit predict` on the
same files gives the same inputs and probabilities.

timm's transforms need torchvision, which does not load beside the CPU torch vitkit installs, so run this in a side
environment (the CUDA torch build runs on the CPU here):

    python3 -m venv /tmp/side && /tmp/side/bin/pip install torchvision timm safetensors pillow numpy
    /tmp/side/bin/python tests/reference/make_timm_preprocess_reference.py

The reference pipeline is timm's documented one: `resolve_data_config({}, model=model)` + `create_transform(**cfg)`
on `Image.open(f).convert("RGB")`, after PIL's `exif_transpose` (timm's own dataset loader leaves EXIF orientation
alone; vitkit, like Hugging Face's `load_image`, applies it, so the reference turns the file upright first).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import timm
import torch
from PIL import Image, ImageOps
from timm.data import resolve_data_config
from timm.data.transforms_factory import create_transform

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "timm_preprocess"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """A deterministic image with smooth shading, edges and texture (what resampling differences show on)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(6 * x + 1) * 0.5 + 0.5, np.cos(5 * y) * 0.5 + 0.5, (x + y) / 2], -1)
    base[(x - 0.5) ** 2 + (y - 0.4) ** 2 < 0.05] = (0.9, 0.2, 0.1)  # a disc: hard edges
    base[int(h * 0.7) : int(h * 0.8), :] = (0.1, 0.1, 0.6)  # a band
    base += rng.normal(0, 0.04, base.shape)
    return (np.clip(base, 0, 1) * 255).astype(np.uint8)


def write_images(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    Image.fromarray(photo(400, 600, 0)).save(folder / "wide.jpg", quality=90)  # non-square
    files.append(folder / "wide.jpg")
    Image.fromarray(photo(450, 350, 1)).save(folder / "tall.png")
    files.append(folder / "tall.png")
    Image.fromarray(photo(1600, 1200, 2)).save(folder / "large.jpg", quality=85)  # far larger than the model
    files.append(folder / "large.jpg")
    Image.fromarray(photo(13, 20, 3)).save(folder / "small.png")  # smaller than the model
    files.append(folder / "small.png")
    Image.fromarray(photo(150, 226, 4)).convert("L").save(folder / "grey.png")
    files.append(folder / "grey.png")
    rgba = Image.fromarray(photo(150, 226, 5)).convert("RGBA")
    alpha = np.full((150, 226), 255, np.uint8)
    alpha[:, :113] = 0  # half transparent: dropped, as timm's loader does
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(folder / "rgba.png")
    files.append(folder / "rgba.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways, shown upright
    Image.fromarray(photo(300, 450, 6)).save(folder / "rotated.jpg", exif=exif.tobytes(), quality=90)
    files.append(folder / "rotated.jpg")
    return files


def api_reference(model: torch.nn.Module) -> None:
    """timm's own answers to the methods a timm user calls, on one fixed input: api.npz (tensors), api.json."""
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out: dict[str, np.ndarray] = {"x": x.numpy()}
    with torch.no_grad():
        feats = model.forward_features(x)
        out["forward_features"] = feats.numpy()
        out["forward_head_pre_logits"] = model.forward_head(feats, pre_logits=True).numpy()
        out["logits"] = model(x).numpy()
        for name, kw in {"all_nchw": {}, "last1_nlc_norm": dict(indices=1, output_fmt="NLC", norm=True),
                         "first_nchw": dict(indices=[0])}.items():
            inter = model.forward_intermediates(x, intermediates_only=True, **kw)
            for i, t in enumerate(inter):
                out[f"inter_{name}_{i}"] = t.numpy()
        final, inter = model.forward_intermediates(x, indices=[-1], return_prefix_tokens=True)
        out["inter_final"] = final.numpy()
        out["inter_prefix_spatial"], out["inter_prefix_tokens"] = inter[0][0].numpy(), inter[0][1].numpy()
    doc = {"num_features": model.num_features, "num_classes": model.num_classes,
           "group_matcher": model.group_matcher(), "group_matcher_coarse": model.group_matcher(coarse=True),
           "no_weight_decay": sorted(model.no_weight_decay())}
    model.reset_classifier(3)
    doc["after_reset"] = {"num_classes": model.num_classes, "classifier": list(model.get_classifier().weight.shape)}
    model.reset_classifier(0)
    doc["after_reset_0"] = {"num_classes": model.num_classes, "classifier": type(model.get_classifier()).__name__}
    np.savez(OUT / "api.npz", **out)
    (OUT / "api.json").write_text(json.dumps(doc, indent=1) + "\n")


def main() -> None:
    torch.manual_seed(0)
    args = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=6)
    model = timm.models.VisionTransformer(**args).eval()
    with torch.no_grad():
        for p in model.parameters():  # far from the init, so every tensor matters
            p.normal_(0, 0.5)
    model.pretrained_cfg = dict(architecture="vit_base_patch16_224", input_size=(3, 32, 32), interpolation="bicubic",
                                crop_pct=0.875, crop_mode="center", mean=MEAN, std=STD, num_classes=6)
    hub = OUT / "hub"
    timm.models.save_for_hf(model, str(hub), model_args=args, safe_serialization=True)
    files = write_images(OUT / "images")
    cfg = resolve_data_config({}, model=model)
    tf = create_transform(**cfg)
    inputs, probs = {}, {}
    for f in files:
        x = tf(ImageOps.exif_transpose(Image.open(f)).convert("RGB"))[None]
        with torch.no_grad():
            probs[f.name] = model(x).softmax(-1)[0].tolist()
        inputs[f.name] = x[0].numpy()
    np.savez(OUT / "inputs.npz", **inputs)
    api_reference(model)
    (OUT / "reference.json").write_text(json.dumps({
        "made_by": f"timm {timm.__version__}, torch {torch.__version__}", "data_config": {k: list(v) if isinstance(
            v, tuple) else v for k, v in cfg.items()}, "transform": str(tf), "probs": probs}, indent=1) + "\n")
    print(tf, cfg, sep="\n")


if __name__ == "__main__":
    main()
