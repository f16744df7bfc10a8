"""Writes tests/fixtures/timm_hub/: timm hub folders of the families vitkit reads, written by timm itself, image files,
and the features timm's own pipeline gives for each file. vitkit's test (tests/formats/test_timm_hub_folders.py)
runs `vitkit embed` on the same files and folders and compares.

Each folder is what `timm.models.save_for_hf` writes for a random model of the hub checkpoint's architecture (its
builder's defaults, the hub's `pretrained_cfg` from timm's registry: input size, interpolation, crop_pct,
crop_mode, mean/std), with width, depth and classes reduced by model_args so the committed files stay small:

- `vit_augreg`: vit_small_patch16_224.augreg_in21k_ft_in1k (crop 0.9, bicubic, mean = std = 0.5, a head);
- `dinov2`: vit_small_patch14_dinov2.lvd142m as the hub ships it (518 px, crop_pct 1.0, LayerScale);
- `dinov2_224`: the same weights (a 37 x 37 E_pos) with the pretrained_cfg's input_size set to 224 and no img_size
  in model_args, so timm builds the model at 224 and resamples E_pos while loading (checkpoint_filter_fn);
- `clip`: vit_base_patch16_clip_224.openai (pre-norm, OpenAI mean/std, a projection as the head);
- `siglip`: vit_base_patch16_siglip_224.webli (no class token, attention pooling);
- `deit`: deit_tiny_distilled_patch16_224.fb_in1k (class and distillation tokens, two heads).

The reference is timm's documented pipeline on the folder as a user loads it: `timm.create_model("local-dir:...",
pretrained=True)`, `resolve_data_config({}, model=model)` + `create_transform(**cfg)` on
`Image.open(f).convert("RGB")` (after PIL's `exif_transpose`, as make_timm_preprocess_reference.py explains), and
the pooled pre-logits `model.forward_head(model.forward_features(x), pre_logits=True)` (DeiT's: the mean of the
class and distillation tokens). Images: scikit-image's photos, non-square, large, tiny, grey, RGBA and EXIF-rotated.

timm's transforms need torchvision, which does not load beside the CPU torch vitkit installs: run this in the side
environment (the CUDA torch build runs on the CPU here):

    python3 -m venv /tmp/side && /tmp/side/bin/pip install torchvision timm safetensors pillow numpy scikit-image
    /tmp/side/bin/python tests/reference/make_timm_hub_reference.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import timm
import torch
from PIL import Image, ImageOps
from skimage import data as skd
from timm.data import resolve_data_config
from timm.data.transforms_factory import create_transform

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "timm_hub"
SMALL = dict(embed_dim=32, depth=2, num_heads=2)

# name -> (hub checkpoint, model_args beyond SMALL, pretrained_cfg changes)
FOLDERS: dict[str, tuple[str, dict, dict]] = {
    "vit_augreg": ("vit_small_patch16_224.augreg_in21k_ft_in1k", dict(num_classes=10), {}),
    "dinov2": ("vit_small_patch14_dinov2.lvd142m", {}, {}),
    "dinov2_224": ("vit_small_patch14_dinov2.lvd142m", {}, {"input_size": [3, 224, 224]}),
    "clip": ("vit_base_patch16_clip_224.openai", dict(num_classes=16), {}),
    "siglip": ("vit_base_patch16_siglip_224.webli", {}, {}),
    "deit": ("deit_tiny_distilled_patch16_224.fb_in1k", dict(num_classes=10), {}),
}


def write_images(folder: Path) -> list[Path]:
    """Small files of scikit-image's photos: non-square, large, tiny, grey, RGBA (half transparent) and EXIF-rotated."""
    folder.mkdir(parents=True)
    coffee, chelsea, astro = skd.coffee(), skd.chelsea(), skd.astronaut()
    files = []

    def save(name: str, img: Image.Image, **kw) -> None:  # noqa: ANN003
        img.save(folder / name, **kw)
        files.append(folder / name)

    save("wide.jpg", Image.fromarray(coffee), quality=85)  # 600 x 400
    save("tall.jpg", Image.fromarray(astro).crop((96, 0, 416, 512)), quality=85)  # 320 x 512
    save("large.jpg", Image.fromarray(astro).resize((1400, 1050), Image.BICUBIC), quality=80)
    save("small.png", Image.fromarray(chelsea).resize((20, 13), Image.BILINEAR))
    save("grey.jpg", Image.fromarray(chelsea).convert("L"), quality=85)
    rgba = Image.fromarray(chelsea).resize((226, 150), Image.BILINEAR).convert("RGBA")
    alpha = np.full((150, 226), 255, np.uint8)
    alpha[:, :113] = 0  # half transparent: dropped by convert("RGB"), as timm's loader does
    rgba.putalpha(Image.fromarray(alpha))
    save("rgba.png", rgba)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways, shown upright
    save("rotated.jpg", Image.fromarray(coffee).resize((300, 200), Image.BILINEAR), exif=exif.tobytes(), quality=85)
    return files


def write_folder(name: str, hub_name: str, args: dict, cfg_changes: dict, seed: int) -> Path:
    """A random `hub_name` model (SMALL sizes and `args`) saved by timm's save_for_hf as `OUT/name`."""
    torch.manual_seed(seed)
    model = timm.create_model(hub_name, pretrained=False, **SMALL, **args).eval()
    with torch.no_grad():  # off timm's init (LayerScale's 1e-5 gammas, zero biases) so every tensor matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    out = OUT / name
    timm.models.save_for_hf(model, str(out), safe_serialization=True)
    if cfg_changes:  # the weights stay as built; timm builds the model from the changed config
        doc = json.loads((out / "config.json").read_text())
        doc["pretrained_cfg"].update(cfg_changes)
        if "input_size" in cfg_changes:
            doc.get("model_args", {}).pop("img_size", None)
        (out / "config.json").write_text(json.dumps(doc, indent=2) + "\n")
    return out


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    files = write_images(OUT / "images")
    ref: dict = {"made_by": f"timm {timm.__version__}, torch {torch.__version__}", "files": [f.name for f in files],
                 "folders": {}}
    feats = {}
    for seed, (name, (hub_name, args, changes)) in enumerate(FOLDERS.items()):
        folder = write_folder(name, hub_name, args, changes, seed)
        model = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()  # as a user loads the folder
        cfg = resolve_data_config({}, model=model)
        tf = create_transform(**cfg)
        x = torch.stack([tf(ImageOps.exif_transpose(Image.open(f)).convert("RGB")) for f in files])
        with torch.no_grad():
            feats[name] = model.forward_head(model.forward_features(x), pre_logits=True).numpy()
        ref["folders"][name] = {"hub": hub_name, "data_config": {k: list(v) if isinstance(v, tuple) else v
                                                                  for k, v in cfg.items()},
                                "transform": str(tf), "grid": list(model.patch_embed.grid_size)}
        print(name, cfg, feats[name].shape)
    np.savez(OUT / "features.npz", **feats)
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
