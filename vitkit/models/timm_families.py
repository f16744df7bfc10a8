"""timm's names of the checkpoint families vitkit reads, with timm's architectures and default configs.

`vit_small_patch14_dinov2`, `vit_base_patch16_siglip_224`, `deit_small_distilled_patch16_224`,
`vit_base_patch16_clip_224`, `deit3_base_patch16_384`, `vit_base_r50_s16_384`, ...: each name is built as timm's
builder of that name builds it (timm/models/vision_transformer.py, deit.py, vision_transformer_hybrid.py) -- its
sizes, resolution, pooling, norms (CLIP's pre-norm with nn.LayerNorm's eps 1e-5, timm's 1e-6 elsewhere), LayerScale
(DINOv2 1e-5, DeiT III 1e-6), registers, GELU (exact; QuickGELU for `*_clip_quickgelu_*`, tanh where timm's builder
says `gelu_tanh`), and the head size and preprocessing (mean, std, interpolation, crop) of the name's default
pretrained config, which timm's `create_model(name)` takes its `num_classes` and `img_size` from. So a timm user's
`create_model(name)` holds the weights of that name as vitkit loads them (`load_pretrained`), state dict for state
dict (tests/models/test_timm_families.py). Names whose architecture vitkit does not build (DINOv2 giant's
SwiGLU MLP) are refused by name (`REFUSED`).

The data is kept per family (`BY_FAMILY`, keyed by the family's `key` in formats/families/, whose registry joins
a family's key maps to its names here; "vit" is the paper's own hybrids): a family's timm names are its section
of this file. The model layer builds them (models/registry.py) and imports nothing from formats.
"""

from __future__ import annotations

from typing import Any

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))  # timm's IMAGENET_DEFAULT_MEAN / _STD
INCEPTION = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # IMAGENET_INCEPTION_MEAN / _STD
OPENAI_CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))

# name -> (ViTConfig fields, default pretrained config: num_classes, mean / std, crop_pct, crop_mode); every
# entry runs timm's bicubic resize, and timm resamples E_pos with antialiased bicubic (`posemb_resample`)
Spec = tuple[dict[str, Any], dict[str, Any]]
BY_FAMILY: dict[str, dict[str, Spec]] = {}  # family key -> its timm names


def _add(family: str, name: str, width: int, depth: int, heads: int, patch: int, img: int, classes: int,
         norm: tuple[tuple[float, ...], tuple[float, ...]], crop: float, mode: str = "center", mlp: int | None = None,
         **fields: Any) -> None:
    cfg = {"width": width, "depth": depth, "num_heads": heads, "patch_size": patch, "img_size": (img, img),
           "num_classes": classes, "mlp_dim": mlp or 4 * width, "gelu": "exact", "ln_eps": 1e-6,
           "posemb_resample": "bicubic_antialias", "name": name, **fields}
    BY_FAMILY.setdefault(family, {})[name] = (cfg, dict(num_classes=classes, mean=norm[0], std=norm[1], crop_pct=crop, crop_mode=mode))


