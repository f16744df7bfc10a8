"""One registry of named models: `create_model(name, **overrides)`, timm-style.

Names are `vit_{ti,s,b,l,h}{8,14,16,32}` (e.g. `vit_b16`), the hybrids `vit_r50_{ti,...,h}{16,32}`,
`vit` (any size, from the overrides) and the BiT baselines `bit_r{50,101,152}x{1,2,3,4}`; the paper's
spellings `"ViT-B/16"` / `"R50+ViT-B/16"` and timm's `vit_base_patch16_224` are accepted too, and timm's names of
the families vitkit reads (`vit_small_patch14_dinov2`, `deit3_base_patch16_384`, ...: models/timm_families.py). Builders
take overrides of any config field (`create_model("vit_ti16", patch_size=2, img_size=8)`); other code
registers more with `register_model`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from torch import nn

from vitkit.models.hub_api import load_checkpoint
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.pretrained_tags import pretrained_tag
from vitkit.models.resnet import BIT_DEPTHS, BiTConfig, ResNetV2
from vitkit.models.timm_api import POOL_FROM_TIMM, TIMM_ACTS
from vitkit.models.timm_families import REFUSED, SPECS, family_preprocess
from vitkit.models.vit import VisionTransformer, ViTConfig

# Table 1 of the paper: (width D, MLP size, heads, layers). Ti and S are the DeiT / AugReg sizes.
VARIANTS: dict[str, dict[str, int]] = {
    "ti": dict(width=192, mlp_dim=768, num_heads=3, depth=12),
    "s": dict(width=384, mlp_dim=1536, num_heads=6, depth=12),
    "b": dict(width=768, mlp_dim=3072, num_heads=12, depth=12),
    "l": dict(width=1024, mlp_dim=4096, num_heads=16, depth=24),
    "h": dict(width=1280, mlp_dim=5120, num_heads=16, depth=32),
}
PATCH_SIZES = (8, 14, 16, 32)
_LONG = {"tiny": "ti", "small": "s", "base": "b", "large": "l", "huge": "h"}

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str, builder: Callable[..., nn.Module]) -> None:
    """Add `builder(**overrides) -> nn.Module` under `name` (lower-case)."""
    _REGISTRY[name.lower()] = builder


def vit_config(variant: str, patch_size: int, **overrides: Any) -> ViTConfig:
    """The config of ViT-{variant}/{patch_size} at 224 px with a 1000-way head, then `overrides` (any
    ViTConfig field, `patch_size` and the sizes included: the name then says it is a modified model)."""
    base = dict(VARIANTS[variant], patch_size=patch_size, img_size=(224, 224), num_classes=1000)
    base["name"] = f"vit_{variant}{patch_size}"
    sized = {k for k in ("patch_size", "width", "depth", "num_heads", "mlp_dim") if k in overrides
             and overrides[k] != base[k]}
    if sized and "name" not in overrides:
        base["name"] = "vit"  # no longer the Table 1 model it started from
    base.update(overrides)
    return ViTConfig(**base)


def _vit_builder(variant: str, patch: int) -> Callable[..., nn.Module]:
    def build(**overrides: Any) -> nn.Module:
        return VisionTransformer(vit_config(variant, overrides.pop("patch_size", patch), **overrides))

    build.__doc__ = f"ViT-{variant.upper() if variant != 'ti' else 'Ti'}/{patch} (paper Table 1)"
    return build


for _v in VARIANTS:
    for _p in PATCH_SIZES:
        register_model(f"vit_{_v}{_p}", _vit_builder(_v, _p))


def _axial_builder(patch: int) -> Callable[..., nn.Module]:
    def build(**overrides: Any) -> nn.Module:
        kw: dict[str, Any] = dict(block="axial", pooling="gap", name=f"axial_vit_b{patch}")
        return VisionTransformer(vit_config("b", overrides.pop("patch_size", patch), **{**kw, **overrides}))

    build.__doc__ = f"Axial-ViT-B/{patch} (appendix D.7): row + column blocks in place of each of B's 12 blocks"
    return build


for _p in (16, 32):  # the two Axial-ViTs of the paper's Figure 13
    register_model(f"axial_vit_b{_p}", _axial_builder(_p))


def _plain_vit(**overrides: Any) -> nn.Module:
    """`vit`: a ViT of any size, every field from the overrides (ViTConfig's defaults are B/16's)."""
    return VisionTransformer(ViTConfig(**{"name": "vit", **overrides}))


register_model("vit", _plain_vit)


# Hybrids (§3.1, §4.1 "Hybrids"): the ResNet feature map is the patch grid, patch size 1 on it.
# "/16" removes stage 4 and puts its 3 units into stage 3, (3, 4, 9), for a 4x longer sequence;
# "/32" takes stage 4 of a regular ResNet-50, (3, 4, 6, 3).
HYBRID_LAYERS = {16: (3, 4, 9), 32: (3, 4, 6, 3)}


def _hybrid_builder(variant: str, stride: int) -> Callable[..., nn.Module]:
    def build(**overrides: Any) -> nn.Module:
        kw: dict[str, Any] = dict(resnet_layers=HYBRID_LAYERS[stride], resnet_width=1, name=f"vit_r50_{variant}{stride}")
        kw.update(overrides)
        return VisionTransformer(vit_config(variant, 1, **kw))

    build.__doc__ = f"R50+ViT-{variant.upper() if variant != 'ti' else 'Ti'}/{stride} hybrid"
    return build


for _v in VARIANTS:
    for _s in HYBRID_LAYERS:
        register_model(f"vit_r50_{_v}{_s}", _hybrid_builder(_v, _s))


def _bit_builder(depth: int, width_factor: int) -> Callable[..., nn.Module]:
    def build(**overrides: Any) -> nn.Module:
        fixed = sorted(set(overrides) & {"layers", "width_factor"})
        if fixed:
            raise ValueError(f"bit_r{depth}x{width_factor} takes num_classes, in_chans, img_size and numerics; "
                             f"its {fixed} are in its name (use create_model('bit', layers=..., width_factor=...))")
        base = dict(layers=BIT_DEPTHS[depth], width_factor=width_factor, name=f"bit_r{depth}x{width_factor}")
        try:
            return ResNetV2(BiTConfig(**{**base, **overrides}))
        except TypeError as e:
            raise ValueError(f"bit_r{depth}x{width_factor} takes num_classes, in_chans, img_size and numerics: {e}") from e

    build.__doc__ = f"BiT ResNet-v2 R{depth}x{width_factor} (pre-activation, GroupNorm, StdConv)"
    return build


# The BiT baselines of the paper's comparison tables (Table 2, Fig. 5): bit_r{50,101,152}x{1,2,3,4}.
for _d in BIT_DEPTHS:
    for _w in (1, 2, 3, 4):
        register_model(f"bit_r{_d}x{_w}", _bit_builder(_d, _w))


def _plain_bit(**overrides: Any) -> nn.Module:
    """`bit`: a BiT ResNet-v2 of any depth and width, every field from the overrides (BiTConfig's defaults: R50x1)."""
    return ResNetV2(BiTConfig(**{"name": "bit", **overrides}))


register_model("bit", _plain_bit)


def _family_builder(name: str) -> Callable[..., nn.Module]:
    base = SPECS[name][0]

    def build(**overrides: Any) -> nn.Module:
        cfg = {**base, **overrides}
        if any(k in overrides and overrides[k] != base[k] for k in ("patch_size", "width", "depth", "num_heads",
                                                                       "mlp_dim")) and "name" not in overrides:
            cfg["name"] = "vit"  # no longer the model the name says
        model = VisionTransformer(ViTConfig(**cfg))
        pc = family_preprocess(name)
        if pc is not None and len(pc["mean"]) == model.config.in_chans:  # timm's default pretrained config
            model.preprocess = PreprocessConfig.from_timm(pc, model.preprocess)
        return model

    build.__doc__ = f"timm's {name}: its architecture and default pretrained config (models/timm_families.py)"
    return build


for _n in SPECS:
    register_model(_n, _family_builder(_n))


def canonical_name(name: str) -> str:
    """Map `ViT-B/16`, `vit_base_patch16_224`, `B/16` or `vit_b16` to the registry's `vit_b16`."""
    key = name.strip().lower()
    if key in _REGISTRY:
        return key
    m = re.fullmatch(r"(?:vit[-_ ]?)?(ti|s|b|l|h)/(\d+)", key)
    if m:
        return f"vit_{m.group(1)}{m.group(2)}"
    m = re.fullmatch(r"axial[-_ ]?vit[-_ ]?b/(\d+)", key)
    if m:
        return f"axial_vit_b{m.group(1)}"
    m = re.fullmatch(r"r50(?:x1)?\s*\+\s*vit[-_ ]?(ti|s|b|l|h)/(\d+)", key)
    if m:
        return f"vit_r50_{m.group(1)}{m.group(2)}"
    m = _TIMM_NAME.fullmatch(key)
    if m:
        return f"vit_{_LONG[m.group(1)]}{m.group(2)}"
    return key


# timm's names: vit_{size}_patch{P}_{resolution}; the resolution is part of the model (a 384-px model is not a
# 224-px one), and timm's ViTs run the exact (erf) GELU.
_TIMM_NAME = re.compile(r"vit_(tiny|small|base|large|huge)_patch(\d+)_(\d+)")


def name_img_size(name: str) -> int:
    """The resolution a model name implies: a timm name's own (`vit_base_patch16_384`: 384, `vit_small_patch14_dinov2`:
    518), else the 224 px every other registered model is built at (the paper's pre-training resolution)."""
    spec = SPECS.get(name.strip().lower())
    return spec[0]["img_size"][0] if spec else name_overrides(name).get("img_size", 224)


def name_overrides(name: str) -> dict[str, Any]:
    """What a name says beyond the registry entry it maps to: a timm name's resolution and GELU flavour."""
    m = _TIMM_NAME.fullmatch(name.strip().lower())
    return {"img_size": int(m.group(3)), "gelu": "exact"} if m else {}


# timm's keyword names for the same things, and vitkit's for them.
TIMM_KWARGS = {"drop_path_rate": "drop_path", "drop_rate": "dropout", "attn_drop_rate": "attn_dropout",
               "reg_tokens": "num_registers", "embed_dim": "width", "init_values": "layer_scale"}


def _default_sizes(key: str) -> tuple[int, int]:
    """(width, MLP size) of registered model `key` as built without overrides."""
    if key in SPECS:
        return SPECS[key][0]["width"], SPECS[key][0]["mlp_dim"]
    m = re.fullmatch(r"(?:axial_)?vit_(?:r50_)?(ti|s|b|l|h)\d+", key)
    v = VARIANTS[m.group(1)] if m else {"width": ViTConfig.width, "mlp_dim": ViTConfig.mlp_dim}
    return v["width"], v["mlp_dim"]


def _timm_sizes(key: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """timm's `mlp_ratio` and `act_layer` as vitkit's fields: the MLP is `mlp_ratio` x the width (the named model's
    ratio when only `embed_dim` is given, as timm computes it from its builder's ratio); `act_layer` names the GELU."""
    out = dict(overrides)
    ratio = out.pop("mlp_ratio", None)
    if ratio is not None or ("embed_dim" in out and "mlp_dim" not in out):
        width, mlp = _default_sizes(key)
        width = out.get("embed_dim", out.get("width", width))
        out["mlp_dim"] = int(width * (ratio if ratio is not None else mlp / _default_sizes(key)[0]))
    act = out.pop("act_layer", None)
    if act is not None:
        if act not in TIMM_ACTS:
            raise ValueError(f"act_layer={act!r}: vitkit's GELUs are {', '.join(TIMM_ACTS)}")
        out["gelu"] = TIMM_ACTS[act]
    return out


def _timm_kwargs(overrides: dict[str, Any], has_class_token: bool = True, pooling: str = "token") -> dict[str, Any]:
    """timm's keywords (`drop_path_rate`, `global_pool`, `class_token`, ...) as vitkit's config fields, with timm's
    rules: global_pool='avg' keeps the model's class token (`has_class_token`) and, unless `fc_norm` is given,
    norms after pooling instead of before (timm: fc_norm=None means exactly when global_pool='avg'); `pooling`: the
    named model's own."""
    out = {TIMM_KWARGS.get(k, k): v for k, v in overrides.items() if k not in ("global_pool", "class_token")}
    pool, cls = overrides.get("global_pool"), overrides.get("class_token")
    if pool is not None:
        if pool not in POOL_FROM_TIMM:
            raise ValueError(f"global_pool={pool!r}: vitkit pools with 'token', 'avg' or 'map'")
        out["pooling"] = POOL_FROM_TIMM[pool]
        if pool == "map" and (has_class_token if cls is None else cls):
            raise ValueError("global_pool='map' beside a class token is not a model vitkit builds (its attention-"
                             "pooling head reads the patch tokens only): pass class_token=False")
        if pool == "avg":
            out["class_token"] = has_class_token if cls is None else bool(cls)
            out.setdefault("fc_norm", True)
    if cls is not None:
        if cls and out.get("pooling", pooling) not in ("token", "gap"):
            raise ValueError("class_token=True beside global_pool='map' is not a model vitkit builds: use "
                             "global_pool='token' or 'avg'")
        if not cls and pool is None and pooling == "token":
            raise ValueError("class_token=False needs another pooling: global_pool='avg' or 'map'")
    return out


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching a shell-style pattern."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatch(n, pattern.lower()))


def _nearest(name: str) -> list[str]:
    """The registered or timm-style names closest to a misspelt one."""
    import difflib

    timm = [f"vit_{size}_patch{p}_{r}" for size in _LONG for p in (8, 14, 16, 32) for r in (224, 384, 448, 518)]
    return difflib.get_close_matches(name.strip().lower(), [*_REGISTRY, *timm], n=2, cutoff=0.75)


def _create_pretrained(name: str, overrides: dict[str, Any]) -> nn.Module:
    """create_model(name, pretrained=True): the tag's hub repo through the registered checkpoint loader (vitkit's
    load_pretrained), with the GELU and LayerNorm eps the name's architecture has (a timm file records neither)."""
    entry = pretrained_tag(name)
    other = sorted(set(overrides) - {"num_classes", "img_size", "revision"})
    if other:
        raise ValueError(f"create_model({name!r}, pretrained=True): {', '.join(other)} would change the architecture "
                         "the weights were trained for; it takes num_classes and img_size (a new head, E_pos "
                         "resampled: paper §3.2) and revision")
    spec = {**name_overrides(entry.name), **SPECS.get(canonical_name(entry.name), ({}, {}))[0]}
    model = load_checkpoint(entry.hf_hub_id, **{k: spec[k] for k in ("gelu", "ln_eps") if k in spec}, **overrides)
    extra = getattr(model.config, "extra", None)
    if isinstance(extra, dict):
        extra.setdefault("pretrained", {}).update(tag=entry.tag, hf_hub_id=entry.hf_hub_id, license=entry.license)
    return model


def create_model(name: str, pretrained: bool = False, **overrides: Any) -> nn.Module:
    """Build a registered model by name; keyword overrides replace config fields (e.g. num_classes=10), and
    timm's keywords mean the same here (`drop_path_rate`, `drop_rate`, `attn_drop_rate`, `global_pool`,
    `class_token`, `reg_tokens`, `img_size`, `in_chans`, `num_classes`). A timm name keeps its resolution
    (`vit_base_patch16_384` is a 384-px model) and timm's exact GELU. `pretrained=True` loads the weights of timm's
    `name.tag` (the name's default tag without one) from the hub repo timm uses (models/pretrained_tags.py), taking
    `num_classes`, `img_size` (§3.2) and `revision`."""
    if pretrained:
        return _create_pretrained(name, overrides)
    key = canonical_name(name)
    if key in REFUSED:
        raise ValueError(f"{name!r}: {REFUSED[key]}, so vitkit does not build it")
    m = _TIMM_NAME.fullmatch(name.strip().lower())
    if m and int(m.group(3)) % int(m.group(2)):  # a typo read as a resolution (vit_base_patch16_2244)
        raise ValueError(f"unknown model {name!r}: {m.group(3)} px is not a whole number of {m.group(2)}-px patches; "
                         f"did you mean {' or '.join(map(repr, _nearest(name)))}?")
    if key not in _REGISTRY:
        near = _nearest(name)
        close = near + [n for n in _REGISTRY if key.split("_")[0] in n and n not in near][:8 - len(near)]
        hint = ""
        if "." in name:
            hint = "; a '.tag' names pretrained weights: pass pretrained=True (vitkit.list_pretrained())"
        elif re.match(r"vit_(tiny|small|base|large|huge)_patch\d+", key):
            hint = "; timm names are vit_{size}_patch{P}_{resolution}, without further suffixes"
        raise ValueError(f"unknown model {name!r}{hint}; known names include {close or list_models()[:8]}")
    # timm's global_pool='avg' keeps the model's class token: every registered ViT has one but the axial ones
    overrides = _timm_sizes(key, overrides) if not key.startswith("bit") else overrides
    spec = SPECS.get(key, ({"class_token": not key.startswith("axial"), "pooling": "token"}, {}))[0]
    kwargs = {**name_overrides(name), **_timm_kwargs(overrides, spec.get("class_token", True),
                                                      spec.get("pooling", "token"))}
    try:
        return _REGISTRY[key](**kwargs)
    except TypeError as e:  # an unknown keyword: named, with what is accepted
        m = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        if not m:
            raise
        cfg = BiTConfig if key.startswith("bit") else ViTConfig
        known = sorted(set(cfg.__dataclass_fields__) | set(TIMM_KWARGS) | {"global_pool", "class_token", "mlp_ratio",
                                                                         "act_layer"})
        raise ValueError(f"create_model({name!r}): unknown keyword {m.group(1)!r}; it takes {', '.join(known)}") from e
