"""MAE (He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"): the pre-trained encoder, and its
fine-tuned classifiers' average pooling.

Layouts: timm's fine-tuned MAE / BEiT-style models (`global_pool="avg"` beside a class token, `fc_norm` after
pooling: `pooling="gap"`, `class_token=True`, `fc_norm`, read from the shapes by formats/timm.py) and
transformers' `ViTMAEModel` / `ViTMAEForPreTraining` (the encoder with its fixed sin-cos table as stored; the
decoder is left out; no masking at inference). facebookresearch/mae's own `.pth` files use timm's names. An MAE
encoder is a plain ViT: it is written as transformers' `ViTModel` (formats/hf.py), as `ViTMAEModel` masks and
shuffles patches at inference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import Choices, KeyTable
from vitkit.formats.families.family import Family, HFRead, intermediate_size, vit_style_read, vit_style_table
from vitkit.models.vit import ViTConfig


class MAE(Family):
    name = "MAE"
    paper = "He et al. 2022"
    marks = "`pooling=\"gap\"` beside `class_token`, `fc_norm`"
    timm_names = "`global_pool=\"avg\"` beside a class token (MAE, BEiT fine-tuning)"
    hf_bases = ("vit.",)
    hf_model_types = ("vit_mae",)

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        parts = ["class_token=True with pooling='gap' (a class token that is not pooled)"] if (
            cfg.class_token and cfg.pooling != "token") else []
        return parts + (["fc_norm=True (the final LayerNorm after pooling)"] if cfg.fc_norm else [])

    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        base, current, depth = vit_style_read(src, self.hf_bases)
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-12, f"transformers' {kind} config default "
                           "layer_norm_eps")
        cfg = ViTConfig(**common, mlp_dim=intermediate_size(vc, wpath), depth=depth, num_classes=0, pooling="token",
                        ln_eps=float(eps))
        # ViTMAEForPreTraining's decoder reconstructs pixels and is not a classifier
        return HFRead(cfg, base, current, {k for k in src if k.startswith("decoder.")})

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        return vit_style_table(cfg, base, current, [])


FAMILY = MAE()
