"""No silent wrong numbers: labels matched by name, run folders never overwritten, fine-tuning that says
what it starts from, and the small things a new user trips on. (Distributed metrics: test_distributed.py;
benchmark figures: test_bench.py and test_export.py.)"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import digits_model
from PIL import Image

import vitkit
from vitkit.cli import build_parser, main
from vitkit.data.digits import load_digits_split
from vitkit.train.config import load_config
from vitkit.train.metrics import curve_series
from vitkit.train.run import default_run_dir, run_experiment

TINY = ["model.width=16", "model.depth=1", "model.num_heads=2", "model.mlp_dim=32", "schedule.steps=2",
        "schedule.warmup_steps=1", "train.batch_size=8", "train.tensorboard=false", "data.num_workers=0"]


@pytest.fixture(scope="module")
def digits_ckpt(tmp_path_factory) -> Path:
    """A small digits model trained well enough that its accuracy means something (about 90%)."""
    out = tmp_path_factory.mktemp("digits")
    cfg = load_config("digits_demo", ["model.width=32", "model.depth=2", "model.num_heads=2", "model.mlp_dim=64",
                                      "schedule.steps=300", "schedule.warmup_steps=15", "train.batch_size=64",
                                      "optim.lr=5e-3", "optim.label_smoothing=0.0", "train.log_every=50"])
    res = run_experiment(cfg, out / "run", progress=False)
    assert res["test"]["top1"] > 0.8
    return out / "run" / "model"


def _digit_folder(root: Path, digits: list[int], n: int = 60) -> Path:
    _, test = load_digits_split()
    for i in range(len(test)):
        d = int(test.labels[i])
        if d in digits and len(list((root / str(d)).glob("*.png"))) < n // len(digits):
            (root / str(d)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.round(test.images[i, 0].numpy() * 255).astype(np.uint8)).save(root / str(d) / f"{i}.png")
    return root


def _top(out: str, k: int) -> float | None:
    m = re.search(rf"top-{k}: (\d+\.\d\d)%", out)
    return float(m.group(1)) if m else None


# ----------------------------------------------------------------------------- 1. labels by name
def test_eval_maps_a_folders_classes_by_name(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    """A folder holding only digits 3 and 7 used to be scored by sorted index (3 -> class 0, 7 -> class 1):
    ~0% top-1. Matched by name it scores as the model really does, and top-5 is not reported for 2 classes."""
    folder = _digit_folder(tmp_path / "two", [3, 7])
    assert main(["eval", "--model", str(digits_ckpt), "--data", str(folder), "--split", "all"]) == 0
    out = capsys.readouterr().out
    top1 = _top(out, 1)
    assert top1 is not None and top1 > 70.0, out
    assert _top(out, 5) is None and "classes: 2 present of the 10" in out
    # the same folder with all ten digits reports top-5 (> 5 classes present)
    folder10 = _digit_folder(tmp_path / "ten", list(range(10)), n=100)
    assert main(["eval", "--model", str(digits_ckpt), "--data", str(folder10), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert _top(out, 5) is not None and _top(out, 5) >= _top(out, 1)


def test_eval_refuses_classes_the_model_does_not_know(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    assert main(["eval", "--model", str(digits_ckpt), "--data", "lfw"]) == 2
    err = capsys.readouterr().err
    assert "'non-face', 'face' are not among the 10 classes" in err
    # a model with no stored labels: matched by index only when the counts agree
    m = vitkit.load_pretrained(digits_ckpt)
    m.preprocess.labels = []
    vitkit.save_pretrained(m, tmp_path / "nolabels")
    folder = _digit_folder(tmp_path / "two", [3, 7])
    assert main(["eval", "--model", str(tmp_path / "nolabels"), "--data", str(folder), "--split", "all"]) == 2
    assert "stores no class names and predicts 10 classes" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "nolabels")]) == 0  # digits: 10 classes, matched by index
    assert "matched by index" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 2. run folders
def test_run_folders_are_never_overwritten(tmp_path: Path, monkeypatch) -> None:
    cfg = load_config("digits_pretrain", TINY)
    run = tmp_path / "run"
    run_experiment(cfg, run, progress=False)
    before = (run / "model" / "model.safetensors").read_bytes()
    lines = (run / "metrics.jsonl").read_text()
    with pytest.raises(FileExistsError, match=r"already holds a run .*--resume.*--overwrite"):
        run_experiment(cfg, run, progress=False)
    with pytest.raises(FileExistsError):
        run_experiment(cfg, run, dry_run=1, progress=False)  # dry runs too
    assert (run / "model" / "model.safetensors").read_bytes() == before and (run / "metrics.jsonl").read_text() == lines
    (run / "notes.txt").write_text("mine")
    run_experiment(load_config("digits_pretrain", TINY + ["train.seed=1"]), run, overwrite=True, progress=False)
    assert (run / "model" / "model.safetensors").read_bytes() != before and (run / "notes.txt").read_text() == "mine"
    # default folders are named after the recipe and the time, so two runs never share one
    monkeypatch.chdir(tmp_path)
    assert re.fullmatch(r"runs/digits_pretrain-\d{8}-\d{6}", default_run_dir("digits_pretrain").as_posix())
    assert re.fullmatch(r"runs/my-\d{8}-\d{6}", default_run_dir("conf/my.toml").as_posix())


def test_a_dry_run_writes_nothing_big_unless_asked(tmp_path: Path) -> None:
    cfg = load_config("pretrain_jft_b16", TINY + ["model.img_size=32", "model.patch_size=16",
                                                  "model.representation_size=16"])
    run_experiment(cfg, tmp_path / "dry", dry_run=2, progress=False)
    written = {p.name: p.stat().st_size for p in (tmp_path / "dry").rglob("*") if p.is_file()}
    assert "train_state.pt" not in written and "model.safetensors" not in written
    assert "metrics.jsonl" in written and max(written.values()) < 200_000, written
    run_experiment(cfg, tmp_path / "saved", dry_run=2, progress=False, save=True)
    assert (tmp_path / "saved" / "model" / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- 3. fine-tuning says what it starts from
def test_finetuning_recipes_refuse_a_random_start(tmp_path: Path) -> None:
    cfg = load_config("digits_finetune", TINY)
    with pytest.raises(ValueError, match=r"needs model\.pretrained.*--from-scratch"):
        run_experiment(cfg, tmp_path / "ft", progress=False)
    res = run_experiment(load_config("digits_finetune", TINY + ["model.require_pretrained=false"]), tmp_path / "ok",
                         progress=False)
    assert res["steps"] == 2
    # the same through the command line: `sweep` (the README's example) and `train`
    assert main(["sweep", "--config", "digits_finetune", "--lrs", "0.01", "--out", str(tmp_path / "sw"),
                 "--no-progress", *[x for s in TINY for x in ("--set", s)]]) == 2
    assert main(["train", "--config", "digits_finetune", "--from-scratch", "--out", str(tmp_path / "tr"),
                 "--no-progress", *[x for s in TINY for x in ("--set", s)]]) == 0


def test_finetune_takes_channels_from_an_rgb_checkpoint(tmp_path: Path, capsys) -> None:
    """`vitkit finetune --model RGB_CKPT --data DIR` with the default (general) recipe: no digits channels."""
    m = vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                            num_classes=7)
    m.preprocess = vitkit.PreprocessConfig(img_size=(16, 16), mean=(0.4, 0.45, 0.5), std=(0.2, 0.25, 0.3))
    vitkit.save_pretrained(m, tmp_path / "rgb")
    for c, colour in (("red", (200, 30, 30)), ("green", (30, 200, 30)), ("blue", (30, 30, 200))):
        for i in range(8):
            (tmp_path / "data" / c).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (20, 20), colour).save(tmp_path / "data" / c / f"{i}.png")
    rc = main(["finetune", "--model", str(tmp_path / "rgb"), "--data", str(tmp_path / "data"), "--img-size", "32",
               "--steps", "2", "--out", str(tmp_path / "ft"), "--no-progress", "--set", "train.batch_size=8",
               "--set", "train.bf16=false", "--set", "data.num_workers=0", "--set", "train.eval_every=0",
               "--set", "data.holdout=0.25"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "from " + str(tmp_path / "rgb") in out and "3 ch" in out
    assert "resampled: E_pos 2x2 -> 4x4" in out and "replaced: the 7-way head by a new zero-initialised 3-way head" in out
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert ft.config.in_chans == 3 and ft.preprocess.mean == (0.4, 0.45, 0.5)  # the checkpoint's normalisation
    assert ft.preprocess.labels == ["blue", "green", "red"]


# ----------------------------------------------------------------------------- 7. smaller, each real
def test_predict_options_and_messages(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    img = tmp_path / "d.png"
    Image.new("L", (8, 8), 100).save(img)
    assert main(["predict", str(img), "--model", str(digits_ckpt), "--topk", "0"]) == 2
    assert "--topk must be a positive whole number, got 0" in capsys.readouterr().err
    assert main(["predict", str(img), "--model", str(digits_ckpt), "--topk", "3"]) == 0
    assert len(re.findall(r"\(\d+\.\d%\)", capsys.readouterr().out)) == 3


def test_timm_export_of_a_tanh_gelu_model_warns(tmp_path: Path) -> None:
    tanh = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    with pytest.warns(UserWarning, match="tanh GELU .* timm's VisionTransformer runs exact GELU"):
        vitkit.save_pretrained(tanh, tmp_path / "t.safetensors", format="timm")
    exact = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, gelu="exact")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vitkit.save_pretrained(exact, tmp_path / "e.safetensors", format="timm")


def test_fewshot_names_the_features_it_uses(tmp_path: Path, capsys) -> None:
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--seeds", "1", "--shots", "1"]) == 0
    out = capsys.readouterr().out
    assert "pre_logits features" not in out and "final class token LN(z_L^0) features (the head's input" in out
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, representation_size=8),
                           tmp_path / "r")
    assert main(["fewshot", "--model", str(tmp_path / "r"), "--seeds", "1", "--shots", "1"]) == 0
    assert "pre_logits features (the 8-d tanh layer" in capsys.readouterr().out


def test_every_command_line_option_has_help() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, sp in sub.choices.items() for a in sp._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert missing == []


def test_curves_keep_dev_and_test_apart() -> None:
    recs = [{"step": 10, "loss": 2.0, "train_acc": 0.2}, {"step": 20, "loss": 1.0, "train_acc": 0.6},
            {"step": 10, "eval_top1": 0.3, "eval_loss": 1.9}, {"step": 20, "eval_top1": 0.5, "eval_loss": 1.2},
            {"step": 20, "split": "dev", "eval_top1": 0.625, "eval_loss": 1.1},
            {"step": 20, "split": "test", "eval_top1": 0.5, "eval_loss": 1.15}]
    acc = curve_series(recs)["accuracy"]
    assert acc["eval (during training)"] == ([10, 20], [30.0, 50.0])
    assert acc["dev (final)"] == ([20], [62.5]) and acc["test (final)"] == ([20], [50.0])


def test_inspect_titles_say_label_and_prediction(digits_ckpt: Path, tmp_path: Path) -> None:
    assert main(["inspect", "--model", str(digits_ckpt), "--out", str(tmp_path / "i"), "--num-images", "2",
                 "--no-progress"]) == 0
    summary = json.loads((tmp_path / "i" / "inspect.json").read_text())
    assert [im["name"] for im in summary["images"]] == ["test image #0", "test image #1"]
    _, test = load_digits_split()
    assert summary["images"][1]["label"] == str(int(test.labels[1]))


def test_logged_loss_is_weighted_by_examples(tmp_path: Path) -> None:
    """The logged loss is the mean over the examples of the steps since the last line (the figure a
    multi-process run reduces across ranks)."""
    from helpers import digits_trainer

    from vitkit.train.config import TrainConfig
    from vitkit.train.metrics import read_metrics

    t = digits_trainer(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32),
                       TrainConfig(steps=4, batch_size=16, lr=1e-3, warmup_steps=0, log_every=2), tmp_path)
    losses = []
    real = t.train_step

    def spy(step, x, y, positions):
        r = real(step, x, y, positions)
        losses.append(r[0])
        return r

    t.train_step = spy
    t.fit()
    logged = [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert logged == pytest.approx([np.mean(losses[:2]), np.mean(losses[2:])], rel=1e-9)
    assert torch.isfinite(torch.tensor(logged)).all()


def test_a_resume_between_log_lines_logs_what_an_uninterrupted_run_logs(tmp_path: Path) -> None:
    """The sums since the last log line are part of the training state: resuming at step 7 with a log line
    every 5 steps logs at step 10 the mean of steps 6-10, as the uninterrupted run does, bit for bit."""
    from helpers import digits_trainer

    from vitkit.train.config import TrainConfig
    from vitkit.train.metrics import read_metrics

    cfg = TrainConfig(steps=12, batch_size=16, lr=1e-3, warmup_steps=0, log_every=5, tensorboard=False)

    def model():
        torch.manual_seed(0)
        return digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)

    full = digits_trainer(model(), cfg, tmp_path / "full")
    full.fit()
    part = digits_trainer(model(), cfg, tmp_path / "part")
    part.fit(stop_at=7)  # a pause between log lines: the sums of steps 6-7 go into the state
    part.save_state()
    again = digits_trainer(model(), cfg, tmp_path / "part")
    again.load_state()
    again.fit()

    def losses(d: str) -> list:
        return [(r["step"], r["loss"], r["train_acc"]) for r in read_metrics(tmp_path / d / "metrics.jsonl")
                if "loss" in r]

    assert losses("full") == losses("part") and [s for s, *_ in losses("full")] == [5, 10, 12]
