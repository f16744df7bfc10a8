"""Masked patch prediction (§4.6): targets, the corruption recipe, and that it learns on real digits."""

import json
import math

import numpy as np
import pytest
import torch

from vitkit.data.digits import load_digits_split
from vitkit.models.mpp import MaskedPatchPrediction, mean_colour_targets
from vitkit.models.vit import VisionTransformer, ViTConfig

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read


def tiny_vit(**kw) -> VisionTransformer:
    cfg = dict(img_size=16, patch_size=4, in_chans=3, width=32, depth=2, num_heads=4, mlp_dim=64, num_classes=10)
    cfg.update(kw)
    return VisionTransformer(ViTConfig(**cfg))


def test_mean_colour_targets_by_hand() -> None:
    rng = np.random.default_rng(0)
    px = rng.random((2, 3, 8, 12)).astype(np.float32)
    got = mean_colour_targets(torch.from_numpy(px), patch=4).numpy()
    want = np.zeros((2, 6), dtype=np.int64)
    for b in range(2):
        for i in range(2):
            for j in range(3):
                m = px[b, :, 4 * i : 4 * i + 4, 4 * j : 4 * j + 4].mean(axis=(1, 2))
                q = np.minimum((m * 8).astype(np.int64), 7)
                want[b, i * 3 + j] = q[0] * 64 + q[1] * 8 + q[2]
    np.testing.assert_array_equal(got, want)
    assert mean_colour_targets(torch.ones(1, 3, 4, 4), 4).item() == 511  # white: the last of 512 colours
    assert mean_colour_targets(torch.zeros(1, 1, 4, 4), 4).item() == 0


