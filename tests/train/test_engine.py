"""The training loop (vitkit.train.engine): what stops a run, and native-resolution training (NaViT,
data.max_patches; a NativePacker loader): images of mixed aspect ratios packed into rows, trained and evaluated at
their own sizes; what does not combine is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.cli import main
from vitkit.data.collate import NativePacker
from vitkit.data.datasets import open_splits
from vitkit.data.folders import image_folder
from vitkit.data.loader import StepLoader
from vitkit.formats import load_pretrained
from vitkit.inference.evaluate import evaluate_batches
from vitkit.models.packing import PackedBatch
from vitkit.models.preprocess import PreprocessConfig
from vitkit.train.config import load_config
from vitkit.train.engine import Trainer
from vitkit.train.run import run_experiment

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

NATIVE = ["model.img_size=16", "model.patch_size=4", "model.in_chans=3", "model.width=32", "model.depth=2",
          "model.num_heads=2", "model.mlp_dim=64", "data.channels=3", "data.augment=none", "data.max_patches=16",
          "data.min_patches=4", "data.token_drop=0.25", "data.pack_budget=32", "data.holdout=0.25",
          "schedule.warmup_steps=2", "train.batch_size=8", "train.log_every=5", "optim.lr=3e-3",
          "optim.label_smoothing=0.0"]


def _folder(root: Path) -> Path:
    """Two classes told apart only by their stripes (horizontal / vertical), drawn at mixed sizes and aspects."""
    rng = np.random.default_rng(0)
    for c in ("horizontal", "vertical"):
        (root / c).mkdir(parents=True)
        for i in range(16):
            h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
            stripes = (np.arange(h)[:, None] // 2 % 2) * np.ones((1, w)) if c == "horizontal" else \
                np.ones((h, 1)) * (np.arange(w)[None] // 2 % 2)
            px = (stripes[..., None] * 200 + rng.integers(0, 50, (h, w, 3))).astype(np.uint8)
            Image.fromarray(px).save(root / c / f"{i}.png")
    return root


def test_native_loader_packs_each_image_by_its_own_draws(tmp_path: Path) -> None:
    """A StepLoader with a NativePacker gives PackedBatch x; each image's draws (cap, dropped tokens) come from its
    place in the global batch, so two ranks' halves hold the same patches as one process's batch."""
    ds = image_folder(str(_folder(tmp_path / "imgs")), 3)[0]
    pre = PreprocessConfig(img_size=(16, 16))
    packer = NativePacker(pre, 4, 16, 32, min_patches=4, drop_rate=0.25, flip=True)
    one = StepLoader(ds, 8, packer, seed=3).load(5)
    assert isinstance(one.x, PackedBatch) and len(one.x) == len(one.y) == 8
    halves = [StepLoader(ds, 8, packer, seed=3, rank=r, world=2).load(5) for r in (0, 1)]
    assert sum(len(h.y) for h in halves) == 8

    def per_image(b) -> dict[int, torch.Tensor]:  # noqa: ANN001
        return {j: b.x.patches[b.x.image_ids == i] for i, j in enumerate(b.indices)}

    whole, split = per_image(one), {**per_image(halves[0]), **per_image(halves[1])}
    assert whole.keys() == split.keys() and all(torch.equal(whole[j], split[j]) for j in whole)


def test_train_native_learns_mixed_aspect_images(tmp_path: Path) -> None:
    """`data.max_patches`: a run trains on packed images of their own aspect ratios (resolution sampled, tokens
    dropped) and evaluates them natively; the saved model's test figure is the packed evaluation's."""
    root = _folder(tmp_path / "imgs")
    cfg = load_config("digits_demo", ["data.name=folder", f"data.path={root}", "schedule.steps=40", *NATIVE])
    res = run_experiment(cfg, tmp_path / "run", progress=False)
    assert res["test"]["top1"] >= 0.75  # stripes' direction: chance is 0.5
    lines = [ln for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"loss"' in ln]
    assert len(lines) >= 2
    model = load_pretrained(tmp_path / "run" / "model")
    test = open_splits(cfg.data)["test"]
    packer = NativePacker(model.preprocess, 4, 16, 32)
    batch = packer([test.get(i) for i in range(len(test))], train=False)
    again = evaluate_batches(model, [(batch.batch, batch.labels)])
    assert again["top1"] == pytest.approx(res["test"]["top1"])
    with torch.no_grad():  # a natively trained model is an ordinary ViT: it runs at its square size as well
        assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 2)


@pytest.mark.parametrize(("extra", "pattern"), [
    (["train.grad_accum=2"], "train.grad_accum = 2"),
    (["train.mixup=0.2"], "train.mixup"),
    (["data.augment=inception"], "set data.augment = none"),
    (["data.max_patches=0"], "apply to native resolution: set data.max_patches"),
])
def test_train_native_refuses_what_does_not_combine(tmp_path: Path, extra: list[str], pattern: str) -> None:
    root = _folder(tmp_path / "imgs")
    with pytest.raises(ValueError, match=pattern):
        cfg = load_config("digits_demo", ["data.name=folder", f"data.path={root}", "schedule.steps=2", *NATIVE, *extra])
        run_experiment(cfg, tmp_path / "run", progress=False)


def test_train_native_flag_is_the_recipe_keys(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`vitkit train --native --max-patches N` is data.max_patches = N with data.augment = none (a dry run)."""
    out = tmp_path / "run"
    assert main(["train", "--config", "digits_demo", "--native", "--max-patches", "8", "--dry-run", "2",
                 "--save", "--out", str(out), "--no-progress"]) == 0
    data = json.loads((out / "run_config.json").read_text())["data"]
    assert data["max_patches"] == 8 and data["augment"] == "none"
    capsys.readouterr()
    assert main(["train", "--config", "digits_demo", "--native", "--out", str(tmp_path / "x")]) == 2
    assert "--native needs --max-patches N" in capsys.readouterr().err


