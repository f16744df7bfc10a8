"""Writes tests/fixtures/timm_families/: small random checkpoints of ViT families written by timm itself, with
timm's outputs on a fixed input, for vitkit's loaders to match (tests/test_hostile_round2.py).

Needs timm (and so torchvision, which does not load beside the CPU torch): run it in the side environment of
tests/reference/make_timm_preprocess_reference.py:

    /tmp/side/bin/python tests/reference/make_timm_family_reference.py

Families: DeiT distilled (`deit_*_distilled_*`: a distillation token and head_dist, the two heads averaged at
inference); a SigLIP-style image tower (`vit_*_siglip_*`: no class token, attention pooling `attn_pool`); MAE-style
average pooling beside a class token with fc_norm (hub folder and bare file), and without fc_norm; DeiT III-style
LayerScale with no_embed_class; DINOv2 with registers (`*_reg4_dinov2`: LayerScale, 4 registers, no_embed_class);
an OpenAI CLIP image tower (`*_clip_quickgelu_*`: pre-norm, bias-free patch embedding, QuickGELU, eps 1e-5);
registers with average pooling and no class token (`*_reg4_gap_*`); and an EVA-02 file, a family vitkit refuses.
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
        _more_families(x, out)
    np.savez(OUT / "outputs.npz", **out)
    (OUT / "made_by.json").write_text(json.dumps({"timm": timm.__version__, "torch": torch.__version__}) + "\n")


SMALL = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def _family(name: str, architecture: str, x: torch.Tensor, out: dict, seed: int, bare: bool = False,
            sizes: bool = False, **kw) -> None:  # noqa: ANN003
    """A random timm model of `architecture` (its builder's defaults, SMALL sizes and `kw`) saved as a hub folder
    `<name>_hub` (and a bare `<name>.safetensors`), with its logits, features and pooled output on `x`; `sizes`:
    also the features of the same weights built with dynamic_img_size=True on 48 and 24 px inputs
    (`<name>_features_<side>`, E_pos resampled by timm's resample_abs_pos_embed)."""
    torch.manual_seed(seed)
    args = {**SMALL, **kw}
    model = timm.create_model(architecture, pretrained=False, **args).eval()
    for p in model.parameters():  # far from the init (LayerScale's gammas too), so every tensor matters
        p.normal_(0, 0.5)
    model.pretrained_cfg = dict(architecture=architecture, input_size=(3, 32, 32), interpolation="bicubic",
                                crop_pct=0.9, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), num_classes=5)
    timm.models.save_for_hf(model, str(OUT / f"{name}_hub"), model_args=args, safe_serialization=True)
    if bare:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(OUT / f"{name}.safetensors"))
    z = model.forward_features(x)
    out[f"{name}_logits"] = model(x).numpy()
    out[f"{name}_features"] = z.numpy()
    out[f"{name}_pooled"] = model.forward_head(z, pre_logits=True).numpy()
    if sizes:
        dynamic = timm.create_model(architecture, pretrained=False, dynamic_img_size=True, **args).eval()
        dynamic.load_state_dict(model.state_dict())
        for side in (48, 24):
            y = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(side))
            out[f"x_{side}"] = y.numpy()
            out[f"{name}_features_{side}"] = dynamic.forward_features(y).numpy()


def _more_families(x: torch.Tensor, out: dict) -> None:
    _family("mae_avg", "vit_base_patch16_224", x, out, 3, bare=True, sizes=True, global_pool="avg")  # fc_norm: timm's default
    _family("avg_nofc", "vit_base_patch16_224", x, out, 4, global_pool="avg", fc_norm=False)
    _family("deit3", "deit3_base_patch16_224", x, out, 5, bare=True, sizes=True)  # LayerScale 1e-6, no_embed_class
    _family("dinov2_reg", "vit_base_patch14_reg4_dinov2", x, out, 6, sizes=True)  # LayerScale, 4 registers, no_embed_class
    _family("clip", "vit_base_patch16_clip_quickgelu_224", x, out, 7, bare=True)  # pre-norm, QuickGELU, eps 1e-5
    _family("reg_gap", "vit_base_patch16_reg4_gap_256", x, out, 8)  # 4 registers, no class token, average pooling
    # a family vitkit does not build (EVA-02: SwiGLU MLP, rotary position embeddings): for the refusal message
    torch.manual_seed(9)
    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                            depth=2, num_heads=4, num_classes=5)
    save_file({k: v.contiguous() for k, v in eva.state_dict().items()}, str(OUT / "eva02.safetensors"))


if __name__ == "__main__":
    main()
