"""The ResNet parts (BiT): TF-SAME padding, StdConv, the hybrid stem and the BiT ResNet-v2 baseline."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.models.resnet import (
    PreActBottleneck,
    ResNetStem,
    ResNetV2,
    StdConv2d,
    hybrid_stride,
    max_pool_same,
    pad_same,
)


@pytest.mark.parametrize(
    "size,kernel,stride,pads",
    [(32, 7, 2, (2, 3)), (16, 3, 2, (0, 1)), (15, 3, 2, (1, 1)), (8, 1, 2, (0, 0)), (9, 3, 1, (1, 1))],
)
def test_tf_same_padding_is_asymmetric(size: int, kernel: int, stride: int, pads: tuple[int, int]) -> None:
    x = torch.ones(1, 1, size, size)
    y = pad_same(x, kernel, stride)
    assert y.shape[-1] == size + sum(pads)
    assert y[0, 0, pads[0], pads[0]] == 1 and (pads[0] == 0 or y[0, 0, 0, 0] == 0)
    assert F.conv2d(y, torch.ones(1, 1, kernel, kernel), stride=stride).shape[-1] == -(-size // stride)


def test_max_pool_ignores_padding() -> None:
    x = -torch.rand(1, 1, 4, 4) - 1  # all negative: a zero pad would win the max
    y = max_pool_same(x)
    assert y.shape == (1, 1, 2, 2) and torch.all(y < 0)
    assert y[0, 0, 1, 1] == x[0, 0, 2:, 2:].max()  # SAME pads (0, 1): the last window hangs over the edge
    assert y[0, 0, 0, 0] == x[0, 0, :3, :3].max()


def test_stdconv_standardises_each_filter() -> None:
    conv = StdConv2d(4, 6, 3, stride=2)
    w = conv.weight.detach().double()
    ws = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.std(dim=(1, 2, 3), keepdim=True, unbiased=False) + 1e-5)
    x = torch.randn(2, 4, 9, 9)
    ref = F.conv2d(F.pad(x.double(), (1, 1, 1, 1)), ws, stride=2)  # 9 px, k 3, s 2: SAME pads (1, 1)
    assert torch.allclose(conv(x).double(), ref, atol=1e-5)
    with torch.no_grad():  # invariant to an affine change of the raw kernel, up to the eps in (std + eps)
        conv2 = StdConv2d(4, 6, 3, stride=2)
        conv2.weight.copy_(conv.weight * 3 + 1)
    assert torch.allclose(conv2(x), conv(x), rtol=1e-3, atol=1e-3)


def test_hybrid_stem_shapes_and_stride() -> None:
    stem = ResNetStem((3, 4, 9), width_factor=1)
    assert stem.out_channels == 1024 and hybrid_stride((3, 4, 9)) == 16 and hybrid_stride(()) == 4
    assert ResNetStem((), 2).out_channels == 128
    small = ResNetStem((1, 1), width_factor=1)
    assert small(torch.randn(1, 3, 32, 40)).shape == (1, 512, 4, 5)
    assert torch.all(small.stages[0].blocks[0].norm3.weight == 0)  # gn3 scale zero-init


def test_preact_unit_by_hand() -> None:
    unit = PreActBottleneck(64, 32, stride=2).eval()
    with torch.no_grad():
        for p in unit.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(1, 64, 8, 8)

    def conv(m, v):  # the standardised kernel, with SAME padding worked out for these sizes
        w = m.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.std((1, 2, 3), keepdim=True, unbiased=False) + 1e-5)
        pad = (
            (0, 1, 0, 1)
            if (w.shape[-1] == 3 and m.stride[0] == 2)
            else (1, 1, 1, 1)
            if w.shape[-1] == 3
            else (0, 0, 0, 0)
        )
        return F.conv2d(F.pad(v, pad), w, stride=m.stride)

    gn = lambda m, v: F.group_norm(v, 32, m.weight, m.bias, 1e-6)  # noqa: E731
    pre = F.relu(gn(unit.norm1, x))
    y = conv(unit.conv1, pre)
    y = conv(unit.conv2, F.relu(gn(unit.norm2, y)))
    y = conv(unit.conv3, F.relu(gn(unit.norm3, y)))
    with torch.no_grad():
        assert torch.allclose(unit(x), y + conv(unit.downsample.conv, pre), atol=1e-5)


def test_bit_baselines_registered() -> None:
    names = vitkit.list_models("bit_*")
    assert {"bit_r50x1", "bit_r50x2", "bit_r101x1", "bit_r101x3", "bit_r152x2", "bit_r152x4"} <= set(names)
    with torch.device("meta"):
        n = sum(p.numel() for p in vitkit.create_model("bit_r50x1").parameters())
    assert n == 25_549_352  # BiT-R50x1 with a 1000-way head, as timm's resnetv2_50x1_bit
    with torch.device("meta"):
        r101 = vitkit.create_model("bit_r101x3", num_classes=10)
    assert len(r101.stages[2].blocks) == 23 and r101.num_features == 2048 * 3 and r101.head.out_features == 10
    m = ResNetV2((1, 1, 1, 1), width_factor=1, num_classes=10).eval()  # R50's shape, one unit per stage
    x = torch.randn(2, 3, 64, 64)
    f = m.forward_features(x)
    assert f.shape == (2, 2048, 2, 2) and torch.all(f >= 0)  # after the final GroupNorm + ReLU
    assert m.forward_head(f, pre_logits=True).shape == (2, 2048)
    assert torch.count_nonzero(m(x)) == 0  # zero-initialised head
    with pytest.raises(ValueError, match="bit_r50x1 takes"):
        vitkit.create_model("bit_r50x1", width=3)
