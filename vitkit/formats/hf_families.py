"""Hugging Face folders of the ViT families beside `ViTModel`, read and written: DeiT, DINOv2 (with registers),
CLIP and SigLIP vision towers, ViTMAE.

| model_type (transformers class) | read as (`ViTConfig`) |
|---|---|
| `deit` (`DeiTForImageClassificationWithTeacher`, `DeiTModel`) | `distill_token`: class and distillation tokens, two heads averaged at inference |
| `dinov2` (`Dinov2Model`) | LayerScale (`layer_scale1.lambda1`), the mask token ignored (inference does not use it) |
| `dinov2_with_registers` (`Dinov2WithRegistersModel`) | DINOv2 with `num_registers` register tokens after the class token |
| `clip_vision_model`, `clip` (`CLIPVisionModel[WithProjection]`, `CLIPModel`'s vision tower) | `pre_norm`, no patch bias, QuickGELU from `hidden_act`; `post_layernorm` as the final LN (HF applies it to the pooled class token only: the pooled output is equal, and `last_hidden_state` is vitkit's last block output); `visual_projection` as a head with a zero bias |
| `siglip_vision_model`, `siglip` (`SiglipVisionModel`, `SiglipModel`'s vision tower) | no class token, MAP pooling (`head.attention.in_proj` split into vitkit's q and kv) |
| `vit_mae` (`ViTMAEModel`, `ViTMAEForPreTraining`'s encoder) | the encoder with its fixed sin-cos table as stored; the decoder is left out; no masking at inference |

Every value comes from config.json (eps, GELU, LayerScale's init) or the tensors; a head or option vitkit's ViT
does not have (Dinov2's classifier on [class, mean of patches], SwiGLU, DeiT's single-head classifier) is refused
by name. HF writes these families in its "classic" layout (`encoder.layer.N.attention.attention.query`, as
transformers' save_pretrained does) or the CLIP-style `encoder.layers.N.self_attn.q_proj`; both are read.

Written (`write_family`): the option that marks a family picks the class -- LayerScale `Dinov2[WithRegisters]Model`,
a distillation token `DeiTForImageClassificationWithTeacher` (`DeiTModel` without classes), `pre_norm`
`CLIPVisionModel[WithProjection]`, MAP pooling `SiglipVisionModel`; what the class cannot hold is named. An MAE
encoder is a plain ViT and is written as `ViTModel` (hf.py): `ViTMAEModel` masks and shuffles patches at inference.
One key table per family (`family_table`) serves both directions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import (
    HF_ACTS,
    Choices,
    KeyTable,
    gather_state,
    load_state_checked,
    resample_warning,
    split_chunks,
)
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils import to_pair

FAMILIES = ("deit", "dinov2", "dinov2_with_registers", "clip_vision_model", "clip", "siglip_vision_model", "siglip",
            "vit_mae")
ACTS = {**HF_ACTS, "quick_gelu": "quick"}  # transformers' hidden_act -> vitkit's GELU
ACT_NAMES = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}  # vitkit's GELU -> hidden_act

# per-block module names (relative to the block prefix) -> vitkit's
VIT_BLOCK = {"layernorm_before": "norm1", "attention.attention.query": "q", "attention.attention.key": "k",
             "attention.attention.value": "v", "attention.output.dense": "attn.proj", "layernorm_after": "norm2",
             "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
VIT_BLOCK_CURRENT = {"layernorm_before": "norm1", "attention.q_proj": "q", "attention.k_proj": "k",
                     "attention.v_proj": "v", "attention.o_proj": "attn.proj", "layernorm_after": "norm2",
                     "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
DINO_BLOCK = {"norm1": "norm1", "attention.attention.query": "q", "attention.attention.key": "k",
              "attention.attention.value": "v", "attention.output.dense": "attn.proj", "norm2": "norm2",
              "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2", "layer_scale1": "ls1", "layer_scale2": "ls2"}
CLIP_BLOCK = {"layer_norm1": "norm1", "self_attn.q_proj": "q", "self_attn.k_proj": "k", "self_attn.v_proj": "v",
              "self_attn.out_proj": "attn.proj", "layer_norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
CLIP_KINDS, SIGLIP_KINDS = ("clip_vision_model", "clip"), ("siglip_vision_model", "siglip")


def is_family(doc: dict[str, Any]) -> bool:
    return doc.get("model_type") in FAMILIES


def _vision(doc: dict[str, Any]) -> dict[str, Any]:
    """The vision tower's config: the document itself, or a dual-encoder's `vision_config`."""
    if doc["model_type"] in ("clip", "siglip"):
        vc = doc.get("vision_config")
        if not isinstance(vc, dict):
            raise ValueError(f"a {doc['model_type']} config.json without a vision_config")
        return vc
    return doc


def _base(state: dict[str, torch.Tensor], candidates: tuple[str, ...]) -> str:
    return next((b for b in candidates if any(k.startswith(b + "embeddings.") for k in state)), "")


def _block_table(cfg: ViTConfig, prefix: str, names: dict[str, str]) -> KeyTable:
    """(vitkit key, HF key, kind) of every block tensor; q/k/v are chunks of vitkit's fused qkv."""
    table: KeyTable = []
    for i in range(cfg.depth):
        for hf, ours in names.items():
            key = f"{prefix}{i}.{hf}"
            if ours in ("q", "k", "v"):
                params = ("weight", "bias") if cfg.qkv_bias else ("weight",)
                table += [(f"blocks.{i}.attn.qkv.{p}#{'qkv'.index(ours)}", f"{key}.{p}", "same") for p in params]
            elif ours.startswith("ls"):
                table.append((f"blocks.{i}.{ours}.gamma", f"{key}.lambda1", "same"))
            else:
                table += [(f"blocks.{i}.{ours}.{p}", f"{key}.{p}", "same") for p in ("weight", "bias")]
    return table


