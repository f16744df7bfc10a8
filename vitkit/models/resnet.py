"""ResNets with GroupNorm and weight-standardised convolutions (BiT, Kolesnikov et al. 2020; the paper's §4.1 baseline).

Two users share the parts here (one StdConv, one TF-"SAME" padding, one GroupNorm setting):

* `ResNetStem`, the hybrid's feature extractor (paper §3.1 "Hybrid Architecture", vit_jax's
  R50+ViT): a 7x7/2 root conv, GroupNorm, ReLU, a 3x3/2 max-pool, then stages of post-activation
  bottleneck units (ReLU after the residual add). R50's stages for the hybrid are (3, 4, 9).
* `ResNetV2`, the paper's "ResNet (BiT)" baseline (Kolesnikov et al. 2020): pre-activation
  bottleneck units, a final GroupNorm + ReLU, global average pooling and a zero-initialised head,
  registered as `bit_r50x1`, `bit_r101x3`, `bit_r152x2`, ...

The two original codes differ in small numerics, and each model follows its own (`Numerics`):
* `VIT_JAX` (the hybrid stem, vit_jax): kernels standardised over (kh, kw, cin) as (w - mean) / (std +
  1e-5), GroupNorm eps 1e-6, TensorFlow "SAME" padding (asymmetric for stride 2), max-pool padding that
  never wins (-inf).
* `BIT` (the BiT baseline, big_transfer's bit_jax, whose released weights the paper compares with):
  (w - mean) / sqrt(var + 1e-10), GroupNorm eps 1e-5, symmetric zero padding ((k - 1) // 2 before,
  the rest after) for convolutions and for the max-pool over the raw root conv.
Module names follow timm's ResNetV2 so timm hybrid state dicts load unchanged (`stem.conv`,
`stages.i.blocks.j.conv1`, `...downsample.conv`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.base import PreprocessDeclared
from vitkit.models.hub_api import HubApi
from vitkit.utils import check_fields, check_int, to_pair

GN_GROUPS = 32


@dataclass(frozen=True)
class Numerics:
    """The small choices where vit_jax's ResNet and BiT's differ (see the module docstring)."""

    padding: str  # "same": TensorFlow SAME (extra pixel after); "symmetric": (k - 1) // 2 before, the rest after
    std_eps: float  # weight standardisation eps
    std_eps_in_sqrt: bool  # (w - m) / sqrt(var + eps) (BiT) or (w - m) / (std + eps) (vit_jax)
    gn_eps: float
    pool_pad: float  # the max-pool's padding value: -inf never wins; 0 (BiT) can

    @property
    def name(self) -> str:
        return "bit" if self is BIT or self == BIT else "vit_jax"


VIT_JAX = Numerics(padding="same", std_eps=1e-5, std_eps_in_sqrt=False, gn_eps=1e-6, pool_pad=float("-inf"))
BIT = Numerics(padding="symmetric", std_eps=1e-10, std_eps_in_sqrt=True, gn_eps=1e-5, pool_pad=0.0)
NUMERICS = {"vit_jax": VIT_JAX, "bit": BIT}
STD_EPS, GN_EPS = VIT_JAX.std_eps, VIT_JAX.gn_eps  # the hybrid's (kept for readers of the constants)
# Bottleneck units per stage of the BiT ResNet-v2 depths.
BIT_DEPTHS: dict[int, tuple[int, ...]] = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """TensorFlow "SAME" padding: output ceil(in / stride), the extra pixel goes after (bottom/right)."""
    pads: list[int] = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad wants the last dimension first
        total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value) if any(pads) else x


def pad_symmetric(x: torch.Tensor, kernel: int, value: float = 0.0) -> torch.Tensor:
    """BiT's fixed padding: k - 1 pixels, (k - 1) // 2 before and the rest after, whatever the stride."""
    total = kernel - 1
    before = total // 2
    return F.pad(x, [before, total - before] * 2, value=value) if total else x


def pad_for(x: torch.Tensor, kernel: int, stride: int, numerics: Numerics, value: float = 0.0) -> torch.Tensor:
    return pad_same(x, kernel, stride, value) if numerics.padding == "same" else pad_symmetric(x, kernel, value)


