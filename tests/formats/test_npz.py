"""Original vit_jax / big_vision `.npz` checkpoints.

Files are built here with NumPy in the exact key layouts of the released files and of newer Flax,
then checked against an independent NumPy forward pass (tanh GELU, LayerNorm eps 1e-6, StdConv,
GroupNorm, TF-SAME padding), never by re-calling vitkit.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from vitkit.formats import detect_format
from vitkit.formats.npz import read_npz

RELEASED = ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3")
NEWER = ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0")


# ----------------------------------------------------------------------------- file builders
def vit_arrays(rng, *, D=32, heads=4, mlp=48, P=4, C=3, grid=3, depth=2, K=5, rep=None, token=True, names=RELEASED):
    r = lambda *s: rng.normal(0, 0.3, s).astype(np.float32)  # noqa: E731
    d = D // heads
    a = {"embedding/kernel": r(P, P, C, D), "embedding/bias": r(D)}
    if token:
        a["cls"] = r(1, 1, D)
    a["Transformer/posembed_input/pos_embedding"] = r(1, grid * grid + int(token), D)
    ln1, att, ln2, mb = names
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        a[f"{b}{ln1}/scale"], a[f"{b}{ln1}/bias"] = 1 + r(D), r(D)
        for n in ("query", "key", "value"):
            a[f"{b}{att}/{n}/kernel"], a[f"{b}{att}/{n}/bias"] = r(D, heads, d), r(heads, d)
        a[f"{b}{att}/out/kernel"], a[f"{b}{att}/out/bias"] = r(heads, d, D), r(D)
        a[f"{b}{ln2}/scale"], a[f"{b}{ln2}/bias"] = 1 + r(D), r(D)
        a[f"{b}{mb}/Dense_0/kernel"], a[f"{b}{mb}/Dense_0/bias"] = r(D, mlp), r(mlp)
        a[f"{b}{mb}/Dense_1/kernel"], a[f"{b}{mb}/Dense_1/bias"] = r(mlp, D), r(D)
    a["Transformer/encoder_norm/scale"], a["Transformer/encoder_norm/bias"] = 1 + r(D), r(D)
    if rep:
        a["pre_logits/kernel"], a["pre_logits/bias"] = r(D, rep), r(rep)
    a["head/kernel"], a["head/bias"] = r(rep or D, K), r(K)
    return a


def hybrid_arrays(rng, layers=(1, 1), width=64, C=3, old_gn=True):
    """vit_jax R50 keys; GroupNorm params as (1, 1, 1, C) in old files, (C,) in newer ones."""
    r = lambda *s: rng.normal(0, 0.3, s).astype(np.float32)  # noqa: E731
    gn = (lambda c: (1 + r(1, 1, 1, c), r(1, 1, 1, c))) if old_gn else (lambda c: (1 + r(c), r(c)))
    a = {"conv_root/kernel": r(7, 7, C, width)}
    a["gn_root/scale"], a["gn_root/bias"] = gn(width)
    cin = width
    for s, units in enumerate(layers):
        mid = width * 2**s
        for u in range(units):
            p = f"block{s + 1}/unit{u + 1}/"
            for name, shape in (("1", (1, 1, cin, mid)), ("2", (3, 3, mid, mid)), ("3", (1, 1, mid, 4 * mid))):
                a[f"{p}conv{name}/kernel"] = r(*shape)
                a[f"{p}gn{name}/scale"], a[f"{p}gn{name}/bias"] = gn(shape[-1])
            if u == 0:
                a[f"{p}conv_proj/kernel"] = r(1, 1, cin, 4 * mid)
                a[f"{p}gn_proj/scale"], a[f"{p}gn_proj/bias"] = gn(4 * mid)
            cin = 4 * mid
    return a, cin


def write_npz(path: Path, arrays: dict, prefix: str = "") -> Path:
    np.savez(path, **{prefix + k: v for k, v in arrays.items()})
    return path


# ----------------------------------------------------------------------------- independent NumPy reference
def np_layernorm(x, g, b, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def np_conv_same(x, k, stride):
    """NHWC conv with TF 'SAME' padding (extra pixel bottom/right), kernel (kh, kw, cin, cout)."""
    kh, kw = k.shape[:2]
    pads = []
    for size, kk in ((x.shape[1], kh), (x.shape[2], kw)):
        out = -(-size // stride)
        total = max((out - 1) * stride + kk - size, 0)
        pads.append((total // 2, total - total // 2))
    x = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("nhwcij,ijcd->nhwd", win, k)


def np_stdconv(x, k, stride):
    k = (k - k.mean(axis=(0, 1, 2))) / (k.std(axis=(0, 1, 2)) + 1e-5)
    return np_conv_same(x, k, stride)


def np_groupnorm(x, g, b, groups=32, eps=1e-6):
    n, h, w, c = x.shape
    xg = x.reshape(n, h, w, groups, c // groups)
    mu = xg.mean(axis=(1, 2, 4), keepdims=True)
    var = xg.var(axis=(1, 2, 4), keepdims=True)
    return ((xg - mu) / np.sqrt(var + eps)).reshape(n, h, w, c) * g.reshape(-1) + b.reshape(-1)


def np_maxpool_same(x):
    h = x.shape[1]
    total = max((-(-h // 2) - 1) * 2 + 3 - h, 0)
    pad = (total // 2, total - total // 2)
    x = np.pad(x, ((0, 0), pad, pad, (0, 0)), constant_values=-np.inf)
    return np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(-1, -2))


def np_resnet(a, x, layers):
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    x = relu(np_groupnorm(np_stdconv(x, a["conv_root/kernel"], 2), a["gn_root/scale"], a["gn_root/bias"]))
    x = np_maxpool_same(x)
    for s, units in enumerate(layers):
        for u in range(units):
            p, stride = f"block{s + 1}/unit{u + 1}/", (2 if s > 0 and u == 0 else 1)
            res = x
            if f"{p}conv_proj/kernel" in a:
                res = np_groupnorm(
                    np_stdconv(x, a[f"{p}conv_proj/kernel"], stride), a[f"{p}gn_proj/scale"], a[f"{p}gn_proj/bias"]
                )
            y = relu(np_groupnorm(np_stdconv(x, a[f"{p}conv1/kernel"], 1), a[f"{p}gn1/scale"], a[f"{p}gn1/bias"]))
            y = relu(np_groupnorm(np_stdconv(y, a[f"{p}conv2/kernel"], stride), a[f"{p}gn2/scale"], a[f"{p}gn2/bias"]))
            y = np_groupnorm(np_stdconv(y, a[f"{p}conv3/kernel"], 1), a[f"{p}gn3/scale"], a[f"{p}gn3/bias"])
            x = relu(res + y)
    return x


def np_vit(a, x_nchw, names=RELEASED, layers=None):
    """The original's forward pass from the npz arrays: NHWC, kernels as stored, tanh GELU, eps 1e-6."""
    ln1, att, ln2, mb = names
    x = x_nchw.transpose(0, 2, 3, 1).astype(np.float64)
    if layers is not None:
        x = np_resnet(a, x, layers)
    k = a["embedding/kernel"]
    P = k.shape[0]
    n, h, w, c = x.shape
    patches = x.reshape(n, h // P, P, w // P, P, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, -1, P * P * c)
    z = patches @ k.reshape(-1, k.shape[-1]) + a["embedding/bias"]
    if "cls" in a:
        z = np.concatenate([np.broadcast_to(a["cls"], (n, 1, z.shape[-1])), z], axis=1)
    z = z + a["Transformer/posembed_input/pos_embedding"]
    i = 0
    while f"Transformer/encoderblock_{i}/{ln1}/scale" in a:
        b = f"Transformer/encoderblock_{i}/"
        y = np_layernorm(z, a[f"{b}{ln1}/scale"], a[f"{b}{ln1}/bias"])
        q, kk, v = (
            np.einsum("ntd,dhk->nhtk", y, a[f"{b}{att}/{m}/kernel"]) + a[f"{b}{att}/{m}/bias"][None, :, None]
            for m in ("query", "key", "value")
        )
        logits = np.einsum("nhtk,nhsk->nhts", q, kk) / np.sqrt(q.shape[-1])
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("nhts,nhsk->nhtk", p, v)
        z = z + np.einsum("nhtk,hkd->ntd", o, a[f"{b}{att}/out/kernel"]) + a[f"{b}{att}/out/bias"]
        y = np_layernorm(z, a[f"{b}{ln2}/scale"], a[f"{b}{ln2}/bias"])
        y = np_gelu_tanh(y @ a[f"{b}{mb}/Dense_0/kernel"] + a[f"{b}{mb}/Dense_0/bias"])
        z = z + y @ a[f"{b}{mb}/Dense_1/kernel"] + a[f"{b}{mb}/Dense_1/bias"]
        i += 1
    z = np_layernorm(z, a["Transformer/encoder_norm/scale"], a["Transformer/encoder_norm/bias"])
    y = z[:, 0] if "cls" in a else z.mean(axis=1)
    if "pre_logits/kernel" in a:
        y = np.tanh(y @ a["pre_logits/kernel"] + a["pre_logits/bias"])
    return y @ a["head/kernel"] + a["head/bias"]


def assert_close(ours: torch.Tensor, ref: np.ndarray, rel: float = 1e-5) -> float:
    delta = float(np.abs(ours.detach().double().numpy() - ref).max())
    assert delta <= rel * max(1.0, float(np.abs(ref).max())), delta
    return delta


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize(
    "names,prefix,kw",
    [
        (RELEASED, "", dict()),
        (RELEASED, "opt/target/", dict(rep=24)),
        (NEWER, "params/", dict(token=False, heads=2, P=2, grid=4)),
        (NEWER, "", dict(D=48, heads=3, mlp=64, depth=3, K=10)),
    ],
)
def test_npz_layouts_match_numpy_forward(tmp_path: Path, names, prefix, kw) -> None:
    rng = np.random.default_rng(0)
    a = vit_arrays(rng, names=names, **kw)
    f = write_npz(tmp_path / "ViT.npz", a, prefix)
    if prefix == "opt/target/":  # optimizer state outside the prefix is ignored
        np.savez(f, **{prefix + k: v for k, v in a.items()}, **{"opt/state/step": np.zeros(())})
    assert detect_format(f) == "npz"
    m = vitkit.load_pretrained(f)
    cfg = m.config
    D = kw.get("D", 32)
    grid, P = kw.get("grid", 3), kw.get("P", 4)
    assert (cfg.width, cfg.num_heads, cfg.depth, cfg.mlp_dim) == (
        D,
        kw.get("heads", 4),
        kw.get("depth", 2),
        kw.get("mlp", 48),
    )
    assert (cfg.patch_size, cfg.img_size, cfg.num_classes) == (P, (grid * P,) * 2, kw.get("K", 5))
    assert cfg.pooling == ("token" if kw.get("token", True) else "gap")
    assert cfg.representation_size == kw.get("rep") and (cfg.gelu, cfg.ln_eps) == ("tanh", 1e-6)
    assert not m.training and m.preprocess.mean == (0.5, 0.5, 0.5) and m.preprocess.std == (0.5, 0.5, 0.5)
    x = np.random.default_rng(1).normal(size=(2, 3, grid * P, grid * P)).astype(np.float32)
    with torch.no_grad():
        assert_close(m(torch.from_numpy(x)), np_vit(a, x, names))


def test_reference_tells_tanh_from_exact_gelu(tmp_path: Path) -> None:
    """The reference is sharp enough to tell the GELU flavours apart: exact GELU misses it by > 1e-4."""
    a = vit_arrays(np.random.default_rng(0))
    m = vitkit.load_pretrained(write_npz(tmp_path / "a.npz", a))
    x = np.random.default_rng(1).normal(size=(2, 3, 12, 12)).astype(np.float32)
    ref = np_vit(a, x)
    m2 = vitkit.VisionTransformer(m.config.replace(gelu="exact"))
    m2.load_state_dict(m.state_dict())
    with torch.no_grad():
        assert np.abs(m2.eval()(torch.from_numpy(x)).double().numpy() - ref).max() > 1e-4


def test_round_trip_uses_released_key_names(tmp_path: Path) -> None:
    a = vit_arrays(np.random.default_rng(2), rep=16)
    src = write_npz(tmp_path / "src.npz", a)
    m = vitkit.load_pretrained(src)
    out = vitkit.save_pretrained(m, tmp_path / "out.npz", format="npz")
    b = read_npz(out)
    assert set(b) == set(a)  # identical key names and nothing else
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # the newer-Flax naming round-trips into the released naming with the same numbers
    n = vit_arrays(np.random.default_rng(2), rep=16, names=NEWER)
    folder = tmp_path / "dir"
    vitkit.save_pretrained(vitkit.load_pretrained(write_npz(tmp_path / "n.npz", n)), folder, format="npz")
    c = read_npz(folder / "model.npz")
    np.testing.assert_array_equal(
        c["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"],
        n["Transformer/encoderblock_1/MultiHeadDotProductAttention_0/query/kernel"],
    )
    assert detect_format(folder) == "npz"


def test_vitkit_to_npz_to_vitkit_same_logits(tmp_path: Path) -> None:
    m = vitkit.VisionTransformer(
        vitkit.ViTConfig(img_size=(16, 24), patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=40, num_classes=3)
    )
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.3)
    f = vitkit.save_pretrained(m, tmp_path / "m.npz", format="npz")
    a = read_npz(f)
    assert a["Transformer/posembed_input/pos_embedding"].shape == (1, 1 + 6, 32)
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        assert_close(m.eval()(x), np_vit({k: v.astype(np.float64) for k, v in a.items()}, x.numpy()))
        # the non-square grid is not in the .npz: vitkit's sidecar records the size it was saved at
        back = vitkit.load_pretrained(f)
        assert back.config.img_size == (16, 24)
        assert_close(back(x), m(x).double().numpy())
    from vitkit.formats.npz import sidecar_path

    sidecar_path(f).unlink()  # the bare file (as another tool would hand it over) cannot say its grid
    with pytest.raises(ValueError, match="not a square grid"):
        vitkit.load_pretrained(f)


