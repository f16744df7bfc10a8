"""DeiT (Touvron et al. 2021, "Training data-efficient image transformers"): the distilled ViT.

A distillation token beside the class token, each with its own head, the two heads' logits averaged at inference
(`ViTConfig.distill_token`). Layouts: timm's (`deit_*_distilled_*`: `dist_token`, `head_dist`, read from the
shapes by formats/timm.py) and transformers' `DeiTForImageClassificationWithTeacher` / `DeiTModel` (its pooler,
dense + tanh on the class token, read as the representation layer `pre_logits`). DeiT's undistilled models are
plain ViTs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import Choices, KeyTable, label_fields, require
from vitkit.formats.families.family import Family, HFRead, intermediate_size, vit_style_read, vit_style_table
from vitkit.models.posemb import square_side
from vitkit.models.vit import VisionTransformer, ViTConfig


class DeiT(Family):
    name = "DeiT (distilled)"
    paper = "Touvron et al. 2021"
    marks = "`distill_token`"
    timm_names = "`deit_*_distilled_*`"
    hf_bases = ("deit.",)
    hf_model_types = ("deit",)
    hf_shapes = {"deit": {"distill_token": True}}
    hf_square_only = False  # DeiTConfig's image_size may be [h, w]

    def pooled_feature(self, cfg: Any) -> tuple[str, str] | None:
        """transformers' DeiTModel pooler_output where the model has the pooler's weights, else, for a transformers
        file, the class token; timm's files: the head's input (None)."""
        if not getattr(cfg, "distill_token", False):
            return None
        if cfg.representation_size:
            return "pre_logits", "DeiT: transformers' DeiTModel pooler_output (dense + tanh on the class token)"
        if getattr(cfg, "name", "") in self.hf_model_types:
            return "cls", ("DeiT: the file has no DeiTModel pooler weights, so the pooled feature is the class token "
                           "after the final LayerNorm")
        return None

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        return ["distill_token=True (DeiT's distillation token and head)"] if cfg.distill_token else []

    def timm_architecture(self, cfg: ViTConfig) -> str | None:
        return "deit_base_distilled_patch16_224" if cfg.distill_token else None

    def timm_fields(self, state: dict[str, torch.Tensor], args: dict[str, Any], path: Path, choices: Choices
                    ) -> dict[str, Any]:
        """A `dist_token`: the distilled ViT, a second class token with its own head (`head_dist`), E_pos rows for
        both tokens and the patches."""
        if "dist_token" not in state:
            return {}
        if not ("cls_token" in state and "head_dist.weight" in state):
            raise ValueError(f"{path}: a dist_token needs a cls_token and head_dist (DeiT's distilled ViT)")
        if square_side(require(state, "pos_embed", path, 3).shape[1]) is not None:
            raise ValueError(f"{path}: DeiT's distillation token with position embeddings for the patches only "
                             "(no_embed_class) is not a model vitkit builds")
        return {"distill_token": True}

    def timm_write_problems(self, cfg: ViTConfig) -> list[str]:
        if not cfg.distill_token:
            return []
        out = [f"num_registers={cfg.num_registers} beside DeiT's distillation token"] if cfg.num_registers else []
        if cfg.representation_size:
            out.append("a representation layer (transformers' DeiTModel pooler) beside DeiT's distillation token")
        return out

    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        base, current, depth = vit_style_read(src, self.hf_bases)
        if "classifier.weight" in src:
            raise ValueError(f"{wpath}: DeiTForImageClassification classifies from the class token alone beside a "
                             "distillation token; vitkit's distilled ViT averages two heads "
                             "(DeiTForImageClassificationWithTeacher)")
        classes = int(src["cls_classifier.weight"].shape[0]) if "cls_classifier.weight" in src else 0
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-12, f"transformers' {kind} config default "
                           "layer_norm_eps")
        pooler = {f"{base}pooler.dense.{p}" for p in ("weight", "bias")}
        rep = None
        if not classes and pooler <= set(src):  # DeiTModel's pooler (dense + pooler_act on the class token)
            if vc.get("pooler_act", "tanh") != "tanh":
                raise ValueError(f"{wpath}: pooler_act {vc.get('pooler_act')!r}; vitkit's representation layer "
                                 "(DeiTModel's pooler) is tanh")
            rep = int(src[f"{base}pooler.dense.weight"].shape[0])
        cfg = ViTConfig(**common, mlp_dim=intermediate_size(vc, wpath), depth=depth, num_classes=classes,
                        pooling="token", ln_eps=float(eps), distill_token=True, representation_size=rep)
        return HFRead(cfg, base, current, set() if rep else pooler)  # beside heads: a pooler no classifier uses

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        pairs = [("dist_token", f"{base}embeddings.distillation_token")]
        if cfg.representation_size:
            pairs += [(f"pre_logits.0.{p}", f"{base}pooler.dense.{p}") for p in ("weight", "bias")]
        if cfg.num_classes:
            pairs += [(f"head.{p}", f"cls_classifier.{p}") for p in ("weight", "bias")]
            pairs += [(f"head_dist.{p}", f"distillation_classifier.{p}") for p in ("weight", "bias")]
        return vit_style_table(cfg, base, current, pairs)

    def hf_kind(self, cfg: ViTConfig) -> str | None:
        # with LayerScale the model is Dinov2Model's to write, which names the distillation token it cannot hold
        return "deit" if cfg.distill_token and cfg.layer_scale is None else None

    def hf_class_name(self, kind: str, cfg: ViTConfig) -> str:
        return "DeiTForImageClassificationWithTeacher" if cfg.num_classes else "DeiTModel"

    def hf_write_base(self, kind: str, cfg: ViTConfig) -> str:
        return self.hf_bases[0] if cfg.num_classes else ""

    def hf_config(self, kind: str, model: VisionTransformer) -> dict[str, Any]:
        cfg = model.config
        return {"intermediate_size": cfg.mlp_dim, "qkv_bias": cfg.qkv_bias, "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0, "encoder_stride": cfg.patch_size,
                "pooler_output_size": cfg.representation_size or cfg.width,
                "pooler_act": "tanh", **label_fields(model)}


FAMILY = DeiT()
