"""Same-architecture peers to time beside vitkit: Hugging Face `ViTForImageClassification` and
timm's `VisionTransformer`, each built from a vitkit `ViTConfig` (random weights: speed only).

A peer that cannot be imported is skipped with the reason (timm imports torchvision, whose
published wheels do not load with every torch build).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from vitkit.formats.common import ACT_NAMES as HF_ACT_NAMES
from vitkit.models.vit import GELU_APPROXIMATE, VisionTransformer, ViTConfig


class PeerUnavailable(RuntimeError):
    """The peer library is not installed or does not import."""


class LogitsOnly(nn.Module):
    """Wrap a model whose forward returns an output object so that it returns the logits tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=x).logits


def _check_plain(cfg: ViTConfig) -> None:
    if cfg.resnet_layers is not None or cfg.posemb != "learn1d" or cfg.pooling != "token" or cfg.representation_size:
        raise PeerUnavailable("peers are built only for plain ViTs (class token, learned 1D E_pos, no pre-logits)")


def build_vitkit(cfg: ViTConfig) -> nn.Module:
    return VisionTransformer(cfg)


def build_hf(cfg: ViTConfig, attn_implementation: str = "sdpa") -> nn.Module:
    """`transformers.ViTForImageClassification` with cfg's architecture (exact GELU, as HF's "gelu")."""
    _check_plain(cfg)
    try:
        from transformers import ViTConfig as HFConfig
        from transformers import ViTForImageClassification
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        raise PeerUnavailable(f"transformers does not import: {type(e).__name__}: {e}") from e
    if cfg.img_size[0] != cfg.img_size[1]:
        raise PeerUnavailable("HF ViT takes square images only")
    hf_cfg = HFConfig(
        hidden_size=cfg.width,
        num_hidden_layers=cfg.depth,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim,
        image_size=cfg.img_size[0],
        patch_size=cfg.patch_size,
        num_channels=cfg.in_chans,
        num_labels=cfg.num_classes,
        hidden_act=HF_ACT_NAMES[cfg.gelu],
        layer_norm_eps=cfg.ln_eps,
        qkv_bias=cfg.qkv_bias,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = ViTForImageClassification._from_config(hf_cfg, attn_implementation=attn_implementation)
    return LogitsOnly(model)


def build_timm(cfg: ViTConfig) -> nn.Module:
    """timm's `VisionTransformer` with cfg's architecture (fused attention on, timm's default)."""
    _check_plain(cfg)
    try:
        from timm.models.vision_transformer import VisionTransformer as TimmViT
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"timm does not import: {type(e).__name__}: {str(e).splitlines()[0][:120]}") from e
    return TimmViT(
        img_size=cfg.img_size,
        patch_size=cfg.patch_size,
        in_chans=cfg.in_chans,
        num_classes=cfg.num_classes,
        embed_dim=cfg.width,
        depth=cfg.depth,
        num_heads=cfg.num_heads,
        mlp_ratio=cfg.mlp_dim / cfg.width,
        qkv_bias=cfg.qkv_bias,
        norm_layer=functools.partial(nn.LayerNorm, eps=cfg.ln_eps),
        act_layer=functools.partial(nn.GELU, approximate=GELU_APPROXIMATE[cfg.gelu]),
    )


def enable_grad_checkpointing(model: nn.Module) -> nn.Module:
    """Activation (gradient) checkpointing on, per encoder block, in vitkit, timm or a wrapped HF model; returns it."""
    inner = model.model if isinstance(model, LogitsOnly) else model
    if hasattr(inner, "set_grad_checkpointing"):  # vitkit and timm
        inner.set_grad_checkpointing(True)
    elif hasattr(inner, "gradient_checkpointing_enable"):  # transformers
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise ValueError(f"{type(inner).__name__} has no gradient checkpointing switch")
    return model


PEERS: dict[str, Callable[[ViTConfig], nn.Module]] = {
    "hf-sdpa": functools.partial(build_hf, attn_implementation="sdpa"),
    "hf-eager": functools.partial(build_hf, attn_implementation="eager"),
    "timm": build_timm,
}


def peer_status(names: list[str] | None = None) -> dict[str, str]:
    """For each peer, "ok" or the reason it is skipped (tried on a tiny config)."""
    tiny = ViTConfig(img_size=16, patch_size=8, width=8, depth=1, num_heads=2, mlp_dim=16, num_classes=2, gelu="exact")
    out = {}
    for name in names or list(PEERS):
        try:
            PEERS[name](tiny)
            out[name] = "ok"
        except PeerUnavailable as e:
            out[name] = f"skipped: {e}"
    return out
