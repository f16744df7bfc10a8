"""`vitkit inspect` (paper §4.5): known-answer tests of the §4.5 maths, then the figures end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from vitkit.cli import main
from vitkit.formats.native import save_native
from vitkit.inspect import (
    InspectImage,
    attention_rollout,
    embedding_filter_components,
    inspect_model,
    mean_attention_distance,
    output_token_attention,
    patch_centers,
    position_embedding_similarity,
    uniform_attention_distance,
)
from vitkit.inspect.report import collect_attention
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.vit import VisionTransformer, ViTConfig

FIGURES = ["embedding_filters", "position_embedding_similarity", "attention_distance", "attention_maps"]


def _close(a: torch.Tensor, b: torch.Tensor | list, tol: float = 1e-6) -> None:
    b = torch.as_tensor(b, dtype=torch.float64)
    torch.testing.assert_close(a.to(torch.float64), b, atol=tol, rtol=0)


# ------------------------------------------------------------------ mean attention distance


def test_patch_centres_are_at_half_stride_offsets_row_major() -> None:
    _close(patch_centers((2, 3), 16), [[8, 8], [8, 24], [8, 40], [24, 8], [24, 24], [24, 40]])


@pytest.mark.parametrize("prefix", [0, 1])
def test_identity_attention_has_distance_zero(prefix: int) -> None:
    t = prefix + 3 * 4
    attn = torch.eye(t).expand(2, 5, t, t)  # (B, heads, T, T)
    d = mean_attention_distance(attn, (3, 4), stride=16, num_prefix_tokens=prefix)
    assert d.shape == (2, 5)
    _close(d, torch.zeros(2, 5))


@pytest.mark.parametrize("prefix", [0, 1])
def test_uniform_attention_matches_closed_form(prefix: int) -> None:
    # 2x2 grid, stride 4: from any centre the others are at 0, 4, 4 and 4*sqrt(2) pixels.
    t = prefix + 4
    d = mean_attention_distance(torch.full((1, 1, t, t), 1 / t), (2, 2), stride=4, num_prefix_tokens=prefix)
    _close(d, [[(0 + 4 + 4 + 4 * math.sqrt(2)) / 4]])
    # 1x3 grid, stride 5: |i - j| * 5 averaged over the 9 ordered pairs = 8/9 * 5.
    d = mean_attention_distance(torch.full((1, 1, 3, 3), 1 / 3), (1, 3), stride=5)
    _close(d, [[8 / 9 * 5]])
    assert uniform_attention_distance((1, 3), 5) == pytest.approx(8 / 9 * 5)


def test_class_token_mass_is_excluded_and_patch_attention_renormalised() -> None:
    # 1x2 grid + class token: every patch puts half its attention on the class token and half on
    # the other patch, 10 px away; the class token's own row must not count.
    attn = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]])[None, None]
    _close(mean_attention_distance(attn, (1, 2), stride=10, num_prefix_tokens=1), [[10.0]])


def test_distance_agrees_with_a_brute_force_loop() -> None:
    gh, gw, s, p = 2, 3, 7, 1
    attn = torch.rand(1, 1, p + gh * gw, p + gh * gw, dtype=torch.float64).softmax(-1)
    expected = 0.0
    for q in range(gh * gw):
        w = attn[0, 0, p + q, p:]
        w = w / w.sum()
        for k in range(gh * gw):
            dy, dx = (q // gw - k // gw) * s, (q % gw - k % gw) * s
            expected += float(w[k]) * math.hypot(dy, dx) / (gh * gw)
    _close(mean_attention_distance(attn, (gh, gw), s, p), [[expected]], tol=1e-9)


def test_distance_rejects_a_mismatched_grid() -> None:
    with pytest.raises(ValueError, match="prefix tokens"):
        mean_attention_distance(torch.eye(5)[None, None], (2, 2), 4, num_prefix_tokens=0)


# ------------------------------------------------------------------ attention rollout


def test_rollout_of_single_layer_identity_is_one_hot() -> None:
    r = attention_rollout([torch.eye(5).expand(1, 3, 5, 5)])
    _close(r, torch.eye(5)[None])  # every row one-hot on its own token
    cls = output_token_attention(r, "token", 1)
    _close(cls, torch.zeros(1, 4))  # the class token only "sees" itself, none of the patches


def test_rollout_multiplies_layers_from_the_input_up() -> None:
    a1 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])[None, None]  # layer 1: (A + I) / 2 = [[.5, .5], [0, 1]]
    a2 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])[None, None]  # layer 2: (A + I) / 2 = [[1, 0], [.5, .5]]
    # R = A'_2 @ A'_1 (the other order would give [[.75, .25], [.5, .5]]).
    _close(attention_rollout([a1, a2]), [[[0.5, 0.5], [0.25, 0.75]]])


def test_rollout_averages_heads_and_can_skip_the_residual() -> None:
    heads = torch.stack([torch.eye(2), torch.tensor([[0.0, 1.0], [1.0, 0.0]])])[None]  # identity, swap
    _close(attention_rollout([heads], add_residual=False), [[[0.5, 0.5], [0.5, 0.5]]])
    _close(attention_rollout([heads]), [[[0.75, 0.25], [0.25, 0.75]]])


def test_output_token_is_the_class_row_or_the_mean_over_tokens_for_gap() -> None:
    attn = torch.tensor([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.0, 0.5, 0.5]])
    _close(output_token_attention(attn, "token", 1), [0.2, 0.7])
    _close(output_token_attention(attn, "gap", 0), [0.4 / 3, 1.0 / 3, 1.6 / 3])
    with pytest.raises(ValueError):
        output_token_attention(attn, "token", 0)


# ------------------------------------------------------------------ embeddings


def test_position_similarity_of_a_hand_made_embedding() -> None:
    # 2x2 grid; row-major patches (0,0), (0,1), (1,0), (1,1).
    pe = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    s = position_embedding_similarity(pe, (2, 2))
    assert s.shape == (2, 2, 2, 2)
    r = 1 / math.sqrt(2)
    _close(s[0, 0], [[1, 0], [r, -1]])
    _close(s[0, 1], [[0, 1], [r, 0]])
    _close(s[1, 0], [[r, r], [1, -r]])
    _close(s[1, 1], [[-1, 0], [-r, 1]])
    wide = position_embedding_similarity(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -1.0]]), (1, 3))
    assert wide.shape == (1, 3, 1, 3)  # a non-square grid keeps rows and columns apart
    _close(wide[0, 1], [[r, 1, -r]])


def test_filter_components_recover_planted_directions_and_variances() -> None:
    u = torch.zeros(1 * 2 * 2)
    u[0] = 1.0
    w = torch.tensor([0.0, 0.6, 0.8, 0.0])  # orthonormal to u
    a = torch.tensor([2.0, -2.0, 2.0, -2.0])  # variance 4 along u
    b = torch.tensor([1.0, 1.0, -1.0, -1.0])  # variance 1 along w, uncorrelated with a
    mean = torch.tensor([5.0, -3.0, 1.0, 2.0])  # a shared offset PCA must remove
    filters = (mean + a[:, None] * u + b[:, None] * w).reshape(4, 1, 2, 2)
    comps, ratio = embedding_filter_components(filters, k=3)
    assert comps.shape == (3, 1, 2, 2)
    _close(ratio[:2], [0.8, 0.2], tol=1e-5)
    _close(comps[0].reshape(-1), u, tol=1e-5)  # signs fixed: largest entry positive
    _close(comps[1].reshape(-1), w, tol=1e-5)


# ------------------------------------------------------------------ models, figures, CLI

VARIANTS = [
    dict(pooling="token", posemb="learn1d"),
    dict(pooling="token", posemb="learn2d"),
    dict(pooling="gap", posemb="learn1d"),
    dict(pooling="gap", posemb="none"),
    dict(pooling="token", posemb="none", resnet_layers=(1,), patch_size=1),
]


def _tiny(in_chans: int = 3, **kw) -> VisionTransformer:
    base = dict(img_size=(16, 16), patch_size=4, in_chans=in_chans, num_classes=3, width=16, depth=2, num_heads=2)
    base.update(mlp_dim=32, name="tiny")
    base.update(kw)
    model = VisionTransformer(ViTConfig(**base)).eval()
    with torch.no_grad():  # a non-trivial head so the probabilities are not uniform
        model.head.weight.normal_()
    model.preprocess = PreprocessConfig(img_size=(16, 16), mean=(0.5,) * in_chans, std=(0.5,) * in_chans)
    return model


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
def test_attention_comes_from_the_models_own_forward_pass(variant: dict) -> None:
    model = _tiny(**variant)
    imgs = [InspectImage(f"x{i}", torch.rand(3, 16, 16)) for i in range(3)]
    stats = collect_attention(model, imgs, batch_size=2, progress=False)
    with torch.no_grad():
        ref = model(model.preprocess.normalize(torch.stack([im.pixels for im in imgs]))).softmax(-1)
    _close(stats.probs, ref, tol=1e-5)  # same pass that yielded the attention gives the model's output
    n, layers, heads = 16, 2, 2
    assert stats.grid == (4, 4)
    assert stats.distance.shape == (3, layers, heads) and stats.last_heads.shape == (3, heads, n)
    max_d = math.hypot(3 * model.config.total_stride, 3 * model.config.total_stride)
    assert bool((stats.distance >= 0).all()) and bool((stats.distance <= max_d).all())
    patch_mass = stats.rollout.sum(-1)
    if variant["pooling"] == "gap":  # no prefix token: all of the output's mass is on patches
        _close(patch_mass, torch.ones(3), tol=1e-5)
    else:
        assert bool((patch_mass > 0).all()) and bool((patch_mass < 1).all())


@pytest.mark.parametrize("variant", [VARIANTS[3], VARIANTS[4]], ids=["gap-none", "hybrid"])
def test_inspect_model_skips_figures_that_do_not_apply(tmp_path: Path, variant: dict) -> None:
    summary = inspect_model(_tiny(**variant), [InspectImage("a", torch.rand(3, 16, 16))], tmp_path, progress=False,
                            num_components=4)  # (drawn or skipped as with 16: whether, not how many, is read)
    figs = summary["figures"]
    assert "skipped" in figs["position_embedding_similarity"]
    assert ("skipped" in figs["embedding_filters"]) == ("resnet_layers" in variant)
    for key in ("attention_distance", "attention_maps"):
        assert (tmp_path / figs[key]["png"]).stat().st_size > 1000


def test_cli_on_a_one_channel_checkpoint_uses_demo_test_digits(tmp_path: Path) -> None:
    model = _tiny(in_chans=1)
    model.preprocess.labels = ["zero", "one", "two"]
    save_native(model, tmp_path / "ckpt")
    out = tmp_path / "out"
    rc = main(["inspect", "--model", str(tmp_path / "ckpt"), "--out", str(out), "--num-images", "5", "--no-progress",
               "--components", "4"])  # (4 panels of E's components, not all 16: the figure is not what is read here)
    assert rc == 0
    for name in FIGURES:
        assert (out / f"{name}.png").stat().st_size > 1000
        json.loads((out / f"{name}.json").read_text())
    summary = json.loads((out / "inspect.json").read_text())
    assert [im["name"] for im in summary["images"]] == [f"test image #{i}" for i in range(5)]
    assert summary["images"][0]["prediction"]["label"] in model.preprocess.labels
    dist = json.loads((out / "attention_distance.json").read_text())
    assert dist["num_images"] == 5 and len(dist["mean"]) == 2 and len(dist["mean"][0]) == 2
    sim = json.loads((out / "position_embedding_similarity.json").read_text())["similarity"]
    assert all(sim[i][j][i][j] == pytest.approx(1.0, abs=1e-4) for i in range(4) for j in range(4))
    maps = json.loads((out / "attention_maps.json").read_text())["images"]
    assert len(maps) == 5 and len(maps[0]["rollout"]) == 4 and len(maps[0]["last_layer_heads"]) == 2


@pytest.mark.usefixtures("figures_not_encoded")  # its figures: drawn, not laid out nor encoded (none read)
def test_cli_reports_unreadable_images_and_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("skimage")
    save_native(_tiny(), tmp_path / "ckpt")
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image")
    out = tmp_path / "out"
    args = ["inspect", "--model", str(tmp_path / "ckpt"), "--out", str(out), "--no-progress", "--components", "4",
            "--images"]
    assert main(args + [str(bad), "skimage:chelsea"]) == 1  # the one exit rule: done, inputs skipped and named
    err = capsys.readouterr().err
    assert "broken.png" in err and "skipping" in err
    assert [im["name"] for im in json.loads((out / "inspect.json").read_text())["images"]] == ["chelsea"]
    assert main(args + [str(bad), "skimage:no_such_photo", "--overwrite"]) == 2
    assert "skimage:no_such_photo is not one of scikit-image's bundled photos" in capsys.readouterr().err


def _write_original_npz(path: Path, d: int = 16, heads: int = 2, depth: int = 2, p: int = 4, grid: int = 4) -> None:
    """A tiny checkpoint in vit_jax's released .npz layout, written by hand (not by vitkit)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def r(*shape: int) -> np.ndarray:
        return (0.2 * rng.standard_normal(shape)).astype(np.float32)

    a = {
        "embedding/kernel": r(p, p, 3, d),
        "embedding/bias": r(d),
        "cls": r(1, 1, d),
        "Transformer/posembed_input/pos_embedding": r(1, 1 + grid * grid, d),
        "Transformer/encoder_norm/scale": 1 + r(d),
        "Transformer/encoder_norm/bias": r(d),
        "head/kernel": r(d, 3),
        "head/bias": r(3),
    }
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            a[b + ln + "/scale"], a[b + ln + "/bias"] = 1 + r(d), r(d)
        for qkv in ("query", "key", "value"):
            a[b + f"MultiHeadDotProductAttention_1/{qkv}/kernel"] = r(d, heads, d // heads)
            a[b + f"MultiHeadDotProductAttention_1/{qkv}/bias"] = r(heads, d // heads)
        a[b + "MultiHeadDotProductAttention_1/out/kernel"] = r(heads, d // heads, d)
        a[b + "MultiHeadDotProductAttention_1/out/bias"] = r(d)
        a[b + "MlpBlock_3/Dense_0/kernel"], a[b + "MlpBlock_3/Dense_0/bias"] = r(d, 2 * d), r(2 * d)
        a[b + "MlpBlock_3/Dense_1/kernel"], a[b + "MlpBlock_3/Dense_1/bias"] = r(2 * d, d), r(d)
    np.savez(path, **a)


def test_cli_inspects_an_original_format_npz_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("vitkit.formats.npz")
    pytest.importorskip("skimage")
    _write_original_npz(tmp_path / "ViT-tiny.npz")
    out = tmp_path / "out"
    rc = main(
        ["inspect", "--model", str(tmp_path / "ViT-tiny.npz"), "--out", str(out), "--num-images", "2", "--no-progress",
         "--components", "4"]
    )
    assert rc == 0
    for name in FIGURES:
        assert (out / f"{name}.png").stat().st_size > 1000
    assert json.loads((out / "embedding_filters.json").read_text())["filter_shape"] == [16, 3, 4, 4]
    summary = json.loads((out / "inspect.json").read_text())
    assert [im["name"] for im in summary["images"]] == ["chelsea", "astronaut"]  # 3-channel default: photos
    assert summary["model"]["grid_size"] == [4, 4]
