"""transformers folders of the ViT families beside `ViTModel` (DeiT, DINOv2 with and without registers, CLIP and
SigLIP vision towers, ViTMAE), read and written: what every family's class shares. What is particular to each
family (its config fields, key map, tensor shapes, the class a model is written as) is in its file in
formats/families/, found through the registry by config.json's model_type or by the option that marks the model.

Every value comes from config.json (eps, GELU, LayerScale's init) or the tensors; a head or option vitkit's ViT
does not have (Dinov2's classifier on [class, mean of patches], SwiGLU, DeiT's single-head classifier) is refused
by name. HF writes these families in its "classic" layout (`encoder.layer.N.attention.attention.query`, as
transformers' save_pretrained does) or the CLIP-style `encoder.layers.N.self_attn.q_proj`; both are read.
Written (`write_family`): the option that marks a family picks the class; what the class cannot hold is named. One
key table per family (its `hf_table`) serves both directions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats import families
from vitkit.formats.common import (
    ACT_NAMES,
    Choices,
    built_to_load,
    check_config_numbers,
    config_count,
    gather_state,
    load_state_checked,
    resample_warning,
    split_chunks,
)
from vitkit.formats.families.family import ACTS, PLAIN, Family
from vitkit.formats.writable import check_consumed, table_keys
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils import to_pair


def is_family(doc: dict[str, Any]) -> bool:
    return families.family_of_hf_type(doc.get("model_type")) is not None


def _family(kind: str) -> Family:
    fam = families.family_of_hf_type(kind)
    if fam is None:
        raise ValueError(f"{kind!r} is not the model_type of a family's transformers class")
    return fam


def load_hf_family(doc: dict[str, Any], state: dict[str, torch.Tensor], wpath: Path, hints: dict[str, Any] | None,
                   assumed: dict[str, str] | None = None) -> VisionTransformer:
    """A transformers folder of a family (its config.json `doc` and weights `state`) as a vitkit ViT;
    `assumed`: what the caller takes as given beyond the weights (logged and kept with the rest)."""
    kind = doc["model_type"]
    fam = _family(kind)
    vc = fam.hf_vision_config(doc)
    check_config_numbers(vc, wpath)
    choices = Choices(wpath, hints)
    act = vc.get("hidden_act", "gelu")
    if act not in ACTS:
        raise ValueError(f"{wpath}: hidden_act {act!r} is not a GELU vitkit builds ({sorted(ACTS)})")
    width, depth_cfg = config_count(vc, "hidden_size", 768, wpath), vc.get("num_hidden_layers", 12)
    ph, pw = to_pair(vc.get("patch_size", 16), f"{wpath}: patch_size")
    if ph != pw:
        raise ValueError(f"{wpath}: non-square patches {ph}x{pw} are not supported")
    common = dict(img_size=to_pair(vc.get("image_size", 224), f"{wpath}: image_size"), patch_size=ph,
                  in_chans=config_count(vc, "num_channels", 3, wpath), width=width,
                  num_heads=config_count(vc, "num_attention_heads", 12, wpath),
                  qkv_bias=bool(vc.get("qkv_bias", True)),
                  gelu=choices.pick("gelu", ACTS[act]), name=kind)
    src = dict(state)
    read = fam.hf_read(kind, vc, src, common, choices, wpath)
    cfg, depth = read.cfg, read.cfg.depth
    if depth != depth_cfg:
        raise ValueError(f"{wpath}: num_hidden_layers is {depth_cfg!r} but the weights hold {depth} layers")
    # config.json's sizes must be the tensors' own, checked before a model is built from them (a hostile
    # hidden_size would otherwise allocate gigabytes first)
    for what, suffixes, want in (("hidden_size", ("patch_embeddings.projection.weight", "patch_embedding.weight"),
                                  cfg.width),
                                 ("intermediate_size", (".0.mlp.fc1.weight", ".0.intermediate.dense.weight"), cfg.mlp_dim)):
        found = next((t for k, t in src.items() if k.endswith(suffixes) and k not in read.ignore), None)
        if found is not None and found.shape[0] != want:
            raise ValueError(f"{wpath}: {what} is {want} but the weights are {found.shape[0]} wide")
    choices.pick("pooling", cfg.pooling)
    choices.assumed.update(assumed or {})
    cfg = choices.record(cfg)
    if fam.keeps_table and cfg.posemb == "learn1d":  # its table as it came, whatever size the model runs at
        cfg = cfg.replace(posemb_grid=cfg.grid_size)
    model = built_to_load(VisionTransformer, cfg)
    table = fam.hf_table(kind, cfg, read.base, read.current)
    state = gather_state(src, table, model.state_dict(), wpath, lambda _k, t: t, lambda _k, s: s, read.ignore)
    load_state_checked(model, state, wpath)
    return model



# ----------------------------------------------------------------------------- writing
def _writer(cfg: ViTConfig) -> tuple[Family, str] | None:
    """The family and model_type a vitkit ViT is written as: the first family whose option marks it."""
    return next(((f, k) for f in families.FAMILIES if (k := f.hf_kind(cfg)) is not None), None)


def hf_family(cfg: ViTConfig) -> str | None:
    """The transformers model_type a vitkit ViT is written as, picked by the option that marks its family; None: a
    plain ViT (ViTModel, hf.py)."""
    found = _writer(cfg)
    return None if found is None else found[1]


def family_problems(kind: str, model: VisionTransformer) -> list[str]:
    """What keeps `model` from being transformers' class of `kind` (empty: it is one)."""
    cfg, fam = model.config, _family(kind)
    want = {k: v for k, v in {**PLAIN, **fam.hf_shapes[kind]}.items() if v is not None}
    out = [f"{k}={getattr(cfg, k)!r} (transformers: {v!r})" for k, v in want.items() if getattr(cfg, k) != v]
    h, w = cfg.table_img_size
    if h != w and fam.hf_square_only:
        out.append(f"a {h}x{w} input (the config's image_size is square)")
    return out + fam.hf_problems(kind, model)


