"""SigLIP image towers (Zhai et al. 2023): no class token, multi-head attention pooling (MAP, big_vision's MAPHead).

`ViTConfig.pooling="map"`. Layouts: timm's (`vit_*_siglip_*`: `attn_pool`, renamed by formats/timm.py),
transformers' `SiglipVisionModel` and `SiglipModel`'s vision tower (`head.attention.in_proj` split into vitkit's q
and kv), and big_vision's own `.npz` (`params/img/`), which formats/npz.py reads with the other big_vision files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import Choices, KeyTable, require
from vitkit.formats.families.family import (
    Family,
    HFRead,
    find_base,
    intermediate_size,
    tower_read,
    tower_table,
    vision_tower_config,
)
from vitkit.models.vit import VisionTransformer, ViTConfig


class SigLIP(Family):
    name = "SigLIP"
    paper = "Zhai et al. 2023"
    marks = "`pooling=\"map\"`, no class token"
    timm_names = "`vit_*_siglip_*`"
    own_layout = "big_vision's `.npz` (`params/img/`; read by formats/npz.py)"
    hf_bases = ("vision_model.",)  # SiglipModel's and SiglipVisionModel's image tower
    hf_model_types = ("siglip_vision_model", "siglip")
    hf_shapes = {"siglip_vision_model": {"pooling": "map", "class_token": False, "qkv_bias": True, "num_classes": 0}}

    def timm_fields(self, state: dict[str, torch.Tensor], args: dict[str, Any], path: Path, choices: Choices
                    ) -> dict[str, Any]:
        """timm's `attn_pool` (the MAP head): one latent query pooling the patches, no class token."""
        if "attn_pool.latent" not in state:
            return {}
        width = require(state, "patch_embed.proj.weight", path, 4).shape[0]
        if "cls_token" in state or tuple(state["attn_pool.latent"].shape) != (1, 1, width):
            raise ValueError(f"{path}: attention pooling with a class token or a latent of shape "
                             f"{tuple(state['attn_pool.latent'].shape)} is not a model vitkit builds (it pools patches "
                             "with one query)")
        return {"pooling": "map"}

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        return ["pooling='map' (attention pooling head)"] if cfg.pooling == "map" else []

    def timm_architecture(self, cfg: ViTConfig) -> str | None:
        return "vit_base_patch16_siglip_224" if cfg.pooling == "map" else None

    def hf_vision_config(self, doc: dict[str, Any]) -> dict[str, Any]:
        return vision_tower_config(doc, "siglip")

    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        if f"{find_base(src, (*self.hf_bases, ''))}head.probe" not in src:
            raise ValueError(f"{wpath}: a SigLIP vision tower without its attention-pooling head (vision_use_head = "
                             "false) has no pooled output vitkit can reproduce")
        base, depth, ignore = tower_read(src, self.hf_bases, ("text_model.", "logit_scale", "logit_bias"))
        width = common["width"]
        w, b = src.pop(f"{base}head.attention.in_proj_weight"), src.pop(f"{base}head.attention.in_proj_bias")
        src.update({f"{base}head.q.weight": w[:width], f"{base}head.kv.weight": w[width:],
                    f"{base}head.q.bias": b[:width], f"{base}head.kv.bias": b[width:]})
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-6, "transformers' SiglipVisionConfig default")
        cfg = ViTConfig(**common, mlp_dim=intermediate_size(vc, wpath), depth=depth, num_classes=0, pooling="map",
                        ln_eps=float(eps))
        return HFRead(cfg, base, ignore=ignore)

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        h = f"{base}head."
        pairs = [("patch_embed.proj.bias", f"{base}embeddings.patch_embedding.bias"), ("map_head.probe", f"{h}probe")]
        for ours, theirs in (("q", "q"), ("kv", "kv"), ("proj", "attention.out_proj"), ("norm", "layernorm"),
                             ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            pairs += [(f"map_head.{ours}.{p}", f"{h}{theirs}.{p}") for p in ("weight", "bias")]
        return tower_table(cfg, base, pairs)

    def hf_kind(self, cfg: ViTConfig) -> str | None:
        return "siglip_vision_model" if cfg.pooling == "map" else None

    def hf_class_name(self, kind: str, cfg: ViTConfig) -> str:
        return "SiglipVisionModel"

    def hf_write_base(self, kind: str, cfg: ViTConfig) -> str:
        return self.hf_bases[0]

    def hf_config(self, kind: str, model: VisionTransformer) -> dict[str, Any]:
        return {"intermediate_size": model.config.mlp_dim, "attention_dropout": 0.0, "vision_use_head": True}

    def hf_tensors(self, kind: str, cfg: ViTConfig, base: str, out: dict[str, torch.Tensor]) -> None:
        e, h = f"{base}embeddings.", f"{base}head."
        out[f"{e}position_embedding.weight"] = out[f"{e}position_embedding.weight"][0]
        for p in ("weight", "bias"):
            out[f"{h}attention.in_proj_{p}"] = torch.cat([out.pop(f"{h}q.{p}"), out.pop(f"{h}kv.{p}")])


FAMILY = SigLIP()