def family_table(kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
    """(vitkit key, transformers key, kind) of every tensor of a `kind` model (a `FAMILIES` model_type) shaped
    as `cfg`, its modules under `base` (e.g. "deit.", "vision_model."); `current`: transformers 5's
    `layers.N.attention.q_proj` names for the ViT-style blocks. Where transformers' tensor has another shape or
    split (CLIP's class embedding and E_pos without the batch axis, SigLIP's fused in_proj, CLIP's bias-free
    projection), the table names the tensor as vitkit holds it; the reader and `write_family` convert."""
    pairs: list[tuple[str, str]]
    if kind in CLIP_KINDS or kind in SIGLIP_KINDS:
        e = f"{base}embeddings."
        pairs = [("pos_embed", f"{e}position_embedding.weight"), ("patch_embed.proj.weight", f"{e}patch_embedding.weight"),
                 ("norm.weight", f"{base}post_layernorm.weight"), ("norm.bias", f"{base}post_layernorm.bias")]
        table = _block_table(cfg, f"{base}encoder.layers.", CLIP_BLOCK)
        if kind in CLIP_KINDS:
            pairs += [("cls_token", f"{e}class_embedding"), ("norm_pre.weight", f"{base}pre_layrnorm.weight"),
                      ("norm_pre.bias", f"{base}pre_layrnorm.bias")]
            if cfg.num_classes:  # CLIP's image embedding: the projection of the pooled token
                pairs += [("head.weight", "visual_projection.weight"), ("head.bias", "visual_projection.bias")]
        else:
            h = f"{base}head."
            pairs += [("patch_embed.proj.bias", f"{e}patch_embedding.bias"), ("map_head.probe", f"{h}probe")]
            for ours, theirs in (("q", "q"), ("kv", "kv"), ("proj", "attention.out_proj"), ("norm", "layernorm"),
                                 ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
                pairs += [(f"map_head.{ours}.{p}", f"{h}{theirs}.{p}") for p in ("weight", "bias")]
        return [(ours, theirs, "same") for ours, theirs in pairs] + table
    e = f"{base}embeddings."
    pairs = [("cls_token", f"{e}cls_token"), ("pos_embed", f"{e}position_embeddings"),
             ("patch_embed.proj.weight", f"{e}patch_embeddings.projection.weight"),
             ("patch_embed.proj.bias", f"{e}patch_embeddings.projection.bias"),
             ("norm.weight", f"{base}layernorm.weight"), ("norm.bias", f"{base}layernorm.bias")]
    if kind.startswith("dinov2"):
        names, prefix = DINO_BLOCK, f"{base}encoder.layer."
    else:
        names, prefix = (VIT_BLOCK_CURRENT, f"{base}layers.") if current else (VIT_BLOCK, f"{base}encoder.layer.")
    if cfg.num_registers:
        pairs.append(("reg_token", f"{e}register_tokens"))
    if cfg.distill_token:
        pairs.append(("dist_token", f"{e}distillation_token"))
        if cfg.num_classes:
            pairs += [(f"head.{p}", f"cls_classifier.{p}") for p in ("weight", "bias")]
            pairs += [(f"head_dist.{p}", f"distillation_classifier.{p}") for p in ("weight", "bias")]
    return [(ours, theirs, "same") for ours, theirs in pairs] + _block_table(cfg, prefix, names)


def config_count(vc: dict[str, Any], key: str, default: int, where: Path, kind: type = int) -> Any:
    """config.json's `key`: a whole number (`kind` float: any positive number), or an error naming it."""
    v = vc.get(key, default)
    ok = isinstance(v, int) if kind is int else isinstance(v, (int, float)) and v > 0
    if isinstance(v, bool) or not ok:
        raise ValueError(f"{where}: config.json {key} is {v!r}, expected a {'whole' if kind is int else 'positive'} "
                         "number")
    return v


# config.json numbers a ViT reads: (key, whole number?, may be 0); a string, a bool or a value out of range is
# refused naming the file and the key (never Python's "could not convert string to float")
CONFIG_NUMBERS = (("hidden_size", True, False), ("num_hidden_layers", True, False), ("num_attention_heads", True, False),
                  ("intermediate_size", True, False), ("num_channels", True, False), ("num_register_tokens", True, True),
                  ("layer_norm_eps", False, False), ("layerscale_value", False, True), ("mlp_ratio", False, False))


def check_config_numbers(vc: dict[str, Any], where: Path) -> None:
    """Every number of `CONFIG_NUMBERS` that config.json holds is one, of the right kind and range."""
    for key, whole, zero in CONFIG_NUMBERS:
        if key not in vc or vc[key] is None:
            continue
        v = vc[key]
        ok = not isinstance(v, bool) and (isinstance(v, int) if whole else isinstance(v, (int, float)) and
                                          math.isfinite(v)) and (v > 0 or (zero and v == 0))
        if not ok:
            want = f"whole number {'>= 0' if zero else '> 0'}" if whole else f"positive{' (or 0)' if zero else ''} number"
            raise ValueError(f"{where}: config.json {key} is {v!r}, expected a {want}")


def _depth(state: dict[str, torch.Tensor], prefix: str) -> int:
    return len({k[len(prefix):].split(".", 1)[0] for k in state if k.startswith(prefix)})


def load_hf_family(doc: dict[str, Any], state: dict[str, torch.Tensor], wpath: Path, hints: dict[str, Any] | None,
                   assumed: dict[str, str] | None = None) -> VisionTransformer:
    """A transformers folder of one of `FAMILIES` (its config.json `doc` and weights `state`) as a vitkit ViT;
    `assumed`: what the caller takes as given beyond the weights (logged and kept with the rest)."""
    kind = doc["model_type"]
    vc = _vision(doc)
    check_config_numbers(vc, wpath)
    choices = Choices(wpath, hints)
    act = vc.get("hidden_act", "gelu")
    if act not in ACTS:
        raise ValueError(f"{wpath}: hidden_act {act!r} is not a GELU vitkit builds ({sorted(ACTS)})")
    if vc.get("use_swiglu_ffn"):
        raise ValueError(f"{wpath}: use_swiglu_ffn (a SwiGLU MLP, DINOv2 giant) is not a model vitkit builds")
    width, depth_cfg = config_count(vc, "hidden_size", 768, wpath), vc.get("num_hidden_layers", 12)
    ph, pw = to_pair(vc.get("patch_size", 16), f"{wpath}: patch_size")
    if ph != pw:
        raise ValueError(f"{wpath}: non-square patches {ph}x{pw} are not supported")
    dino = kind.startswith("dinov2")
    common = dict(img_size=to_pair(vc.get("image_size", 224), f"{wpath}: image_size"), patch_size=ph,
                  in_chans=config_count(vc, "num_channels", 3, wpath), width=width,
                  num_heads=config_count(vc, "num_attention_heads", 12, wpath),
                  mlp_dim=(int(width * config_count(vc, "mlp_ratio", 4, wpath, float)) if dino
                           else config_count(vc, "intermediate_size", 3072, wpath)),
                  qkv_bias=bool(vc.get("qkv_bias", True)),
                  gelu=choices.pick("gelu", ACTS[act]), name=kind)
    src = dict(state)
    ignore: set[str] = set()
    current = False
    extra: dict[str, Any] = {}
    classes = 0
    if kind in ("deit", "vit_mae") or dino:
        base = _base(src, ("deit.", "vit.", "dinov2.", "dinov2_with_registers.", ""))
        e = f"{base}embeddings."
        current = not dino and not any(k.startswith(f"{base}encoder.layer.") for k in src)
        depth = _depth(src, f"{base}layers." if current else f"{base}encoder.layer.")
        if kind == "deit":
            if "classifier.weight" in src:
                raise ValueError(f"{wpath}: DeiTForImageClassification classifies from the class token alone beside a "
                                 "distillation token; vitkit's distilled ViT averages two heads "
                                 "(DeiTForImageClassificationWithTeacher)")
            if "cls_classifier.weight" in src:
                classes = int(src["cls_classifier.weight"].shape[0])
            ignore |= {f"{base}pooler.dense.weight", f"{base}pooler.dense.bias"}  # a pooler no classifier uses
            extra["distill_token"] = True
        elif dino:
            if "classifier.weight" in src:
                raise ValueError(f"{wpath}: {kind} image classification's classifier reads [class token, mean of the "
                                 "patches] (2 x hidden_size): not a head vitkit's ViT has; load the backbone model")
            ignore.add(f"{e}mask_token")  # used only by masked pre-training
            extra["layer_scale"] = float(choices.pick("layer_scale", vc.get("layerscale_value"), 1.0,
                                                      f"transformers' {kind} config default layerscale_value"))
            if kind == "dinov2_with_registers":  # its E_pos is resampled antialiased, Dinov2Model's not
                extra.update(num_registers=config_count(vc, "num_register_tokens", 4, wpath), posemb_resample="bicubic_antialias")
        else:  # vit_mae: the encoder; ViTMAEForPreTraining's decoder reconstructs pixels and is not a classifier
            ignore |= {k for k in src if k.startswith("decoder.")}
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-6 if dino else 1e-12,
                           f"transformers' {kind} config default layer_norm_eps")
        cfg = ViTConfig(**common, depth=depth, num_classes=classes, pooling="token", ln_eps=float(eps), **extra)
    elif kind in CLIP_KINDS:
        base = _base(src, ("vision_model.", ""))
        e = f"{base}embeddings."
        depth = _depth(src, f"{base}encoder.layers.")
        src[f"{e}class_embedding"] = src[f"{e}class_embedding"].reshape(1, 1, -1)
        src[f"{e}position_embedding.weight"] = src[f"{e}position_embedding.weight"][None]
        if "visual_projection.weight" in src:  # a bias-free projection: vitkit's head with a zero bias
            classes = int(src["visual_projection.weight"].shape[0])
            src["visual_projection.bias"] = src["visual_projection.weight"].new_zeros(classes)
        ignore |= {k for k in src if k.startswith(("text_model.", "text_projection.", "logit_scale"))}
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-5, "transformers' CLIPVisionConfig default")
        cfg = ViTConfig(**common, depth=depth, num_classes=classes, pooling="token", pre_norm=True, patch_bias=False,
                        ln_eps=float(eps))
    else:  # siglip
        base = _base(src, ("vision_model.", ""))
        e = f"{base}embeddings."
        depth = _depth(src, f"{base}encoder.layers.")
        if f"{base}head.probe" not in src:
            raise ValueError(f"{wpath}: a SigLIP vision tower without its attention-pooling head (vision_use_head = "
                             "false) has no pooled output vitkit can reproduce")
        src[f"{e}position_embedding.weight"] = src[f"{e}position_embedding.weight"][None]
        w, b = src.pop(f"{base}head.attention.in_proj_weight"), src.pop(f"{base}head.attention.in_proj_bias")
        src.update({f"{base}head.q.weight": w[:width], f"{base}head.kv.weight": w[width:],
                    f"{base}head.q.bias": b[:width], f"{base}head.kv.bias": b[width:]})
        ignore |= {k for k in src if k.startswith(("text_model.", "logit_scale", "logit_bias"))}
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-6, "transformers' SiglipVisionConfig default")
        cfg = ViTConfig(**common, depth=depth, num_classes=0, pooling="map", ln_eps=float(eps))
    if depth != depth_cfg:
        raise ValueError(f"{wpath}: num_hidden_layers is {depth_cfg!r} but the weights hold {depth} layers")
    # config.json's sizes must be the tensors' own, checked before a model is built from them (a hostile
    # hidden_size would otherwise allocate gigabytes first)
    for what, suffixes, want in (("hidden_size", ("patch_embeddings.projection.weight", "patch_embedding.weight"),
                                  cfg.width),
                                 ("intermediate_size", (".0.mlp.fc1.weight", ".0.intermediate.dense.weight"), cfg.mlp_dim)):
        found = next((t for k, t in src.items() if k.endswith(suffixes) and "decoder" not in k and "text" not in k),
                     None)
        if found is not None and found.shape[0] != want:
            raise ValueError(f"{wpath}: {what} is {want} but the weights are {found.shape[0]} wide")
    choices.pick("pooling", cfg.pooling)
    choices.assumed.update(assumed or {})
    cfg = choices.record(cfg)
    model = VisionTransformer(cfg)
    table = family_table(kind, cfg, base, current)
    state = gather_state(src, table, model.state_dict(), wpath, lambda _k, t: t, lambda _k, s: s, ignore)
    load_state_checked(model, state, wpath)
    return model


