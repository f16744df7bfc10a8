"""DINOv2 (Oquab et al. 2024), with registers (Darcet et al. 2024): LayerScale, register tokens, no head.

Three layouts: timm's (`vit_*_patch14_dinov2`, `*_reg4_dinov2`: LayerScale's init 1e-5 set by timm's builder),
transformers' `Dinov2Model` / `Dinov2WithRegistersModel`, and facebookresearch/dinov2's own torch hub files
(`dinov2_*_pretrain.pth`: timm's names but `register_tokens`, `mask_token`, blocks maybe in chunks), whose
builder values (LayerScale 1.0, nn.GELU), E_pos resampling and evaluation preprocessing are this file's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import Choices, KeyTable, config_count, require
from vitkit.formats.families.family import (
    Family,
    HFRead,
    block_table,
    vit_style_embeddings,
    vit_style_read,
)
from vitkit.models.posemb import square_side
from vitkit.models.vit import VisionTransformer, ViTConfig

# transformers' Dinov2 block names (relative to the block prefix) -> vitkit's
DINO_BLOCK = {"norm1": "norm1", "attention.attention.query": "q", "attention.attention.key": "k",
              "attention.attention.value": "v", "attention.output.dense": "attn.proj", "norm2": "norm2",
              "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2", "layer_scale1": "ls1", "layer_scale2": "ls2"}
# vitkit's block module -> transformers' DINOv2 module as peft names it (transformers 5 names its attention as ViT's
# current layout; its classic names are DINO_BLOCK's)
DINO_CURRENT = {"q": "attention.q_proj", "k": "attention.k_proj", "v": "attention.v_proj", "attn.proj": "attention.o_proj",
                "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
LAYER_SCALE_INIT = 1e-5  # timm's DINOv2 init_values: used only to re-initialise, a file holds the gammas
# DINOv2's classification evaluation (dinov2/data/transforms.py): bicubic resize to 256, centre crop 224
# (crop_pct 0.875), ImageNet mean and std -- not in its files
EVAL_PREPROCESS = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "interpolation": "bicubic",
                   "crop_pct": 0.875, "crop_mode": "center"}


class DINOv2(Family):
    name = "DINOv2"
    paper = "Oquab et al. 2024; registers: Darcet et al. 2024"
    marks = "`layer_scale`, `num_registers`"
    timm_names = "`*_dinov2`, `*_reg4_dinov2`"
    own_layout = "facebookresearch/dinov2's torch hub `dinov2_*_pretrain.pth`"
    hf_bases = ("dinov2.", "dinov2_with_registers.")
    hf_model_types = ("dinov2", "dinov2_with_registers")
    keeps_table = True  # its 37x37 table serves the 224 crop and 518 px alike, resampled on each forward
    timm_builder_args = (("_dinov2", {"init_values": 1e-5}),)
    hf_shapes = {"dinov2": {"layer_scale": None, "num_classes": 0},
                 "dinov2_with_registers": {"layer_scale": None, "num_registers": None, "num_classes": 0}}

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        parts = [f"num_registers={cfg.num_registers} (register tokens)"] if cfg.num_registers else []
        return parts + ([f"layer_scale={cfg.layer_scale:g} (LayerScale)"] if cfg.layer_scale is not None else [])

    def timm_fields(self, state: dict[str, torch.Tensor], args: dict[str, Any], path: Path, choices: Choices
                    ) -> dict[str, Any]:
        """Register tokens (`reg_token`; E_pos for the patches, or the class token and the patches: no rows of
        their own, see formats/timm.py), and LayerScale's gammas (`ls1`, `ls2`): its initial value from the builder
        (DeiT III's names say 1e-6, `timm_builder_args`), else timm's DINOv2 builders' 1e-5, assumed."""
        out: dict[str, Any] = {}
        if "reg_token" in state:
            out["num_registers"] = require(state, "reg_token", path, 3).shape[1]
            rows = require(state, "pos_embed", path, 3).shape[1]
            if square_side(rows) is None and not ("cls_token" in state and square_side(rows - 1)):
                raise ValueError(f"{path}: register tokens with a position-embedding table of {rows} rows: not the "
                                 "patches (no_embed_class), nor the class token and the patches")
        if "blocks.0.ls1.gamma" in state:
            out["layer_scale"] = choices.pick("layer_scale", args.get("init_values"), LAYER_SCALE_INIT,
                                              "LayerScale's initial value is not in the file (its gammas are "
                                              "trained); it matters only when the model is re-initialised")
        return out

    def timm_ln_eps(self, arch: str, args: dict[str, Any], pre_norm: bool) -> float | None:
        # a file in DINOv2's own layout (`from_own_layout` names its architecture "dinov2"): LayerNorm(eps=1e-6)
        return 1e-6 if arch == "dinov2" and not pre_norm else None

    # --- its own layout
    def is_own_layout(self, state: dict[str, torch.Tensor]) -> bool:
        return "mask_token" in state and "patch_embed.proj.weight" in state

    def from_own_layout(self, state: dict[str, torch.Tensor], meta: dict[str, Any], path: Path, choices: Choices
                        ) -> tuple[dict[str, torch.Tensor], dict[str, Any], str | None]:
        """A backbone in facebookresearch/dinov2's own layout as a timm state dict, the builder values its hub sets
        in code (LayerScale's init 1.0, nn.GELU), and how it resamples E_pos, which the file does not say: the hub
        builds its register backbones antialiased (offset 0), the others with DINO's offset 0.1 -- assumed and
        logged, as is its evaluation preprocessing."""
        out: dict[str, torch.Tensor] = {}
        for k, v in state.items():
            if k == "mask_token":
                continue
            k = "reg_token" if k == "register_tokens" else re.sub(r"^blocks\.\d+\.(\d+)\.", r"blocks.\1.", k)
            if k in out:
                raise ValueError(f"{path}: {k!r} twice after un-chunking DINOv2's blocks: not a layout vitkit reads")
            out[k] = v
        how = "bicubic_antialias" if "reg_token" in out else "bicubic_dino"
        choices.assumed["posemb_resample"] = (
            f"{how}: DINOv2's hub builds its {'register' if 'reg_token' in out else 'plain'} backbones so "
            "(interpolate_antialias, interpolate_offset); the file does not say, and it matters only at other input "
            "sizes")
        choices.assumed["preprocess"] = ("ImageNet mean / std, bicubic, centre crop 0.875: DINOv2's evaluation "
                                         "transform (resize 256, crop 224); the file stores no preprocessing")
        meta = {**meta, "architecture": "dinov2", "global_pool": "token", "pretrained_cfg": dict(EVAL_PREPROCESS),
                "model_args": {"init_values": 1.0, "act_layer": "gelu", **(meta.get("model_args") or {})}}
        return out, meta, how

    # --- transformers' layout
    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        if vc.get("use_swiglu_ffn"):
            raise ValueError(f"{wpath}: use_swiglu_ffn (a SwiGLU MLP, DINOv2 giant) is not a model vitkit builds")
        base, _, depth = vit_style_read(src, self.hf_bases, classic_only=True)
        if "classifier.weight" in src:
            raise ValueError(f"{wpath}: {kind} image classification's classifier reads [class token, mean of the "
                             "patches] (2 x hidden_size): not a head vitkit's ViT has; load the backbone model")
        extra: dict[str, Any] = {}
        extra["layer_scale"] = float(choices.pick("layer_scale", vc.get("layerscale_value"), 1.0,
                                                  f"transformers' {kind} config default layerscale_value"))
        if kind == "dinov2_with_registers":  # its E_pos is resampled antialiased, Dinov2Model's not
            extra.update(num_registers=config_count(vc, "num_register_tokens", 4, wpath),
                         posemb_resample="bicubic_antialias")
        eps = choices.pick("ln_eps", vc.get("layer_norm_eps"), 1e-6, f"transformers' {kind} config default "
                           "layer_norm_eps")
        mlp = int(common["width"] * config_count(vc, "mlp_ratio", 4, wpath, float))
        cfg = ViTConfig(**common, mlp_dim=mlp, depth=depth, num_classes=0, pooling="token", ln_eps=float(eps), **extra)
        return HFRead(cfg, base, ignore={f"{base}embeddings.mask_token"})  # used only by masked pre-training

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        pairs = [("reg_token", f"{base}embeddings.register_tokens")] if cfg.num_registers else []
        return ([(o, t, "same") for o, t in vit_style_embeddings(cfg, base) + pairs]
                + block_table(cfg, f"{base}encoder.layer.", DINO_BLOCK))

    def hf_kind(self, cfg: ViTConfig) -> str | None:
        if cfg.layer_scale is None:
            return None
        return "dinov2_with_registers" if cfg.num_registers else "dinov2"

    def hf_class_name(self, kind: str, cfg: ViTConfig) -> str:
        return "Dinov2WithRegistersModel" if kind == "dinov2_with_registers" else "Dinov2Model"

    def hf_problems(self, kind: str, model: VisionTransformer) -> list[str]:
        cfg = model.config
        if cfg.mlp_dim % cfg.width:
            return [f"mlp_dim={cfg.mlp_dim} is not a whole multiple of width={cfg.width} (Dinov2Config's mlp_ratio)"]
        return []

    def hf_config(self, kind: str, model: VisionTransformer) -> dict[str, Any]:
        cfg = model.config
        doc = {"mlp_ratio": cfg.mlp_dim // cfg.width, "qkv_bias": cfg.qkv_bias, "layerscale_value": cfg.layer_scale,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0,
               "use_swiglu_ffn": False}
        if cfg.num_registers:
            doc["num_register_tokens"] = cfg.num_registers
        return doc

    def hf_tensors(self, kind: str, cfg: ViTConfig, base: str, out: dict[str, torch.Tensor]) -> None:
        out[f"{base}embeddings.mask_token"] = torch.zeros(1, cfg.width)  # masked pre-training only; unused here

    def hf_resample(self, kind: str) -> str:
        return "bicubic_antialias" if kind == "dinov2_with_registers" else "bicubic"

    def peft_modules(self, kind: str, layout: str) -> tuple[str, dict[str, str]] | None:
        return "encoder.layer.{i}.", DINO_CURRENT if layout == "current" else {v: k for k, v in DINO_BLOCK.items()}


FAMILY = DINOv2()
