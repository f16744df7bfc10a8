"""The BiT ResNet baseline end to end: big_transfer's released .npz layout against an independent NumPy
forward with BiT's own numerics, vitkit's format, and the commands (train, finetune, eval, predict, fewshot)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import main
from vitkit.models.resnet import BIT, VIT_JAX, BiTConfig, ResNetV2, StdConv2d

# its runs' curves.png (the fine-tune's, the hybrid's): drawn, not encoded (none read; suite_fixtures' bit_digits_run,
# a session fixture set up before it, keeps the real savefig)
pytestmark = pytest.mark.usefixtures("figures_not_encoded")


# ----------------------------------------------------------------------------- independent NumPy reference
def np_pad_sym(x, k, value=0.0):
    t = k - 1
    return np.pad(x, ((0, 0), (t // 2, t - t // 2), (t // 2, t - t // 2), (0, 0)), constant_values=value)


def np_conv(x, k, stride):
    """NHWC 'valid' conv after BiT's symmetric padding, kernel HWIO standardised as bit_jax does."""
    k = k - k.mean(axis=(0, 1, 2))
    k = k / np.sqrt((k**2).mean(axis=(0, 1, 2)) + 1e-10)
    kh = k.shape[0]
    x = np_pad_sym(x, kh)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kh), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("nhwcij,ijcd->nhwd", win, k)


def np_gn(x, g, b, groups=32, eps=1e-5):
    n, h, w, c = x.shape
    xg = x.reshape(n, h, w, groups, c // groups)
    xg = xg - xg.mean(axis=(1, 2, 4), keepdims=True)
    xg = xg / np.sqrt((xg**2).mean(axis=(1, 2, 4), keepdims=True) + eps)
    return xg.reshape(n, h, w, c) * g.reshape(-1) + b.reshape(-1)


def np_bit(a, x_nchw, layers):
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    x = x_nchw.transpose(0, 2, 3, 1).astype(np.float64)
    x = np_conv(x, a["resnet/root_block/standardized_conv2d/kernel"], 2)
    x = np_pad_sym(x, 3)  # zeros, before the max-pool of the raw root conv (no norm, no ReLU there)
    x = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(-1, -2))
    for s, units in enumerate(layers):
        for u in range(units):
            p, stride = f"resnet/block{s + 1}/unit{u + 1:02d}/", (2 if s > 0 and u == 0 else 1)
            pre = relu(np_gn(x, a[f"{p}a/group_norm/gamma"], a[f"{p}a/group_norm/beta"]))
            short = np_conv(pre, a[f"{p}a/proj/standardized_conv2d/kernel"], stride) if u == 0 else x
            y = np_conv(pre, a[f"{p}a/standardized_conv2d/kernel"], 1)
            y = np_conv(relu(np_gn(y, a[f"{p}b/group_norm/gamma"], a[f"{p}b/group_norm/beta"])),
                        a[f"{p}b/standardized_conv2d/kernel"], stride)
            y = np_conv(relu(np_gn(y, a[f"{p}c/group_norm/gamma"], a[f"{p}c/group_norm/beta"])),
                        a[f"{p}c/standardized_conv2d/kernel"], 1)
            x = y + short
    x = relu(np_gn(x, a["resnet/group_norm/gamma"], a["resnet/group_norm/beta"])).mean(axis=(1, 2))
    k = a["resnet/head/conv2d/kernel"]
    return x @ k.reshape(k.shape[-2], k.shape[-1]) + a["resnet/head/conv2d/bias"]