def test_corruption_plan_follows_the_paper() -> None:
    mpp = MaskedPatchPrediction(tiny_vit(), (0.5,) * 3, (0.5,) * 3)
    B, N = 400, 64
    corrupted, use_mask, source = mpp.corruption_plan(B, N, torch.Generator().manual_seed(0))
    assert torch.all(corrupted.sum(1) == N // 2)  # exactly 50% of each image's patches
    n = corrupted.sum().item()
    replaced = source != torch.arange(N)
    assert not torch.any(use_mask & ~corrupted) and not torch.any(replaced & ~corrupted)
    assert abs(use_mask.sum().item() / n - 0.8) < 0.02
    assert abs(replaced.sum().item() / n - 0.1) < 0.02
    kept = corrupted & ~use_mask & ~replaced
    assert abs(kept.sum().item() / n - 0.1) < 0.02


def test_encoder_sees_mask_token_and_swapped_patches() -> None:
    vit = tiny_vit().eval()
    mpp = MaskedPatchPrediction(vit, (0.5,) * 3, (0.5,) * 3)
    x = torch.randn(3, 3, 16, 16)
    seen = {}
    orig_encode = vit.encode  # what forward_features and intermediates all run (with token merging too)

    def spy(z: torch.Tensor, *args, **kwargs):
        seen["z"] = z
        return orig_encode(z, *args, **kwargs)

    vit.encode = spy
    corrupted, use_mask, source = mpp.corruption_plan(3, 16, torch.Generator().manual_seed(5))
    logits, targets, corr = mpp.predict_all(x, torch.Generator().manual_seed(5))
    assert torch.equal(corr, corrupted)
    assert logits.shape == (3, 16, 512) and targets.shape == (3, 16)
    clean = vit.patch_embed(x).flatten(2).transpose(1, 2)
    z = seen["z"][:, 1:] - vit.pos_embed[:, 1:]  # undo E_pos; the class token sits at 0
    for b in range(3):
        for i in range(16):
            want = mpp.mask_token[0, 0] if use_mask[b, i] else clean[b, source[b, i]]
            torch.testing.assert_close(z[b, i], want, rtol=1e-5, atol=1e-5)


def test_learns_colours_of_masked_digit_patches() -> None:
    """60 Adam steps on real digits push the loss on corrupted patches well below the marginal entropy."""
    train, _ = load_digits_split()
    x = torch.nn.functional.interpolate(train.images, size=16, mode="bilinear", align_corners=False)
    x = (x - 0.5) / 0.5
    vit = tiny_vit(in_chans=1)
    mpp = MaskedPatchPrediction(vit, (0.5,), (0.5,))
    assert mpp.num_classes == 8
    t = mean_colour_targets(x * 0.5 + 0.5, 4).flatten()
    p = torch.bincount(t, minlength=8).float() / t.numel()
    entropy = -(p[p > 0] * p[p > 0].log()).sum().item()  # loss of the best constant prediction
    opt = torch.optim.Adam(mpp.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        idx = torch.randint(0, len(x), (128,), generator=gen)
        loss, _ = mpp.loss(x[idx], gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final, acc = mpp.loss(x[:512], torch.Generator().manual_seed(1))
    assert final.item() < 0.75 * entropy, (final.item(), entropy)
    assert acc > p.max().item() + 0.1  # better than always guessing the most common colour
    assert math.isfinite(final.item())


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="mean/std need 3"):
        MaskedPatchPrediction(tiny_vit(), (0.5,), (0.5,))
    with pytest.raises(ValueError, match="corruption rates"):
        MaskedPatchPrediction(tiny_vit(), (0.5,) * 3, (0.5,) * 3, replace_mask=0.95, replace_random=0.1)


SMALL = ["model.width=32", "model.depth=2", "model.num_heads=2", "model.mlp_dim=64", "train.tensorboard=false",
         "data.num_workers=0", "data.augment='none'", "train.ckpt_every=0", "train.batch_size=64"]


def vit_patch(cfg) -> int:  # noqa: ANN001
    return int(cfg.model.arch["patch_size"])


def test_engine_pretrains_with_mpp_then_finetunes(tmp_path) -> None:
    """`train.objective = "mpp"` through the one engine: the colour loss falls, the saved ViT fine-tunes."""
    from vitkit import load_pretrained
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the loss logged every 10 steps: the first record is steps 1-10, near the start (every 20, it sat at the
        # plateau the colours reach by step 20, and the bar below held by 1 % on torch 2.13 and failed on 2.11)
        cfg = load_config("digits_mpp", SMALL + ["schedule.steps=60", "schedule.warmup_steps=6", "train.eval_every=30",
                                                 "optim.lr=3e-3", "train.log_every=10"])
        res = run_experiment(cfg, tmp_path / "mpp", progress=False)
        recs = [json.loads(ln) for ln in (tmp_path / "mpp" / "metrics.jsonl").read_text().splitlines()]
        losses = [r["loss"] for r in recs if "loss" in r]
        assert losses[-1] < 0.8 * losses[0], losses  # colour prediction is being learned
        accs = [r["train_acc"] for r in recs if "train_acc" in r]  # the masked patches' accuracy: a fraction
        assert all(0 <= a <= 1 for a in accs) and accs[-1] > accs[0], accs
        # the objective's own metric, colour accuracy on the masked patches of the test digits, beats always
        # answering the most frequent colour of those patches
        _, test = load_digits_split()
        targets = mean_colour_targets(test.images, vit_patch(cfg), 3).flatten()
        baseline = torch.bincount(targets).max().item() / targets.numel()
        print(f"MPP colour accuracy {res['test']['top1']:.3f} vs most-frequent colour {baseline:.3f}")
        assert res["test"]["top1"] > baseline + 0.02, (res["test"]["top1"], baseline)
        vit = load_pretrained(tmp_path / "mpp" / "model")  # a plain ViT, no MPP head or [mask] token
        assert vit.config.img_size == (8, 8) and not any("mask_token" in k for k in vit.state_dict())
        state = torch.load(tmp_path / "mpp" / "train_state.pt", weights_only=True)["model"]
        assert {"mask_token", "head.weight", "head.bias"} <= set(state)  # the MPP parts live in the train state
        for k, v in vit.state_dict().items():  # the saved ViT is exactly the encoder MPP trained
            assert torch.equal(v, state[f"vit.{k}"]), k
        ft = load_config("digits_finetune", SMALL + ["schedule.steps=10", "schedule.warmup_steps=2", "train.eval_every=0",
                                                     f"model.pretrained='{tmp_path / 'mpp' / 'model'}'"])
        from vitkit.train.run import build_model

        start = build_model(ft.model, [str(i) for i in range(10)], 1, ft.data)  # what the fine-tune starts from
        saved = vit.state_dict()
        for k, v in start.state_dict().items():  # the encoder MPP trained: class token, blocks, final LN
            assert k.startswith("head.") or k == "pos_embed" or torch.equal(v, saved[k]), k
        # at 16 px the 2x2 E_pos grid is resampled to 4x4 (§3.2); the class token's embedding is MPP's own
        assert torch.equal(start.pos_embed[:, 0], saved["pos_embed"][:, 0])
        assert start.head.out_features == 10 and not start.head.weight.any()  # a new zero head, nothing of MPP's
        assert start.preprocess.mean == vit.preprocess.mean and start.preprocess.std == vit.preprocess.std
        out = run_experiment(ft, tmp_path / "ft", progress=False)
        assert out["steps"] == 10 and "test" in out  # the usual fine-tuning path takes the MPP encoder
    finally:
        torch.set_num_threads(threads)


def test_paper_mpp_recipe_values_and_dry_run(tmp_path) -> None:
    from vitkit.train.config import load_config
    from vitkit.train.run import run_experiment

    cfg = load_config("pretrain_mpp_jft_b16")
    t = cfg.train
    assert cfg.objective == "mpp" and cfg.mpp.corrupt == 0.5 and cfg.mpp.bits == 3
    assert (t.lr, t.warmup_steps, t.schedule, t.steps, t.batch_size) == (2e-4, 10_000, "cosine", 1_000_000, 4096)
    tiny = ["model.width=32", "model.depth=1", "model.num_heads=2", "model.mlp_dim=64", "model.img_size=32",
            "model.patch_size=16", "train.batch_size=8", "train.tensorboard=false", "data.num_workers=0",
            "model.representation_size=16", "train.grad_accum=2"]
    res = run_experiment(load_config("pretrain_mpp_jft_b16", tiny), tmp_path, dry_run=2, progress=False, save=True)
    assert res["steps"] == 2 and (tmp_path / "model" / "model.safetensors").exists()
