"""Hugging Face folders of the ViT families beside `ViTModel`, read: DeiT, DINOv2, CLIP and SigLIP vision towers,
ViTMAE.

| model_type (transformers class) | read as (`ViTConfig`) |
|---|---|
| `deit` (`DeiTForImageClassificationWithTeacher`, `DeiTModel`) | `distill_token`: class and distillation tokens, two heads averaged at inference |
| `dinov2` (`Dinov2Model`) | LayerScale (`layer_scale1.lambda1`), the mask token ignored (inference does not use it) |
| `clip_vision_model`, `clip` (`CLIPVisionModel[WithProjection]`, `CLIPModel`'s vision tower) | `pre_norm`, no patch bias, QuickGELU from `hidden_act`; `post_layernorm` as the final LN (HF applies it to the pooled class token only: the pooled output is equal, and `last_hidden_state` is vitkit's last block output); `visual_projection` as a bias-free head |
| `siglip_vision_model`, `siglip` (`SiglipVisionModel`, `SiglipModel`'s vision tower) | no class token, MAP pooling (`head.attention.in_proj` split into vitkit's q and kv) |
| `vit_mae` (`ViTMAEModel`, `ViTMAEForPreTraining`'s encoder) | the encoder with its fixed sin-cos table as stored; the decoder is left out; no masking at inference |

Every value comes from config.json (eps, GELU, LayerScale's init) or the tensors; a head or option vitkit's ViT
does not have (Dinov2's classifier on [class, mean of patches], SwiGLU, DeiT's single-head classifier) is refused
by name. HF writes these families in its "classic" layout (`encoder.layer.N.attention.attention.query`, as
transformers' save_pretrained does) or the CLIP-style `encoder.layers.N.self_attn.q_proj`; both are read.
Written: a ViT with LayerScale as `Dinov2Model` (`dinov2_table`, `dinov2_config`); the other families not yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import HF_ACTS, Choices, KeyTable, gather_state, load_state_checked
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils import to_pair

FAMILIES = ("deit", "dinov2", "clip_vision_model", "clip", "siglip_vision_model", "siglip", "vit_mae")
ACTS = {**HF_ACTS, "quick_gelu": "quick"}  # transformers' hidden_act -> vitkit's GELU

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


def _blocks(state: dict[str, torch.Tensor], prefix: str, names: dict[str, str], depth: int) -> KeyTable:
    """(vitkit key, HF key, kind) of every block tensor; q/k/v become chunks of vitkit's fused qkv."""
    table: KeyTable = []
    for i in range(depth):
        for hf, ours in names.items():
            for p in ("weight", "bias", "lambda1"):
                key = f"{prefix}{i}.{hf}.{p}"
                if key not in state:
                    continue
                if ours in ("q", "k", "v"):
                    table.append((f"blocks.{i}.attn.qkv.{p}#{'qkv'.index(ours)}", key, "same"))
                elif ours.startswith("ls"):
                    table.append((f"blocks.{i}.{ours}.gamma", key, "same"))
                else:
                    table.append((f"blocks.{i}.{ours}.{p}", key, "same"))
    return table


def _depth(state: dict[str, torch.Tensor], prefix: str) -> int:
    return len({k[len(prefix):].split(".", 1)[0] for k in state if k.startswith(prefix)})