def family_config(kind: str, model: VisionTransformer) -> dict[str, Any]:
    """config.json of transformers' class for a `kind` model (`family_problems` empty)."""
    cfg, fam = model.config, _family(kind)
    h, w = cfg.table_img_size  # the table's own size; square except where the class holds [h, w] (family_problems)
    doc: dict[str, Any] = {
        "architectures": [fam.hf_class_name(kind, cfg)], "model_type": kind, "hidden_size": cfg.width,
        "num_hidden_layers": cfg.depth, "num_attention_heads": cfg.num_heads, "hidden_act": ACT_NAMES[cfg.gelu],
        "layer_norm_eps": cfg.ln_eps, "image_size": h if h == w else [h, w],
        "patch_size": cfg.patch_size, "num_channels": cfg.in_chans, "initializer_range": 0.02, "torch_dtype": "float32"}
    doc.update(fam.hf_config(kind, model))
    return doc


def write_family(model: VisionTransformer) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """config.json and the tensors (transformers' keys and shapes) of `model` as its family's transformers class
    (`hf_family`); refused with every reason when the class cannot hold it."""
    cfg = model.config
    found = _writer(cfg)
    if found is None:
        raise ValueError("a plain ViT is written as transformers' ViTModel (vitkit.formats.hf), not as a family")
    fam, kind = found
    problems = family_problems(kind, model)
    if problems:
        raise ValueError(f"cannot save as a Hugging Face {fam.hf_class_name(kind, cfg)} (the transformers class for "
                         f"this model's family): " + "; ".join(problems))
    base = fam.hf_write_base(kind, cfg)
    own = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    table = fam.hf_table(kind, cfg, base)
    check_consumed(model, table_keys(table), "hf")
    out = split_chunks(own, table)
    fam.hf_tensors(kind, cfg, base, out)
    resample_warning(cfg, fam.hf_resample(kind), f"transformers' {fam.hf_class_name(kind, cfg)}")
    return family_config(kind, model), {k: v.contiguous() for k, v in out.items()}