class StdConv2d(nn.Conv2d):
    """Weight-standardised conv: each output channel's kernel standardised over (cin, kh, kw), padded as the
    numerics say (TF "SAME" by default, the hybrid's)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, eps: float | None = None,
                 numerics: Numerics = VIT_JAX) -> None:
        super().__init__(cin, cout, kernel, stride=stride, padding=0, bias=False)
        self.numerics = numerics
        self.eps = numerics.std_eps if eps is None else eps

    def standardized_weight(self) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        if self.numerics.std_eps_in_sqrt:
            return (w - mean) / torch.sqrt(var + self.eps)
        return (w - mean) / (var.sqrt() + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = pad_for(x, self.kernel_size[0], self.stride[0], self.numerics)
        return F.conv2d(x, self.standardized_weight(), None, self.stride)


def group_norm(channels: int, numerics: Numerics = VIT_JAX) -> nn.GroupNorm:
    return nn.GroupNorm(GN_GROUPS, channels, eps=numerics.gn_eps)


def max_pool_same(x: torch.Tensor, numerics: Numerics = VIT_JAX) -> torch.Tensor:
    """3x3 stride-2 max-pool: SAME padding that never wins (-inf) for vit_jax; BiT pads 1 pixel of zeros."""
    return F.max_pool2d(pad_for(x, 3, 2, numerics, value=numerics.pool_pad), 3, 2)


class Downsample(nn.Module):
    """Projection shortcut: a 1x1 StdConv with the unit's stride (+ GroupNorm in the post-activation unit)."""

    def __init__(self, cin: int, cout: int, stride: int, norm: bool, numerics: Numerics = VIT_JAX) -> None:
        super().__init__()
        self.conv = StdConv2d(cin, cout, 1, stride, numerics=numerics)
        self.norm: nn.Module = group_norm(cout, numerics) if norm else nn.Identity()

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

    def __init__(self, cin: int, mid: int, stride: int, numerics: Numerics = VIT_JAX) -> None:
        super().__init__()
        cout, n = 4 * mid, numerics
        self.downsample = Downsample(cin, cout, stride, False, n) if (cin != cout or stride != 1) else None
        self.norm1, self.conv1 = group_norm(cin, n), StdConv2d(cin, mid, 1, numerics=n)
        self.norm2, self.conv2 = group_norm(mid, n), StdConv2d(mid, mid, 3, stride, numerics=n)
        self.norm3, self.conv3 = group_norm(mid, n), StdConv2d(mid, cout, 1, numerics=n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)
        y = self.conv1(pre)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return y + shortcut


class Stage(nn.Module):
    def __init__(self, unit: type[nn.Module], units: int, cin: int, mid: int, stride: int, **kw: Any) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(unit(cin if j == 0 else 4 * mid, mid, stride if j == 0 else 1, **kw) for j in range(units))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Stem(nn.Module):
    """Root block: 7x7 stride-2 StdConv (+ GroupNorm + ReLU when post-activation), 3x3/2 max-pool."""

    def __init__(self, in_chans: int, width: int, norm: bool, numerics: Numerics = VIT_JAX) -> None:
        super().__init__()
        self.numerics = numerics
        self.conv = StdConv2d(in_chans, width, 7, 2, numerics=numerics)
        self.norm: nn.Module = group_norm(width, numerics) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if isinstance(self.norm, nn.GroupNorm):
            x = F.relu(self.norm(x))
        return max_pool_same(x, self.numerics)


def _stages(unit: type[nn.Module], layers: tuple[int, ...], width: int, **kw: Any) -> tuple[nn.ModuleList, int]:
    """Stage i has `layers[i]` units of width `width * 2**i` (output 4x that); stride 2 from stage 2 on."""
    stages, cin = nn.ModuleList(), width
    for i, n in enumerate(layers):
        mid = width * 2**i
        stages.append(Stage(unit, n, cin, mid, 1 if i == 0 else 2, **kw))
        cin = 4 * mid
    return stages, cin


def root_width(width_factor: float) -> int:
    """Channels of the root conv: 64 x the width factor (0.5, 1, 2, ...), a whole multiple of GroupNorm's 32
    groups; a ValueError says which factors fit."""
    width = 64 * width_factor
    if width != int(width) or int(width) <= 0 or int(width) % GN_GROUPS:
        raise ValueError(f"resnet width factor {width_factor!r} gives {width:g} root channels; it must be a positive "
                         f"multiple of 0.5 (64 x factor divisible by GroupNorm's {GN_GROUPS} groups)")
    return int(width)


def hybrid_stride(layers: tuple[int, ...]) -> int:
    """Pixels per feature-map cell of `ResNetStem`: 4 from the root, x2 per stage after the first."""
    return 4 * 2 ** max(len(layers) - 1, 0)