# ----------------------------------------------------------------------------- writing
# What a plain ViT (transformers' ViTModel) has; each family below changes some of it.
PLAIN = {"pooling": "token", "class_token": True, "posemb": "learn1d", "posemb_placement": "input", "block": "global",
         "num_registers": 0, "distill_token": False, "fc_norm": False, "layer_scale": None, "pre_norm": False,
         "patch_bias": True, "representation_size": None, "resnet_layers": None}
# model_type -> (the option values transformers' class holds, beside PLAIN's; None: any value)
FAMILY_SHAPE: dict[str, dict[str, Any]] = {
    "dinov2": {"layer_scale": None, "num_classes": 0},
    "dinov2_with_registers": {"layer_scale": None, "num_registers": None, "num_classes": 0},
    "deit": {"distill_token": True},
    "clip_vision_model": {"pre_norm": True, "patch_bias": False, "qkv_bias": True},
    "siglip_vision_model": {"pooling": "map", "class_token": False, "qkv_bias": True, "num_classes": 0},
}
WRITE_BASE = {"dinov2": "", "dinov2_with_registers": "", "clip_vision_model": "vision_model.",
              "siglip_vision_model": "vision_model."}


def hf_family(cfg: ViTConfig) -> str | None:
    """The transformers model_type a vitkit ViT is written as, picked by the option that marks its family; None: a
    plain ViT (ViTModel, hf.py)."""
    if cfg.layer_scale is not None:
        return "dinov2_with_registers" if cfg.num_registers else "dinov2"
    if cfg.distill_token:
        return "deit"
    if cfg.pre_norm:
        return "clip_vision_model"
    if cfg.pooling == "map":
        return "siglip_vision_model"
    return None