@pytest.mark.parametrize("old_gn", [True, False])
def test_hybrid_r50_numerics(tmp_path: Path, old_gn: bool) -> None:
    """StdConv (w-mu)/(sigma+1e-5), GroupNorm(32, 1e-6), SAME padding and pool, post-activation units."""
    rng = np.random.default_rng(3)
    layers = (1, 2)
    h, cout = hybrid_arrays(rng, layers, old_gn=old_gn)
    a = vit_arrays(rng, P=1, C=cout, grid=2, D=32, heads=2)
    a.update(h)
    f = write_npz(tmp_path / "R50+ViT.npz", a, "opt/target/" if old_gn else "")
    m = vitkit.load_pretrained(f)
    cfg = m.config
    assert cfg.resnet_layers == layers and cfg.resnet_width == 1 and cfg.patch_size == 1
    assert cfg.img_size == (16, 16) and cfg.total_stride == 8 and cfg.in_chans == 3
    x = np.random.default_rng(4).normal(size=(1, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        assert_close(m(torch.from_numpy(x)), np_vit(a, x, layers=layers), rel=1e-4)
    out = vitkit.save_pretrained(m, tmp_path / "again.npz", format="npz")
    b = read_npz(out)
    assert set(b) == set(a) and b["gn_root/scale"].shape == (64,)
    np.testing.assert_array_equal(b["block2/unit2/conv2/kernel"], a["block2/unit2/conv2/kernel"])


@pytest.mark.parametrize("factor, layers", [(0.5, (1,)), (2, (1,)), (2, (2, 2)), (0.5, (3, 4, 9)), (0.5, (3, 4, 6, 3))])
def test_hybrid_width_factor_and_stages_are_read_from_shapes(tmp_path: Path, factor: float, layers: tuple) -> None:
    """Random hybrids in the released key layout: the root conv (7, 7, 3, 64·w) gives the width factor, the
    unit keys the units per stage; the output agrees with the independent NumPy forward."""
    rng = np.random.default_rng(11)
    h, cout = hybrid_arrays(rng, layers, width=int(64 * factor), old_gn=False)
    a = vit_arrays(rng, P=1, C=cout, grid=2, D=32, heads=2)
    a.update(h)
    m = vitkit.load_pretrained(write_npz(tmp_path / "hybrid.npz", a))
    stride = 4 * 2 ** (len(layers) - 1)
    assert (m.config.resnet_width, m.config.resnet_layers, m.config.total_stride) == (factor, layers, stride)
    x = np.random.default_rng(12).normal(size=(1, 3, 2 * stride, 2 * stride)).astype(np.float32)
    with torch.no_grad():
        assert_close(m(torch.from_numpy(x)), np_vit({k: v.astype(np.float64) for k, v in a.items()}, x, layers=layers),
                     rel=1e-4)


def test_big_vision_scan_layout(tmp_path: Path) -> None:
    a = vit_arrays(np.random.default_rng(5), names=NEWER, token=False)
    scan = {k: v for k, v in a.items() if not k.startswith("Transformer/encoderblock_")}
    scan["pos_embedding"] = scan.pop("Transformer/posembed_input/pos_embedding")
    for k in [k for k in a if k.startswith("Transformer/encoderblock_0/")]:
        rest = k[len("Transformer/encoderblock_0/") :]
        scan[f"Transformer/encoderblock/{rest}"] = np.stack(
            [a[f"Transformer/encoderblock_{i}/{rest}"] for i in range(2)]
        )
    m = vitkit.load_pretrained(write_npz(tmp_path / "bv.npz", scan, "params/img/"))
    x = np.random.default_rng(6).normal(size=(2, 3, 12, 12)).astype(np.float32)
    with torch.no_grad():
        assert_close(m(torch.from_numpy(x)), np_vit(a, x, NEWER))


def test_new_head_and_resolution(tmp_path: Path) -> None:
    a = vit_arrays(np.random.default_rng(7), rep=16)
    m = vitkit.load_pretrained(write_npz(tmp_path / "a.npz", a), num_classes=3, img_size=20)
    assert m.pre_logits is None and m.config.num_classes == 3 and torch.count_nonzero(m.head.weight) == 0
    assert m.config.img_size == (20, 20) and m.pos_embed.shape == (1, 1 + 25, 32)
    np.testing.assert_array_equal(
        m.pos_embed[0, 0].detach().numpy(), a["Transformer/posembed_input/pos_embedding"][0, 0]
    )
    assert m(torch.randn(1, 3, 20, 20)).shape == (1, 3)


def test_errors_name_file_key_and_shapes(tmp_path: Path) -> None:
    a = vit_arrays(np.random.default_rng(8))
    key = "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"
    bad = dict(a, **{key: np.zeros((48, 31), np.float32)})
    f = write_npz(tmp_path / "bad.npz", bad)
    with pytest.raises(ValueError, match=r"bad\.npz.*Dense_1/kernel.*\(48, 31\), expected \(48, 32\)"):
        vitkit.load_pretrained(f)
    missing = {k: v for k, v in a.items() if k != "Transformer/encoderblock_0/LayerNorm_2/bias"}
    with pytest.raises(ValueError, match=r"missing.*encoderblock_0/LayerNorm_2/bias"):
        vitkit.load_pretrained(write_npz(tmp_path / "missing.npz", missing))
    with pytest.raises(ValueError, match=r"unrecognised.*MAPHead_0/probe"):
        vitkit.load_pretrained(write_npz(tmp_path / "map.npz", dict(a, **{"MAPHead_0/probe": np.zeros((1, 1, 32))})))
    pickled = tmp_path / "evil.npz"
    pickled.write_bytes(pickle.dumps({"embedding/kernel": [1, 2]}))
    with pytest.raises(ValueError, match=r"evil\.npz.*never unpickles"):
        vitkit.load_pretrained(pickled)
    obj = tmp_path / "obj.npz"
    np.savez(obj, **dict(a, cls=np.array([object()], dtype=object)))
    with pytest.raises(ValueError, match=r"obj\.npz"):
        vitkit.load_pretrained(obj)


def test_npz_refuses_numerics_it_cannot_carry(tmp_path: Path) -> None:
    m = vitkit.VisionTransformer(
        vitkit.ViTConfig(img_size=16, patch_size=8, width=32, depth=1, num_heads=2, mlp_dim=32, gelu="exact")
    )
    with pytest.raises(ValueError, match="tanh GELU"):
        vitkit.save_pretrained(m, tmp_path / "x.npz", format="npz")
    assert not (tmp_path / "x.npz").exists()