# DINOv2 (timm: init_values=1e-5; `reg4`: 4 registers, no_embed_class; pretrained cfg lvd142m: 518 px, no head)
for _size, (_w, _d, _h) in {"small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16)}.items():
    _add("dinov2", f"vit_{_size}_patch14_dinov2", _w, _d, _h, 14, 518, 0, IMAGENET, 1.0, layer_scale=1e-5)
    _add("dinov2", f"vit_{_size}_patch14_reg4_dinov2", _w, _d, _h, 14, 518, 0, IMAGENET, 1.0, layer_scale=1e-5,
         num_registers=4)

# SigLIP image towers (no class token, attention pooling `attn_pool`; no head; `gelu_tanh` where the builder says)
_SIGLIP = {  # name: (width, depth, heads, patch, img, mlp, tanh GELU)
    "vit_base_patch32_siglip_256": (768, 12, 12, 32, 256, None, True),
    **{f"vit_base_patch16_siglip_{r}": (768, 12, 12, 16, r, None, False) for r in (224, 256, 384, 512)},
    **{f"vit_large_patch16_siglip_{r}": (1024, 24, 16, 16, r, None, r == 512) for r in (256, 384, 512)},
    **{f"vit_so400m_patch14_siglip_{r}": (1152, 27, 16, 14, r, 4304, False) for r in (224, 378, 384)},
    **{f"vit_so400m_patch16_siglip_{r}": (1152, 27, 16, 16, r, 4304, True) for r in (256, 384, 512)},
    **{f"vit_giantopt_patch16_siglip_{r}": (1536, 40, 16, 16, r, None, True) for r in (256, 384)},
}
for _n, (_w, _d, _h, _p, _r, _m, _tanh) in _SIGLIP.items():
    _add("siglip", _n, _w, _d, _h, _p, _r, 0, INCEPTION, 0.9, mlp=_m, pooling="map", class_token=False,
         gelu="tanh" if _tanh else "exact")

# CLIP image towers (pre_norm, bias-free patch embedding, nn.LayerNorm eps 1e-5; QuickGELU for *_clip_quickgelu_*):
# name: (width, depth, heads, patch, img, mlp, default num_classes, mean / std, crop_pct, crop_mode)
_CLIP = {
    "vit_xsmall_patch16_clip_224": (256, 10, 4, 16, 224, None, 512, OPENAI_CLIP, 0.9, "center"),
    "vit_medium_patch32_clip_224": (512, 12, 8, 32, 224, None, 512, OPENAI_CLIP, 0.9, "center"),
    "vit_medium_patch16_clip_224": (512, 12, 8, 16, 224, None, 512, OPENAI_CLIP, 0.9, "center"),
    "vit_betwixt_patch32_clip_224": (640, 12, 10, 32, 224, None, 512, OPENAI_CLIP, 0.9, "center"),
    "vit_base_patch32_clip_224": (768, 12, 12, 32, 224, None, 1000, OPENAI_CLIP, 0.9, "center"),
    "vit_base_patch32_clip_256": (768, 12, 12, 32, 256, None, 512, OPENAI_CLIP, 1.0, "center"),
    "vit_base_patch32_clip_384": (768, 12, 12, 32, 384, None, 1000, OPENAI_CLIP, 1.0, "center"),
    "vit_base_patch32_clip_448": (768, 12, 12, 32, 448, None, 1000, OPENAI_CLIP, 1.0, "center"),
    "vit_base_patch16_clip_224": (768, 12, 12, 16, 224, None, 1000, OPENAI_CLIP, 0.95, "center"),
    "vit_base_patch16_clip_384": (768, 12, 12, 16, 384, None, 1000, OPENAI_CLIP, 1.0, "squash"),
    "vit_base_patch16_plus_clip_240": (896, 12, 14, 16, 240, None, 640, OPENAI_CLIP, 1.0, "center"),
    "vit_large_patch14_clip_224": (1024, 24, 16, 14, 224, None, 1000, INCEPTION, 1.0, "center"),
    "vit_large_patch14_clip_336": (1024, 24, 16, 14, 336, None, 1000, INCEPTION, 1.0, "squash"),
    "vit_huge_patch14_clip_224": (1280, 32, 16, 14, 224, None, 1000, OPENAI_CLIP, 1.0, "center"),
    "vit_huge_patch14_clip_336": (1280, 32, 16, 14, 336, None, 1000, OPENAI_CLIP, 1.0, "squash"),
    "vit_huge_patch14_clip_378": (1280, 32, 16, 14, 378, None, 1024, OPENAI_CLIP, 1.0, "center"),
    "vit_giant_patch14_clip_224": (1408, 40, 16, 14, 224, 6144, 1024, OPENAI_CLIP, 1.0, "center"),
    "vit_gigantic_patch14_clip_224": (1664, 48, 16, 14, 224, 8192, 1280, OPENAI_CLIP, 1.0, "center"),
    "vit_gigantic_patch14_clip_378": (1664, 48, 16, 14, 378, 8192, 1280, OPENAI_CLIP, 1.0, "squash"),
    "vit_base_patch32_clip_quickgelu_224": (768, 12, 12, 32, 224, None, 512, OPENAI_CLIP, 0.9, "center"),
    "vit_base_patch16_clip_quickgelu_224": (768, 12, 12, 16, 224, None, 512, OPENAI_CLIP, 1.0, "center"),
    "vit_large_patch14_clip_quickgelu_224": (1024, 24, 16, 14, 224, None, 768, OPENAI_CLIP, 1.0, "center"),
    "vit_large_patch14_clip_quickgelu_336": (1024, 24, 16, 14, 336, None, 768, OPENAI_CLIP, 1.0, "center"),
    "vit_huge_patch14_clip_quickgelu_224": (1280, 32, 16, 14, 224, None, 1024, OPENAI_CLIP, 1.0, "center"),
    "vit_huge_patch14_clip_quickgelu_378": (1280, 32, 16, 14, 378, None, 1024, OPENAI_CLIP, 1.0, "center"),
    "vit_gigantic_patch14_clip_quickgelu_224": (1664, 48, 16, 14, 224, 8192, 1280, OPENAI_CLIP, 1.0, "center"),
}
for _n, (_w, _d, _h, _p, _r, _m, _k, _norm, _crop, _mode) in _CLIP.items():
    _add("clip", _n, _w, _d, _h, _p, _r, _k, _norm, _crop, _mode, mlp=_m, pre_norm=True, patch_bias=False, ln_eps=1e-5,
         gelu="quick" if "_quickgelu_" in _n else "exact")

# DeiT (plain ViTs; `distilled`: a distillation token and head) and DeiT III (LayerScale 1e-6, no_embed_class:
# vitkit's zero class-token row of E_pos); ImageNet mean / std, crop 0.9 at 224 and 1.0 at 384
_DEIT_SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "medium": (512, 12, 8), "base": (768, 12, 12),
               "large": (1024, 24, 16), "huge": (1280, 32, 16)}