def _class_name(kind: str, cfg: ViTConfig) -> str:
    if kind == "deit":
        return "DeiTForImageClassificationWithTeacher" if cfg.num_classes else "DeiTModel"
    if kind == "clip_vision_model":
        return "CLIPVisionModelWithProjection" if cfg.num_classes else "CLIPVisionModel"
    return {"dinov2": "Dinov2Model", "dinov2_with_registers": "Dinov2WithRegistersModel",
            "siglip_vision_model": "SiglipVisionModel"}[kind]


def family_problems(kind: str, model: VisionTransformer) -> list[str]:
    """What keeps `model` from being transformers' class of `kind` (empty: it is one)."""
    cfg = model.config
    want = {k: v for k, v in {**PLAIN, **FAMILY_SHAPE[kind]}.items() if v is not None}
    out = [f"{k}={getattr(cfg, k)!r} (transformers: {v!r})" for k, v in want.items() if getattr(cfg, k) != v]
    h, w = cfg.img_size
    if h != w and kind != "deit":
        out.append(f"a {h}x{w} input (the config's image_size is square)")
    if kind.startswith("dinov2") and cfg.mlp_dim % cfg.width:
        out.append(f"mlp_dim={cfg.mlp_dim} is not a whole multiple of width={cfg.width} (Dinov2Config's mlp_ratio)")
    if kind == "clip_vision_model" and cfg.num_classes and bool(model.head.bias.detach().any()):
        out.append("a head with a bias (CLIP's visual_projection has none: a classifier fine-tuned on a CLIP tower "
                   "saves to timm or vitkit's format)")
    return out


