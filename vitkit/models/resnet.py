"""ResNets with GroupNorm and weight-standardised convolutions (BiT, Kolesnikov et al. 2020; the paper's §4.1 baseline).

Two users share the parts here (one StdConv, one TF-"SAME" padding, one GroupNorm setting):

* `ResNetStem`, the hybrid's feature extractor (paper §3.1 "Hybrid Architecture", vit_jax's
  R50+ViT): a 7x7/2 root conv, GroupNorm, ReLU, a 3x3/2 max-pool, then stages of post-activation
  bottleneck units (ReLU after the residual add). R50's stages for the hybrid are (3, 4, 9).
* `ResNetV2`, the paper's "ResNet (BiT)" baseline (Kolesnikov et al. 2020): pre-activation
  bottleneck units, a final GroupNorm + ReLU, global average pooling and a zero-initialised head,
  registered as `bit_r50x1`, `bit_r101x3`, `bit_r152x2`, ...

Numerics of the original code: kernels standardised over (kh, kw, cin) as (w - mean) / (std + 1e-5),
GroupNorm with 32 groups and eps 1e-6, TensorFlow "SAME" padding (asymmetric for stride 2) for the
strided convolutions and for the max-pool. Module names follow timm's ResNetV2 so timm hybrid state
dicts load unchanged (`stem.conv`, `stages.i.blocks.j.conv1`, `...downsample.conv`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

GN_GROUPS = 32
GN_EPS = 1e-6
STD_EPS = 1e-5
# Bottleneck units per stage of the BiT ResNet-v2 depths.
BIT_DEPTHS: dict[int, tuple[int, ...]] = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """TensorFlow "SAME" padding: output ceil(in / stride), the extra pixel goes after (bottom/right)."""
    pads: list[int] = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad wants the last dimension first
        total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value) if any(pads) else x


class StdConv2d(nn.Conv2d):
    """Weight-standardised conv with TF-"SAME" padding: kernel (w - mean) / (std + eps) per output channel."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, eps: float = STD_EPS) -> None:
        super().__init__(cin, cout, kernel, stride=stride, padding=0, bias=False)
        self.eps = eps

    def standardized_weight(self) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        std = w.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return (w - mean) / (std + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, self.standardized_weight(), None, self.stride)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GN_GROUPS, channels, eps=GN_EPS)


def max_pool_same(x: torch.Tensor) -> torch.Tensor:
    """3x3 stride-2 max-pool with "SAME" padding; padded cells never win (-inf)."""
    return F.max_pool2d(pad_same(x, 3, 2, value=float("-inf")), 3, 2)


class Downsample(nn.Module):
    """Projection shortcut: a 1x1 StdConv with the unit's stride (+ GroupNorm in the post-activation unit)."""

    def __init__(self, cin: int, cout: int, stride: int, norm: bool) -> None:
        super().__init__()
        self.conv = StdConv2d(cin, cout, 1, stride)
        self.norm: nn.Module = group_norm(cout) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class Bottleneck(nn.Module):
    """vit_jax's post-activation unit: relu(shortcut(x) + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1 x))))))))."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.downsample = Downsample(cin, cout, stride, norm=True) if (cin != cout or stride != 1) else None
        self.conv1, self.norm1 = StdConv2d(cin, mid, 1), group_norm(mid)
        self.conv2, self.norm2 = StdConv2d(mid, mid, 3, stride), group_norm(mid)
        self.conv3, self.norm3 = StdConv2d(mid, cout, 1), group_norm(cout)
        nn.init.zeros_(self.norm3.weight)  # the original's gn3 scale zero-init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.norm1(self.conv1(x)))
        y = F.relu(self.norm2(self.conv2(y)))
        return F.relu(shortcut + self.norm3(self.conv3(y)))


class PreActBottleneck(nn.Module):
    """BiT's pre-activation unit (ResNet-v2): x' = relu(gn1 x); shortcut from x'; conv3(relu(gn3(conv2(...))))."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.downsample = Downsample(cin, cout, stride, norm=False) if (cin != cout or stride != 1) else None
        self.norm1, self.conv1 = group_norm(cin), StdConv2d(cin, mid, 1)
        self.norm2, self.conv2 = group_norm(mid), StdConv2d(mid, mid, 3, stride)
        self.norm3, self.conv3 = group_norm(mid), StdConv2d(mid, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)
        y = self.conv1(pre)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return y + shortcut


class Stage(nn.Module):
    def __init__(self, unit: type[nn.Module], units: int, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(unit(cin if j == 0 else 4 * mid, mid, stride if j == 0 else 1) for j in range(units))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Stem(nn.Module):
    """Root block: 7x7 stride-2 StdConv (+ GroupNorm + ReLU when post-activation), 3x3/2 SAME max-pool."""

    def __init__(self, in_chans: int, width: int, norm: bool) -> None:
        super().__init__()
        self.conv = StdConv2d(in_chans, width, 7, 2)
        self.norm: nn.Module = group_norm(width) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if isinstance(self.norm, nn.GroupNorm):
            x = F.relu(self.norm(x))
        return max_pool_same(x)


def _stages(unit: type[nn.Module], layers: tuple[int, ...], width: int) -> tuple[nn.ModuleList, int]:
    """Stage i has `layers[i]` units of width `width * 2**i` (output 4x that); stride 2 from stage 2 on."""
    stages, cin = nn.ModuleList(), width
    for i, n in enumerate(layers):
        mid = width * 2**i
        stages.append(Stage(unit, n, cin, mid, 1 if i == 0 else 2))
        cin = 4 * mid
    return stages, cin


def hybrid_stride(layers: tuple[int, ...]) -> int:
    """Pixels per feature-map cell of `ResNetStem`: 4 from the root, x2 per stage after the first."""
    return 4 * 2 ** max(len(layers) - 1, 0)


class ResNetStem(nn.Module):
    """The hybrid's ResNet (vit_jax, post-activation), returning the (B, C, H/stride, W/stride) feature map."""

    def __init__(self, layers: tuple[int, ...], width_factor: int = 1, in_chans: int = 3) -> None:
        super().__init__()
        width = 64 * int(width_factor)
        self.layers = tuple(layers)
        self.stem = Stem(in_chans, width, norm=True)
        self.stages, self.out_channels = _stages(Bottleneck, self.layers, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return x


class ResNetV2(nn.Module):
    """The BiT baseline "ResNet (BiT)": pre-activation ResNet-v2 with GroupNorm and StdConv.

    `forward_features` gives the final (B, C, h, w) map after GroupNorm + ReLU; `forward_head`
    average-pools it and applies the zero-initialised classifier.
    """

    def __init__(
        self, layers: tuple[int, ...], width_factor: int = 1, num_classes: int = 1000, in_chans: int = 3
    ) -> None:
        super().__init__()
        width = 64 * int(width_factor)
        self.layers, self.width_factor, self.num_classes = tuple(layers), int(width_factor), num_classes
        self.stem = Stem(in_chans, width, norm=False)
        self.stages, self.num_features = _stages(PreActBottleneck, self.layers, width)
        self.norm = group_norm(self.num_features)
        self.head: nn.Module = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        if isinstance(self.head, nn.Linear):
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return F.relu(self.norm(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.mean(dim=(2, 3))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