def bit_arrays(rng, layers, width=64, C=3, K=7):
    """Random weights under big_transfer's released key names (HWIO kernels, (C,) GroupNorm params)."""
    r = lambda *s: rng.normal(0, 0.3, s).astype(np.float32)  # noqa: E731
    a = {"resnet/root_block/standardized_conv2d/kernel": r(7, 7, C, width)}
    cin = width
    for s, units in enumerate(layers):
        mid = width * 2**s
        for u in range(units):
            p = f"resnet/block{s + 1}/unit{u + 1:02d}/"
            for part, cin_p, shape in (("a", cin, (1, 1, cin, mid)), ("b", mid, (3, 3, mid, mid)),
                                       ("c", mid, (1, 1, mid, 4 * mid))):
                a[f"{p}{part}/standardized_conv2d/kernel"] = r(*shape)
                a[f"{p}{part}/group_norm/gamma"], a[f"{p}{part}/group_norm/beta"] = 1 + r(cin_p), r(cin_p)
            if u == 0:
                a[f"{p}a/proj/standardized_conv2d/kernel"] = r(1, 1, cin, 4 * mid)
            cin = 4 * mid
    a["resnet/group_norm/gamma"], a["resnet/group_norm/beta"] = 1 + r(cin), r(cin)
    a["resnet/head/conv2d/kernel"], a["resnet/head/conv2d/bias"] = r(1, 1, cin, K), r(K)
    return a


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("layers, width", [((1, 1, 1, 1), 64), ((2, 1), 32), ((1, 2, 1), 128)])
def test_released_bit_npz_matches_an_independent_numpy_forward(tmp_path: Path, layers, width) -> None:
    a = bit_arrays(np.random.default_rng(0), layers, width)
    np.savez(tmp_path / "BiT-M-R50x1.npz", **a)
    assert vitkit.formats.detect_format(tmp_path / "BiT-M-R50x1.npz") == "bit"
    m = vitkit.load_pretrained(tmp_path / "BiT-M-R50x1.npz")
    c = m.config
    assert isinstance(m, ResNetV2) and (c.layers, c.width_factor, c.num_classes) == (layers, width / 64, 7)
    assert c.numerics == "bit" and set(c.extra["assumed"]) == {"numerics", "img_size"}
    x = np.random.default_rng(1).normal(size=(2, 3, 35, 29)).astype(np.float32)  # odd sizes: padding matters
    with torch.no_grad():
        ours = m(torch.from_numpy(x)).double().numpy()
    ref = np_bit({k: v.astype(np.float64) for k, v in a.items()}, x, layers)
    assert np.abs(ours - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max()), np.abs(ours - ref).max()
    # a stray array is named, not ignored
    np.savez(tmp_path / "extra.npz", **a, **{"resnet/block9/unit01/a/foo": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"extra\.npz: unrecognised tensor.*block9"):
        vitkit.load_pretrained(tmp_path / "extra.npz")


def test_bit_and_vit_jax_numerics_differ_where_they_should() -> None:
    """Symmetric vs TF-SAME padding at stride 2 on an even size; eps under the square root vs added to std."""
    torch.manual_seed(0)
    bit, jax = StdConv2d(4, 4, 3, 2, numerics=BIT), StdConv2d(4, 4, 3, 2, numerics=VIT_JAX)
    jax.load_state_dict(bit.state_dict())
    x = torch.randn(1, 4, 8, 8)
    assert bit(x).shape == jax(x).shape == (1, 4, 4, 4)
    assert not torch.allclose(bit(x), jax(x), atol=1e-3)  # the windows are shifted by one pixel
    w = bit.weight
    ref = (w - w.mean((1, 2, 3), keepdim=True)) / torch.sqrt(w.var((1, 2, 3), keepdim=True, unbiased=False) + 1e-10)
    torch.testing.assert_close(bit.standardized_weight(), ref)


def test_bit_models_take_img_size_save_and_load(tmp_path: Path) -> None:
    m = vitkit.create_model("bit_r50x1", num_classes=3, img_size=128)
    assert m.config.img_size == (128, 128) and m.preprocess.img_size == (128, 128)
    small = vitkit.create_model("bit", layers=(1, 1), width_factor=0.5, num_classes=4, in_chans=1, img_size=32)
    with torch.no_grad():
        for p in small.parameters():
            p.normal_(0, 0.2)
    vitkit.save_pretrained(small, tmp_path / "b")
    doc = json.loads((tmp_path / "b" / "config.json").read_text())
    assert doc["arch"] == "bit" and doc["model"]["layers"] == [1, 1]
    again = vitkit.load_pretrained(tmp_path / "b")
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), small(x))
    for fmt in ("hf", "timm", "npz"):
        with pytest.raises(ValueError, match="BiT ResNet is saved in vitkit's format"):
            vitkit.save_pretrained(small, tmp_path / fmt, format=fmt)
    with pytest.raises(ValueError, match="num_heads was given, but a bit model has no num_heads"):
        vitkit.load_pretrained(tmp_path / "b", num_heads=4)
    assert BiTConfig.from_dict(small.config.to_dict()) == small.config