def label_fields(model: VisionTransformer) -> dict[str, Any]:
    """config.json's id2label / label2id of a classifier: the model's class names, or transformers' LABEL_i."""
    k = model.config.num_classes
    if not k:
        return {}
    labels = list(model.preprocess.labels)
    labels = labels if len(labels) == k else [f"LABEL_{i}" for i in range(k)]
    return {"id2label": {str(i): lab for i, lab in enumerate(labels)}, "label2id": {lab: i for i, lab in enumerate(labels)}}


def family_config(kind: str, model: VisionTransformer) -> dict[str, Any]:
    """config.json of transformers' class for a `kind` model (`family_problems` empty)."""
    cfg = model.config
    h, w = cfg.img_size  # square except for DeiT (family_problems)
    doc: dict[str, Any] = {
        "architectures": [_class_name(kind, cfg)], "model_type": kind, "hidden_size": cfg.width,
        "num_hidden_layers": cfg.depth, "num_attention_heads": cfg.num_heads, "hidden_act": ACT_NAMES[cfg.gelu],
        "layer_norm_eps": cfg.ln_eps, "image_size": h if h == w else [h, w],
        "patch_size": cfg.patch_size, "num_channels": cfg.in_chans, "initializer_range": 0.02, "torch_dtype": "float32"}
    if kind.startswith("dinov2"):
        doc.update(mlp_ratio=cfg.mlp_dim // cfg.width, qkv_bias=cfg.qkv_bias, layerscale_value=cfg.layer_scale,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
                   use_swiglu_ffn=False)
        if cfg.num_registers:
            doc["num_register_tokens"] = cfg.num_registers
    elif kind == "deit":
        doc.update(intermediate_size=cfg.mlp_dim, qkv_bias=cfg.qkv_bias, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, encoder_stride=cfg.patch_size, pooler_output_size=cfg.width,
                   pooler_act="tanh", **label_fields(model))
    else:
        doc.update(intermediate_size=cfg.mlp_dim, attention_dropout=0.0)
        if kind == "clip_vision_model":
            doc.update(projection_dim=cfg.num_classes or 512, initializer_factor=1.0)
        else:
            doc["vision_use_head"] = True
    return doc