for _n in ("deit_tiny_patch16_224", "deit_small_patch16_224", "deit_base_patch16_224", "deit_base_patch16_384",
           "deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224", "deit_base_distilled_patch16_224",
           "deit_base_distilled_patch16_384", "deit3_small_patch16_224", "deit3_small_patch16_384",
           "deit3_medium_patch16_224", "deit3_base_patch16_224", "deit3_base_patch16_384", "deit3_large_patch16_224",
           "deit3_large_patch16_384", "deit3_huge_patch14_224"):
    _parts = _n.split("_")
    _r, _p = int(_parts[-1]), int(_parts[-2][len("patch"):])
    _extra: dict[str, Any] = {"distill_token": True} if "_distilled_" in _n else {}
    if _n.startswith("deit3_"):
        _extra["layer_scale"] = 1e-6
    _add("deit3" if _n.startswith("deit3_") else "deit", _n, *_DEIT_SIZES[_parts[1]], _p, _r, 1000, IMAGENET, 0.9 if _r == 224 else 1.0, **_extra)

# The hybrids (vision_transformer_hybrid.py): a ResNet-v2 stem without pre-activation, patch size 1 on its map;
# r50_s16: stages (3, 4, 9), r50_s32: (3, 4, 6, 3), r26_s32: (2, 2, 2, 2); mean = std = 0.5
_HYBRID = {"vit_small_r26_s32_224": ("small", (2, 2, 2, 2), 1000), "vit_small_r26_s32_384": ("small", (2, 2, 2, 2), 1000),
           "vit_base_r26_s32_224": ("base", (2, 2, 2, 2), 1000), "vit_base_r50_s16_224": ("base", (3, 4, 9), 0),
           "vit_base_r50_s16_384": ("base", (3, 4, 9), 1000), "vit_large_r50_s32_224": ("large", (3, 4, 6, 3), 1000),
           "vit_large_r50_s32_384": ("large", (3, 4, 6, 3), 1000)}
for _n, (_size, _layers, _k) in _HYBRID.items():
    _r = int(_n.rsplit("_", 1)[1])
    _add("vit", _n, *_DEIT_SIZES[_size], 1, _r, _k, INCEPTION, 0.9 if _r == 224 else 1.0, resnet_layers=_layers,
         resnet_width=1)

SPECS: dict[str, Spec] = {n: s for names in BY_FAMILY.values() for n, s in names.items()}  # every family's names

# timm names of these families whose architecture vitkit does not build, and why, by family
REFUSED_BY_FAMILY: dict[str, dict[str, str]] = {"dinov2": {
    f"vit_giant_patch14{r}_dinov2": "DINOv2 giant's SwiGLU MLP (mlp_layer=SwiGLUPacked, SiLU) is not a part vitkit's "
                                    "ViT has" for r in ("", "_reg4")}}
REFUSED = {n: why for names in REFUSED_BY_FAMILY.values() for n, why in names.items()}


def family_preprocess(name: str) -> dict[str, Any] | None:
    """The default pretrained config of timm name `name` (mean, std, crop_pct, crop_mode; bicubic), or None."""
    spec = SPECS.get(name)
    return None if spec is None else {**spec[1], "interpolation": "bicubic"}
