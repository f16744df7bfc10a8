"""CLIP image towers (Radford et al. 2021): a LayerNorm before the blocks, no patch-embedding bias, QuickGELU.

`ViTConfig.pre_norm`, `patch_bias=False`, `gelu="quick"` (OpenAI's weights; most OpenCLIP models use the exact
GELU). Layouts: timm's (`*_clip_*`, `*_clip_quickgelu_*`: `norm_pre`; the builder's name says QuickGELU),
transformers' `CLIPVisionModel[WithProjection]` and `CLIPModel`'s vision tower, and OpenAI's / OpenCLIP's own
state dicts (`visual.conv1`, `visual.transformer.resblocks.N`, `visual.proj`), the text tower left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import Choices, KeyTable
from vitkit.formats.families.family import (
    Family,
    HFRead,
    intermediate_size,
    tower_read,
    tower_table,
    vision_tower_config,
)
from vitkit.models.timm_api import GELU_ACTS
from vitkit.models.vit import VisionTransformer, ViTConfig

# OpenAI's / OpenCLIP's CLIP state dicts: `visual.*` image-tower names -> timm's (what timm's own converter maps)
CLIP_VISUAL = (("visual.conv1.", "patch_embed.proj."), ("visual.ln_pre.", "norm_pre."), ("visual.ln_post.", "norm."),
               ("visual.transformer.resblocks.", "blocks."), (".ln_1.", ".norm1."), (".ln_2.", ".norm2."),
               (".attn.in_proj_", ".attn.qkv."), (".attn.out_proj.", ".attn.proj."), (".mlp.c_fc.", ".mlp.fc1."),
               (".mlp.c_proj.", ".mlp.fc2."))


class CLIP(Family):
    name = "CLIP"
    paper = "Radford et al. 2021"
    marks = "`pre_norm`, `patch_bias=False`, `gelu=\"quick\"`"
    timm_names = "`*_clip_*`, `*_clip_quickgelu_*`"
    own_layout = "OpenAI's / OpenCLIP's state dicts (`visual.conv1`, `visual.transformer.resblocks.N`)"
    hf_bases = ("vision_model.",)  # CLIPModel's and CLIPVisionModel's image tower
    hf_model_types = ("clip_vision_model", "clip")
    timm_builder_args = (("_quickgelu_", {"act_layer": "quick_gelu"}),)
    hf_shapes = {"clip_vision_model": {"pre_norm": True, "patch_bias": False, "qkv_bias": True}}

    def pooled_feature(self, cfg: Any) -> tuple[str, str] | None:
        """CLIP with its projection (a transformers CLIP file's head): the projected image embedding, its logits."""
        return ("logits", "") if getattr(cfg, "name", "") in self.hf_model_types and cfg.num_classes > 0 else None

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        parts = ["pre_norm=True (a LayerNorm before the first block)"] if cfg.pre_norm else []
        if not cfg.patch_bias:
            parts.append("patch_bias=False (a patch embedding without bias)")
        return parts + (["gelu='quick' (QuickGELU)"] if cfg.gelu == "quick" else [])

    def timm_architecture(self, cfg: ViTConfig) -> str | None:
        if not cfg.pre_norm or cfg.pooling == "map":  # a pre-norm MAP tower is written as SigLIP's builder
            return None
        return "vit_base_patch16_clip_quickgelu_224" if cfg.gelu == "quick" else "vit_base_patch16_clip_224"

    def timm_ln_eps(self, arch: str, args: dict[str, Any], pre_norm: bool) -> float | None:
        # timm's *_clip_* builders (and a pre-norm model_args) use nn.LayerNorm's own eps
        return 1e-5 if pre_norm and ("clip" in arch or args.get("pre_norm")) else None

    def timm_defaults(self, parts: dict[str, Any]) -> dict[str, tuple[Any, str]]:
        if not parts.get("pre_norm"):
            return {}
        return {"ln_eps": (1e-5, "a LayerNorm before the blocks is CLIP's (nn.LayerNorm, eps 1e-5)"),
                "gelu": ("exact", "timm's ViT uses nn.GELU, the exact erf form (OpenAI's CLIP weights need "
                                  "gelu='quick')")}

    def timm_write_problems(self, cfg: ViTConfig) -> list[str]:
        if cfg.pre_norm != cfg.patch_bias:
            return []
        return [f"pre_norm={cfg.pre_norm} with patch_bias={cfg.patch_bias} (timm's patch embedding has a bias "
                "exactly when there is no pre-norm)"]

    # --- its own layout
    def is_own_layout(self, state: dict[str, torch.Tensor]) -> bool:
        return "visual.conv1.weight" in state

    def from_own_layout(self, state: dict[str, torch.Tensor], meta: dict[str, Any], path: Path, choices: Choices
                        ) -> tuple[dict[str, torch.Tensor], dict[str, Any], str | None]:
        """A CLIP checkpoint in OpenAI's / OpenCLIP's layout as a timm image tower: the text tower is left out,
        `visual.proj` (width x embed) becomes a bias-free head. Its GELU is not in the file (OpenAI's CLIP:
        QuickGELU, most OpenCLIP models: exact) and must be given; heads are CLIP's 64 wide unless given."""
        out: dict[str, torch.Tensor] = {}
        for k, v in state.items():
            if not k.startswith("visual."):
                continue  # the text tower, logit_scale
            if k == "visual.class_embedding":
                out["cls_token"] = v.reshape(1, 1, -1)
            elif k == "visual.positional_embedding":
                out["pos_embed"] = v[None]
            elif k == "visual.proj":
                out["head.weight"], out["head.bias"] = v.t().contiguous(), v.new_zeros(v.shape[1])
            else:
                for old, new in CLIP_VISUAL:  # (in_proj_weight -> qkv.weight: q, k, v stacked as timm's fused qkv)
                    k = k.replace(old, new)
                out[k] = v
        if "patch_embed.proj.weight" not in out:
            raise ValueError(f"{path}: a CLIP state dict without visual.conv1.weight")
        heads = choices.pick("num_heads", None, out["patch_embed.proj.weight"].shape[0] // 64,
                             "CLIP's image towers use 64-wide heads")
        gelu = choices.pick("gelu", None, None, "a CLIP state dict does not record its GELU: OpenAI's CLIP uses "
                            "QuickGELU (gelu='quick'), most OpenCLIP models the exact one (gelu='exact')")
        meta = {**meta, "architecture": "vit_base_patch16_clip_224",  # pre-norm, nn.LayerNorm's eps 1e-5
                "global_pool": "token", "model_args": {"num_heads": heads, "act_layer": GELU_ACTS[gelu]}}
        return out, meta, None

    # --- transformers' layout
    def hf_vision_config(self, doc: dict[str, Any]) -> dict[str, Any]:
        return vision_tower_config(doc, "clip")

    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        base, depth, ignore = tower_read(src, self.hf_bases, ("text_model.", "text_projection.", "logit_scale"))
        e = f"{base}embeddings."
        src[f"{e}class_embedding"] = src[f"{e}class_embedding"].reshape(1, 1, -1)
        classes = 0
        if "visual_projection.weight" in src:  # a bias-free projection: vitkit's head with a zero bias
            classes = int(src["visual_projection.weight"].shape[0])
            src["visual_projection.bias"] = src["visual_projection.weight"].new_zeros(classes)
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-5, "transformers' CLIPVisionConfig default")
        cfg = ViTConfig(**common, mlp_dim=intermediate_size(vc, wpath), depth=depth, num_classes=classes,
                        pooling="token", pre_norm=True, patch_bias=False, ln_eps=float(eps))
        return HFRead(cfg, base, ignore=ignore)

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        pairs = [("cls_token", f"{base}embeddings.class_embedding"), ("norm_pre.weight", f"{base}pre_layrnorm.weight"),
                 ("norm_pre.bias", f"{base}pre_layrnorm.bias")]
        if cfg.num_classes:  # CLIP's image embedding: the projection of the pooled token
            pairs += [("head.weight", "visual_projection.weight"), ("head.bias", "visual_projection.bias")]
        return tower_table(cfg, base, pairs)

    def hf_kind(self, cfg: ViTConfig) -> str | None:
        return "clip_vision_model" if cfg.pre_norm else None

    def hf_class_name(self, kind: str, cfg: ViTConfig) -> str:
        return "CLIPVisionModelWithProjection" if cfg.num_classes else "CLIPVisionModel"

    def hf_write_base(self, kind: str, cfg: ViTConfig) -> str:
        return self.hf_bases[0]

    def hf_problems(self, kind: str, model: VisionTransformer) -> list[str]:
        if model.config.num_classes and bool(model.head.bias.detach().any()):
            return ["a head with a bias (CLIP's visual_projection has none: a classifier fine-tuned on a CLIP tower "
                    "saves to timm or vitkit's format)"]
        return []

    def hf_config(self, kind: str, model: VisionTransformer) -> dict[str, Any]:
        cfg = model.config
        return {"intermediate_size": cfg.mlp_dim, "attention_dropout": 0.0, "projection_dim": cfg.num_classes or 512,
                "initializer_factor": 1.0}

    def hf_tensors(self, kind: str, cfg: ViTConfig, base: str, out: dict[str, torch.Tensor]) -> None:
        e = f"{base}embeddings."
        out[f"{e}class_embedding"] = out[f"{e}class_embedding"].reshape(-1)
        out[f"{e}position_embedding.weight"] = out[f"{e}position_embedding.weight"][0]
        out.pop("visual_projection.bias", None)  # zero (hf_problems)


FAMILY = CLIP()