def load_hf_family(doc: dict[str, Any], state: dict[str, torch.Tensor], wpath: Path, hints: dict[str, Any] | None,
                   assumed: dict[str, str] | None = None) -> VisionTransformer:
    """A transformers folder of one of `FAMILIES` (its config.json `doc` and weights `state`) as a vitkit ViT;
    `assumed`: what the caller takes as given beyond the weights (logged and kept with the rest)."""
    kind = doc["model_type"]
    vc = _vision(doc)
    choices = Choices(wpath, hints)
    act = vc.get("hidden_act", "gelu")
    if act not in ACTS:
        raise ValueError(f"{wpath}: hidden_act {act!r} is not a GELU vitkit builds ({sorted(ACTS)})")
    if vc.get("use_swiglu_ffn"):
        raise ValueError(f"{wpath}: use_swiglu_ffn (a SwiGLU MLP, DINOv2 giant) is not a model vitkit builds")
    width, depth_cfg = int(vc.get("hidden_size", 768)), vc.get("num_hidden_layers", 12)
    ph, pw = to_pair(vc.get("patch_size", 16), f"{wpath}: patch_size")
    if ph != pw:
        raise ValueError(f"{wpath}: non-square patches {ph}x{pw} are not supported")
    common = dict(img_size=to_pair(vc.get("image_size", 224), f"{wpath}: image_size"), patch_size=ph,
                  in_chans=int(vc.get("num_channels", 3)), width=width, num_heads=int(vc.get("num_attention_heads", 12)),
                  mlp_dim=int(width * vc.get("mlp_ratio", 4)) if kind == "dinov2" else int(vc.get("intermediate_size", 3072)),
                  qkv_bias=bool(vc.get("qkv_bias", True)),
                  gelu=choices.pick("gelu", ACTS[act]), name=kind)
    src = dict(state)
    ignore: set[str] = set()
    table: KeyTable
    if kind in ("deit", "vit_mae", "dinov2"):
        base = _base(src, ("deit.", "vit.", "dinov2.", ""))
        e = f"{base}embeddings."
        layout = VIT_BLOCK if any(k.startswith(f"{base}encoder.layer.") for k in src) else VIT_BLOCK_CURRENT
        prefix = f"{base}encoder.layer." if layout is VIT_BLOCK else f"{base}layers."
        if kind == "dinov2":
            layout = DINO_BLOCK
        depth = _depth(src, prefix)
        table = [("cls_token", f"{e}cls_token"), ("pos_embed", f"{e}position_embeddings"),
                 ("patch_embed.proj.weight", f"{e}patch_embeddings.projection.weight"),
                 ("patch_embed.proj.bias", f"{e}patch_embeddings.projection.bias"),
                 ("norm.weight", f"{base}layernorm.weight"), ("norm.bias", f"{base}layernorm.bias")]
        table += _blocks(src, prefix, layout, depth)
        extra: dict[str, Any] = {}
        classes = 0
        if kind == "deit":
            table.append(("dist_token", f"{e}distillation_token"))
            if "classifier.weight" in src:
                raise ValueError(f"{wpath}: DeiTForImageClassification classifies from the class token alone beside a "
                                 "distillation token; vitkit's distilled ViT averages two heads "
                                 "(DeiTForImageClassificationWithTeacher)")
            if "cls_classifier.weight" in src:
                classes = int(src["cls_classifier.weight"].shape[0])
                table += [(f"head.{p}", f"cls_classifier.{p}") for p in ("weight", "bias")]
                table += [(f"head_dist.{p}", f"distillation_classifier.{p}") for p in ("weight", "bias")]
            ignore |= {f"{base}pooler.dense.weight", f"{base}pooler.dense.bias"}  # a pooler no classifier uses
            extra["distill_token"] = True
        elif kind == "dinov2":
            if "classifier.weight" in src:
                raise ValueError(f"{wpath}: Dinov2ForImageClassification's classifier reads [class token, mean of the "
                                 "patches] (2 x hidden_size): not a head vitkit's ViT has; load the Dinov2Model")
            ignore.add(f"{e}mask_token")  # used only by masked pre-training
            extra["layer_scale"] = float(choices.pick("layer_scale", vc.get("layerscale_value"), 1.0,
                                                      "transformers' Dinov2Config default layerscale_value"))
        else:  # vit_mae: the encoder; ViTMAEForPreTraining's decoder reconstructs pixels and is not a classifier
            ignore |= {k for k in src if k.startswith("decoder.")}
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-6 if kind == "dinov2" else 1e-12,
                           f"transformers' {kind} config default layer_norm_eps")
        cfg = ViTConfig(**common, depth=depth, num_classes=classes, pooling="token", ln_eps=float(eps), **extra)
    elif kind in ("clip_vision_model", "clip"):
        base = _base(src, ("vision_model.", ""))
        e = f"{base}embeddings."
        prefix = f"{base}encoder.layers."
        depth = _depth(src, prefix)
        src[f"{e}class_embedding"] = src[f"{e}class_embedding"].reshape(1, 1, -1)
        src[f"{e}position_embedding.weight"] = src[f"{e}position_embedding.weight"][None]
        table = [("cls_token", f"{e}class_embedding"), ("pos_embed", f"{e}position_embedding.weight"),
                 ("patch_embed.proj.weight", f"{e}patch_embedding.weight"),
                 ("norm_pre.weight", f"{base}pre_layrnorm.weight"), ("norm_pre.bias", f"{base}pre_layrnorm.bias"),
                 ("norm.weight", f"{base}post_layernorm.weight"), ("norm.bias", f"{base}post_layernorm.bias")]
        table += _blocks(src, prefix, CLIP_BLOCK, depth)
        classes = 0
        if "visual_projection.weight" in src:  # CLIP's image embedding: a bias-free projection of the pooled token
            classes = int(src["visual_projection.weight"].shape[0])
            src["visual_projection.bias"] = src["visual_projection.weight"].new_zeros(classes)
            table += [("head.weight", "visual_projection.weight"), ("head.bias", "visual_projection.bias")]
        ignore |= {k for k in src if k.startswith(("text_model.", "text_projection.", "logit_scale"))}
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-5, "transformers' CLIPVisionConfig default")
        cfg = ViTConfig(**common, depth=depth, num_classes=classes, pooling="token", pre_norm=True, patch_bias=False,
                        ln_eps=float(eps))
    else:  # siglip
        base = _base(src, ("vision_model.", ""))
        e = f"{base}embeddings."
        prefix = f"{base}encoder.layers."
        depth = _depth(src, prefix)
        if f"{base}head.probe" not in src:
            raise ValueError(f"{wpath}: a SigLIP vision tower without its attention-pooling head (vision_use_head = "
                             "false) has no pooled output vitkit can reproduce")
        src[f"{e}position_embedding.weight"] = src[f"{e}position_embedding.weight"][None]
        w, b = src.pop(f"{base}head.attention.in_proj_weight"), src.pop(f"{base}head.attention.in_proj_bias")
        src.update({f"{base}head.q.weight": w[:width], f"{base}head.kv.weight": w[width:],
                    f"{base}head.q.bias": b[:width], f"{base}head.kv.bias": b[width:]})
        h = f"{base}head."
        table = [("pos_embed", f"{e}position_embedding.weight"),
                 ("map_head.probe", f"{h}probe"), ("norm.weight", f"{base}post_layernorm.weight"),
                 ("norm.bias", f"{base}post_layernorm.bias")]
        table += [(f"patch_embed.proj.{p}", f"{e}patch_embedding.{p}") for p in ("weight", "bias")]
        for ours, theirs in (("q", "q"), ("kv", "kv"), ("proj", "attention.out_proj"), ("norm", "layernorm"),
                             ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            table += [(f"map_head.{ours}.{p}", f"{h}{theirs}.{p}") for p in ("weight", "bias")]
        table += _blocks(src, prefix, CLIP_BLOCK, depth)
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
    own = model.state_dict()
    table = [t if len(t) == 3 else (*t, "same") for t in table]  # (vitkit key, HF key[, kind])
    state = gather_state(src, table, own, wpath, lambda _k, t: t, lambda _k, s: s, ignore)
    load_state_checked(model, state, wpath)
    return model


# ----------------------------------------------------------------------------- writing
def dinov2_problems(cfg: ViTConfig) -> list[str]:
    """What keeps a vitkit ViT from being transformers' `Dinov2Model` (empty: it is one). LayerScale is what marks
    the family; a model without it is a plain ViT (ViTModel) instead."""
    wrong = {"pooling": ("token", cfg.pooling), "posemb": ("learn1d", cfg.posemb),
             "posemb_placement": ("input", cfg.posemb_placement), "block": ("global", cfg.block),
             "num_registers": (0, cfg.num_registers), "distill_token": (False, cfg.distill_token),
             "fc_norm": (False, cfg.fc_norm), "pre_norm": (False, cfg.pre_norm), "patch_bias": (True, cfg.patch_bias),
             "representation_size": (None, cfg.representation_size), "resnet_layers": (None, cfg.resnet_layers),
             "num_classes": (0, cfg.num_classes), "gelu": ("exact", cfg.gelu)}
    out = [f"{k}={got!r} (Dinov2Model: {want!r})" for k, (want, got) in wrong.items() if got != want]
    if cfg.layer_scale is None:
        out.append("no LayerScale (a plain ViT: transformers' ViTModel)")
    if cfg.img_size[0] != cfg.img_size[1]:
        out.append(f"a {cfg.img_size[0]}x{cfg.img_size[1]} input (Dinov2Config's image_size is square)")
    if cfg.mlp_dim % cfg.width:
        out.append(f"mlp_dim={cfg.mlp_dim} is not a whole multiple of width={cfg.width} (Dinov2Config's mlp_ratio)")
    return out


def dinov2_table(cfg: ViTConfig) -> KeyTable:
    """(vitkit key, transformers key, kind) of every tensor of a DINOv2-shaped ViT, in transformers' own layout."""
    e = "embeddings."
    table: KeyTable = [("cls_token", f"{e}cls_token", "same"), ("pos_embed", f"{e}position_embeddings", "same"),
                       ("patch_embed.proj.weight", f"{e}patch_embeddings.projection.weight", "same"),
                       ("patch_embed.proj.bias", f"{e}patch_embeddings.projection.bias", "same"),
                       ("norm.weight", "layernorm.weight", "same"), ("norm.bias", "layernorm.bias", "same")]
    for i in range(cfg.depth):
        for hf, ours in DINO_BLOCK.items():
            key = f"encoder.layer.{i}.{hf}"
            if ours in ("q", "k", "v"):
                table += [(f"blocks.{i}.attn.qkv.{p}#{'qkv'.index(ours)}", f"{key}.{p}", "same") for p in ("weight", "bias")]
            elif ours.startswith("ls"):
                table.append((f"blocks.{i}.{ours}.gamma", f"{key}.lambda1", "same"))
            else:
                table += [(f"blocks.{i}.{ours}.{p}", f"{key}.{p}", "same") for p in ("weight", "bias")]
    return table


def dinov2_config(cfg: ViTConfig) -> dict[str, Any]:
    """config.json of transformers' Dinov2Model for a DINOv2-shaped ViT (`dinov2_problems` empty)."""
    return {"architectures": ["Dinov2Model"], "model_type": "dinov2", "hidden_size": cfg.width,
            "num_hidden_layers": cfg.depth, "num_attention_heads": cfg.num_heads, "mlp_ratio": cfg.mlp_dim // cfg.width,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "initializer_range": 0.02, "layer_norm_eps": cfg.ln_eps, "image_size": cfg.img_size[0],
            "patch_size": cfg.patch_size, "num_channels": cfg.in_chans, "qkv_bias": cfg.qkv_bias,
            "layerscale_value": cfg.layer_scale, "drop_path_rate": 0.0, "use_swiglu_ffn": False,
            "torch_dtype": "float32"}
