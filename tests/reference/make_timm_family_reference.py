"""Writes tests/fixtures/timm_families/: small random checkpoints of ViT families written by timm itself, with
timm's outputs on a fixed input, for vitkit's loaders to match (tests/test_hostile_round2.py).

Needs timm (and so torchvision, which does not load beside the CPU torch): run it in the side environment of
tests/reference/make_timm_preprocess_reference.py:

    /tmp/side/bin/python tests/reference/make_timm_family_reference.py

Families so far: DeiT distilled (`deit_*_distilled_*`: a distillation token and head_dist, the two heads averaged
at inference); a SigLIP-style image tower (`vit_*_siglip_*`: no class token, attention pooling `attn_pool`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import timm
import torch
from safetensors.torch import save_file
from timm.models.deit import VisionTransformerDistilled

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "timm_families"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    args = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5)
    model = VisionTransformerDistilled(**args).eval()
    with torch.no_grad():
        for p in model.parameters():  # far from the init, so every tensor matters
            p.normal_(0, 0.5)
    model.pretrained_cfg = dict(architecture="deit_tiny_distilled_patch16_224", input_size=(3, 32, 32),
                                interpolation="bicubic", crop_pct=0.875, mean=(0.485, 0.456, 0.406),
                                std=(0.229, 0.224, 0.225), num_classes=5)
    timm.models.save_for_hf(model, str(OUT / "deit_distilled_hub"), model_args=args, safe_serialization=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(OUT / "deit_distilled.safetensors"))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = {"x": x.numpy(), "deit_distilled_logits": model(x).numpy(),
               "deit_distilled_features": model.forward_features(x).numpy()}
        # SigLIP-style image tower: no class token, multi-head attention pooling (timm's attn_pool), a head on it
        sargs = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5, class_token=False,
                     global_pool="map")
        torch.manual_seed(2)
        siglip = timm.models.VisionTransformer(**sargs).eval()
        for p in siglip.parameters():
            p.normal_(0, 0.5)
        siglip.pretrained_cfg = dict(architecture="vit_base_patch16_siglip_224", input_size=(3, 32, 32),
                                     interpolation="bicubic", crop_pct=1.0, crop_mode="squash", mean=(0.5, 0.5, 0.5),
                                     std=(0.5, 0.5, 0.5), num_classes=5)
        timm.models.save_for_hf(siglip, str(OUT / "siglip_hub"), model_args=sargs, safe_serialization=True)
        out["siglip_logits"] = siglip(x).numpy()
        out["siglip_features"] = siglip.forward_features(x).numpy()
        out["siglip_pooled"] = siglip.forward_head(siglip.forward_features(x), pre_logits=True).numpy()
    np.savez(OUT / "outputs.npz", **out)
    (OUT / "made_by.json").write_text(json.dumps({"timm": timm.__version__, "torch": torch.__version__}) + "\n")


if __name__ == "__main__":
    main()
