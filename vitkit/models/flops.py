"""Analytic matrix-multiply FLOPs of a ViT, from its config alone (2 FLOPs per multiply-add).

Per image, with N patches, T = N + prefix tokens, width D, MLP size M, L blocks, P x P patches over
C channels and K classes, the forward pass does

    patch embedding   2 N (C P^2) D
    per block         2 T D (3D)  [qkv]  +  2 T^2 D  [q k^T]  +  2 T^2 D  [attn v]
                      + 2 T D^2   [proj] +  2 T D M [fc1]     +  2 T M D  [fc2]
    pre-logits        2 D R       (only with a representation layer of size R)
    head              2 R K       (R = D without a representation layer)
                      + MAP pooling: 2 D^2 + 4 N D^2 + 4 N D + 2 D^2 + 4 D M

Register tokens count among the T tokens.

which for ViT-B/16 at 224 px (N = 196, T = 197) is 35.1 GFLOP (timm's "17.6 GMACs"). A training
step is counted as 3x the forward (backward = grads w.r.t. activations + grads w.r.t. weights):
105.4 GFLOP per image for B/16. Softmax, LayerNorm, GELU and additions are not counted (they are
O(T D) or O(T^2) per layer, < 1% of the work). A hybrid's ResNet stem is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vitkit.models.vit import ViTConfig

TRAIN_FLOPS_FACTOR = 3  # forward + backward (2x forward)


@dataclass(frozen=True)
class FlopCount:
    """Forward matmul FLOPs per image, split by where they are spent."""

    patch_embed: int
    qkv: int
    attention: int  # q k^T and attn v
    proj: int
    mlp: int
    head: int

    @property
    def forward(self) -> int:
        return self.patch_embed + self.qkv + self.attention + self.proj + self.mlp + self.head

    @property
    def train_step(self) -> int:
        """Forward + backward per image (the 3x convention)."""
        return TRAIN_FLOPS_FACTOR * self.forward


def vit_flops(cfg: ViTConfig, img_size: int | tuple[int, int] | None = None) -> FlopCount:
    """Matmul FLOPs per image of `cfg` (at `img_size` if given; see the module docstring)."""
    if img_size is not None:
        cfg = cfg.replace(img_size=img_size)
    n, d, m, depth = cfg.num_patches, cfg.width, cfg.mlp_dim, cfg.depth
    t = n + cfg.num_prefix_tokens
    patch_in = (cfg.in_chans if cfg.resnet_layers is None else 0) * cfg.patch_size**2
    head_in = cfg.representation_size or d
    head = 2 * head_in * cfg.num_classes + (2 * d * cfg.representation_size if cfg.representation_size else 0)
    if cfg.pooling == "map":  # the attention-pooling head: query, keys/values of N patches, attention, proj, MLP
        head += 2 * d * d + 2 * n * d * 2 * d + 2 * 2 * n * d + 2 * d * d + 2 * 2 * d * m
    return FlopCount(
        patch_embed=2 * n * patch_in * d,
        qkv=depth * 2 * t * d * 3 * d,
        attention=depth * 2 * 2 * t * t * d,
        proj=depth * 2 * t * d * d,
        mlp=depth * 2 * 2 * t * d * m,
        head=head,
    )


def _counted(module: nn.Module, x: torch.Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    was_training = module.training
    module.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(x)
    module.train(was_training)
    return int(counter.get_total_flops())


def model_flops(model: nn.Module) -> int:
    """Forward FLOPs per image of any vitkit model at its configured resolution, on one axis for ViTs,
    hybrids and BiT ResNets (paper Fig. 5): a ViT's are `vit_flops` (a hybrid's ResNet stem added, counted
    by torch's FlopCounterMode on one image); a ResNet's are counted the same way (convolutions and the
    head; 2 per multiply-add, as `vit_flops`)."""
    cfg = model.config
    x = torch.zeros(1, cfg.in_chans, *cfg.img_size)
    if isinstance(cfg, ViTConfig):
        stem = _counted(model.patch_embed.backbone, x) if cfg.resnet_layers is not None else 0
        return vit_flops(cfg).forward + stem
    return _counted(model, x)