def test_finetune_native_trains_a_checkpoint_on_packed_images(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`vitkit finetune --native --max-patches N`: a square checkpoint (E_pos learned on a 4x4 grid) fine-tuned on
    images of mixed aspect ratios, each at its own grid (E_pos resampled per image, §3.2), packed; the saved model's
    test figure is its packed evaluation. --max-patches alone is refused before the checkpoint is read."""
    import vitkit
    from vitkit.models import create_model

    model = create_model("vit", img_size=16, patch_size=4, in_chans=3, width=32, depth=2, num_heads=2, mlp_dim=64,
                         num_classes=5)
    model.preprocess = PreprocessConfig(img_size=(16, 16))
    vitkit.save_pretrained(model, tmp_path / "ckpt")
    root, out = _folder(tmp_path / "imgs"), tmp_path / "ft"
    argv = ["finetune", "--model", str(tmp_path / "ckpt"), "--config", "digits_finetune", "--data", str(root),
            "--steps", "40", "--lr", "3e-3", "--out", str(out), "--no-progress", "--set", "optim.name=adamw",
            "--set", "schedule.warmup_steps=2", "--set", "train.batch_size=8", "--set", "train.eval_every=0",
            "--set", "data.dev_fraction=0", "--set", "data.holdout=0.25", "--set", "data.flip=true"]
    assert main([*argv, "--max-patches", "16"]) == 2
    assert "--max-patches applies to --native" in capsys.readouterr().err
    assert main([*argv, "--native", "--max-patches", "16", "--set", "data.pack_budget=32"]) == 0
    data = json.loads((out / "run_config.json").read_text())["data"]
    assert data["max_patches"] == 16 and data["augment"] == "none"
    res = json.loads((out / "result.json").read_text())
    assert res["test"]["top1"] >= 0.75  # stripes' direction: chance is 0.5
    tuned = load_pretrained(out / "model")
    assert tuned.config.num_classes == 2 and not torch.equal(tuned.pos_embed, model.pos_embed)
    cfg = load_config("digits_finetune", ["data.name=folder", f"data.path={root}", "data.dev_fraction=0",
                                          "data.holdout=0.25", "data.channels=3"])
    test = open_splits(cfg.data)["test"]
    batch = NativePacker(tuned.preprocess, 4, 16, 32)([test.get(i) for i in range(len(test))], train=False)
    assert sorted({tuple(g) for g in batch.batch.grids.tolist()}) != [(4, 4)]  # the images kept their own grids
    assert evaluate_batches(tuned, [(batch.batch, batch.labels)])["top1"] == pytest.approx(res["test"]["top1"])


TINY = ["--no-progress", "--set", "model.width=16", "--set", "model.depth=1", "--set", "model.num_heads=2", "--set",
        "model.mlp_dim=32", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
        "train.batch_size=8", "--set", "train.tensorboard=false", "--set", "data.num_workers=0"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_loss_stops_the_run_naming_it(tmp_path: Path, monkeypatch, capsys, bad: float) -> None:  # noqa: ANN001
    """Before: only NaN stopped a run; an infinite loss (LoRA's alpha = 1e30 scaling the update) trained on."""
    real = Trainer.train_step

    def step(self, *a):  # noqa: ANN001, ANN002, ANN202 - the real step, its loss replaced
        _, acc, n = real(self, *a)
        return bad, acc, n

    monkeypatch.setattr(Trainer, "train_step", step)
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "run"), *TINY]) == 2
    err = capsys.readouterr().err
    assert f"loss became {'NaN' if bad != bad else bad} at step 0 (non-finite)" in err and "lora.alpha" in err, err