class ResNetStem(nn.Module):
    """The hybrid's ResNet (vit_jax, post-activation), returning the (B, C, H/stride, W/stride) feature map."""

    def __init__(self, layers: tuple[int, ...], width_factor: float = 1, in_chans: int = 3) -> None:
        super().__init__()
        width = root_width(width_factor)
        self.layers = tuple(layers)
        self.stem = Stem(in_chans, width, norm=True)
        self.stages, self.out_channels = _stages(Bottleneck, self.layers, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return x


@dataclass
class BiTConfig:
    """Plain-data description of a BiT ResNet-v2 (the paper's "ResNet (BiT)" baseline); JSON round-trip."""

    layers: tuple[int, ...] = (3, 4, 6, 3)  # bottleneck units per stage: R50 (3, 4, 6, 3), R101, R152
    width_factor: float = 1  # the root conv has 64 x this channels (BiT's x1, x2, x3, x4)
    num_classes: int = 1000
    in_chans: int = 3
    img_size: tuple[int, int] = (224, 224)  # the resolution it is trained / evaluated at (any input works)
    numerics: str = "bit"  # "bit" (big_transfer, its released weights) or "vit_jax" (the hybrid's stem)
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.layers, (list, tuple)) or not self.layers:
            raise ValueError(f"layers must be a list of units per stage, got {self.layers!r}")
        if len(self.layers) > 16:
            raise ValueError(f"layers: {len(self.layers)} stages (a BiT ResNet has 4)")
        self.layers = tuple(check_int("layers[]", n, high=1024) for n in self.layers)
        root_width(self.width_factor)
        check_int("num_classes", self.num_classes, low=0)
        check_int("in_chans", self.in_chans)
        self.img_size = to_pair(self.img_size, "img_size")
        check_int("img_size", min(self.img_size))
        if self.numerics not in NUMERICS:
            raise ValueError(f"numerics must be one of {sorted(NUMERICS)}, got {self.numerics!r}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layers"], d["img_size"] = list(self.layers), list(self.img_size)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BiTConfig":
        check_fields(cls, d, "BiTConfig fields")
        return cls(**d)

    def replace(self, **overrides: Any) -> "BiTConfig":
        return dataclasses.replace(self, **overrides)


class ResNetV2(PreprocessDeclared, HubApi, nn.Module):
    """The BiT baseline "ResNet (BiT)": pre-activation ResNet-v2 with GroupNorm and StdConv.

    `forward_features` gives the final (B, C, h, w) map after GroupNorm + ReLU; `forward_head`
    average-pools it (`pool`) and applies the zero-initialised classifier. The numerics are BiT's own
    (`BIT`), so its released weights give its outputs.
    """

    def __init__(self, cfg: BiTConfig | tuple[int, ...], width_factor: float = 1, num_classes: int = 1000,
                 in_chans: int = 3) -> None:
        super().__init__()
        if not isinstance(cfg, BiTConfig):  # ResNetV2(layers, width_factor, num_classes, in_chans)
            cfg = BiTConfig(layers=tuple(cfg), width_factor=width_factor, num_classes=num_classes, in_chans=in_chans)
        self.config = cfg
        numerics = NUMERICS[cfg.numerics]
        width = root_width(cfg.width_factor)
        self.stem = Stem(cfg.in_chans, width, norm=False, numerics=numerics)
        self.stages, self.num_features = _stages(PreActBottleneck, cfg.layers, width, numerics=numerics)
        self.norm = group_norm(self.num_features, numerics)
        self.head: nn.Module = nn.Identity()
        self.reset_head(cfg.num_classes)
        self.init_preprocess(cfg.img_size, cfg.in_chans)

    @property
    def layers(self) -> tuple[int, ...]:
        return self.config.layers

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    def reset_head(self, num_classes: int, drop_pre_logits: bool = True) -> None:
        """A new zero-initialised `num_classes`-way classifier (0: none, the model gives features)."""
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        if isinstance(self.head, nn.Linear):
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        self.config.num_classes = num_classes

    def set_img_size(self, img_size: int | tuple[int, int]) -> None:
        """A convolutional network takes any size: only the preprocessing's resolution changes."""
        self.config = self.config.replace(img_size=img_size)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        if enable:
            raise ValueError("gradient checkpointing is built for the ViT's blocks; the BiT ResNet does not use it")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.config.in_chans:
            raise ValueError(f"expected a batch of images (B, {self.config.in_chans}, H, W), got {tuple(x.shape)}")
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return F.relu(self.norm(x))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """Global average pooling of the final feature map: the representation the head sees."""
        return x.mean(dim=(2, 3))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.pool(x)
        return x if pre_logits else self.head(x)

    def intermediates(self, x: torch.Tensor, blocks: bool = False) -> dict[str, torch.Tensor]:
        """The ViT's intermediates dict for the ResNet: "encoded" (the final feature map), "pooled" (its global
        average, which is also the head's input, "pre_logits") and "logits" (`blocks`: the ViT's keyword; the ResNet
        keeps no per-block outputs)."""
        z = self.forward_features(x)
        pooled = self.pool(z)
        return {"encoded": z, "pooled": pooled, "pre_logits": pooled, "logits": self.head(pooled)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