# the fine-tune's steps, batch and splits (a later --set wins): it proves the head swap and the 2x resolution, not
# learning (no dev split carved: its evaluation at 64 px read nothing the test asserts)
PLUMBING = ["--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
            "--set", "data.dev_fraction=0"]


@pytest.mark.slow
def test_bit_trains_finetunes_and_serves_from_the_command_line(tmp_path: Path, capsys, bit_digits_run: Path) -> None:  # noqa: ANN001
    """The recipe digits_bit trains a BiT from scratch (`vitkit train`: conftest.py's bit_digits_run, shared with
    the distillation test); the model fine-tunes at 2x the resolution, and eval, predict and fewshot take it like
    any checkpoint."""
    fast = ["--set", "schedule.steps=60", "--set", "schedule.warmup_steps=6", "--set", "train.batch_size=64",
            "--set", "train.eval_every=0", "--set", "train.ckpt_every=0", "--set", "data.num_workers=0",
            "--set", "train.tensorboard=false", "--no-progress"]
    out = (bit_digits_run / "stdout.txt").read_text()  # (the command exited 0: the fixture asserts it)
    assert "bit (ResNet-v2, units [1, 1], width x0.5, 32x32 px, 1 ch)" in out
    pre = json.loads((bit_digits_run / "run" / "result.json").read_text())
    assert pre["test"]["top1"] > 0.5, pre["test"]  # 80 steps learn the digits well above chance (10%)
    model = bit_digits_run / "run" / "model"
    assert main(["finetune", "--model", str(model), "--config", "digits_finetune", "--img-size", "64",
                 "--out", str(tmp_path / "ft"), *fast, *PLUMBING]) == 0
    assert "replaced: the 10-way head by a new zero-initialised 10-way head" in capsys.readouterr().out
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert isinstance(ft, ResNetV2) and ft.preprocess.img_size == (64, 64)
    assert main(["eval", "--model", str(model)]) == 0
    top1 = float(capsys.readouterr().out.split("top-1: ")[1].split("%")[0])
    assert abs(top1 - 100 * pre["test"]["top1"]) < 0.01  # the saved model reproduces the run's test figure
    Image.new("L", (8, 8), 120).save(tmp_path / "d.png")
    assert main(["predict", str(tmp_path / "d.png"), "--model", str(model), "--topk", "2"]) == 0
    assert main(["fewshot", "--model", str(model), "--seeds", "1", "--shots", "5"]) == 0
    assert "average-pooled final feature map" in capsys.readouterr().out
    assert main(["inspect", "--model", str(model), "--out", str(tmp_path / "i")]) == 2
    assert "ResNetV2, which has neither" in capsys.readouterr().err


def test_hybrid_trains_through_the_runner(tmp_path: Path) -> None:
    """An R50+ViT-style hybrid (ResNet stem of one stage, width x0.5) trains from a recipe: the loss falls."""
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    cfg = load_config("digits_pretrain", ["model.img_size=16", "model.patch_size=1", "model.resnet_layers=[1]",
                                          "model.resnet_width=0.5", "model.width=32", "model.depth=1",
                                          "model.num_heads=2", "model.mlp_dim=64", "schedule.steps=40",
                                          "schedule.warmup_steps=4", "train.batch_size=64", "train.eval_every=0",
                                          "train.ckpt_every=0", "train.log_every=10", "data.num_workers=0",
                                          "train.tensorboard=false", "optim.lr=3e-3"])
    run_experiment(cfg, tmp_path / "h", progress=False)
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "h" / "metrics.jsonl").read_text().splitlines())
              if "loss" in r]
    assert losses[-1] < 0.85 * losses[0], losses
    m = vitkit.load_pretrained(tmp_path / "h" / "model")
    assert m.config.resnet_layers == (1,) and m.config.resnet_width == 0.5 and m.config.total_stride == 4