def write_family(model: VisionTransformer) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """config.json and the tensors (transformers' keys and shapes) of `model` as its family's transformers class
    (`hf_family`); refused with every reason when the class cannot hold it."""
    cfg = model.config
    kind = hf_family(cfg)
    if kind is None:
        raise ValueError("a plain ViT is written as transformers' ViTModel (vitkit.formats.hf), not as a family")
    problems = family_problems(kind, model)
    if problems:
        raise ValueError(f"cannot save as a Hugging Face {_class_name(kind, cfg)} (the transformers class for "
                         f"this model's family): " + "; ".join(problems))
    base = WRITE_BASE.get(kind, "deit." if cfg.num_classes else "")
    own = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out = split_chunks(own, family_table(kind, cfg, base))
    e = f"{base}embeddings."
    if kind.startswith("dinov2"):
        out[f"{e}mask_token"] = torch.zeros(1, cfg.width)  # masked pre-training only; unused here
    elif kind == "clip_vision_model":
        out[f"{e}class_embedding"] = out[f"{e}class_embedding"].reshape(-1)
        out[f"{e}position_embedding.weight"] = out[f"{e}position_embedding.weight"][0]
        out.pop("visual_projection.bias", None)  # zero (family_problems)
    elif kind == "siglip_vision_model":
        out[f"{e}position_embedding.weight"] = out[f"{e}position_embedding.weight"][0]
        h = f"{base}head."
        for p in ("weight", "bias"):
            out[f"{h}attention.in_proj_{p}"] = torch.cat([out.pop(f"{h}q.{p}"), out.pop(f"{h}kv.{p}")])
    how = "bicubic_antialias" if kind == "dinov2_with_registers" else "bicubic"
    resample_warning(cfg, how, f"transformers' {_class_name(kind, cfg)}")
    return family_config(kind, model), {k: v.contiguous() for k, v in out.items()}

