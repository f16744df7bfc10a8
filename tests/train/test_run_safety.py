"""Runs lose nothing and guess nothing: run folders never overwritten, locks, resume checks, fine-tuning starts, logged figures."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import CLI_MODULES, digits_model
from tests.inputs import TINY, TINY_FLAGS, TINY_LOGGED, noise_folder, png_file
from vitkit.cli import main
from vitkit.train.config import load_config
from vitkit.train.metrics import curve_series
from vitkit.train.run import default_run_dir, run_experiment
from vitkit.utils.files import FolderLock

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its runs' figures drawn, not encoded: none read


@pytest.fixture(scope="module")
def finished_tiny_run(tmp_path_factory) -> Path:  # noqa: ANN001
    """`vitkit train --config digits_pretrain` with TINY_FLAGS run to its end (exit 0, asserted here) once for the
    tests below that start from a finished run folder; each works on its own copy (`_copy_of`)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]) == 0
    return out


def _copy_of(run: Path, out: Path) -> Path:
    shutil.copytree(run, out)
    return out


def test_run_folders_are_never_overwritten(tmp_path: Path, monkeypatch, finished_tiny_run: Path) -> None:  # noqa: ANN001
    cfg = load_config("digits_pretrain", TINY)  # the recipe of `finished_tiny_run`, a finished run of it
    run = _copy_of(finished_tiny_run, tmp_path / "run")
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


def test_finetuning_recipes_refuse_a_random_start(tmp_path: Path) -> None:
    cfg = load_config("digits_finetune", TINY)
    with pytest.raises(ValueError, match=r"needs model\.pretrained.*--from-scratch"):
        run_experiment(cfg, tmp_path / "ft", progress=False)
    res = run_experiment(load_config("digits_finetune", TINY + ["model.require_pretrained=false"]), tmp_path / "ok",
                         progress=False, curves=False)  # (no curves.png: 0.45 of a tiny run's 0.55 CPU s)
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
               "--set", "train.precision=\"fp32\"", "--set", "data.num_workers=0", "--set", "train.eval_every=0",
               "--set", "data.holdout=0.25"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "from " + str(tmp_path / "rgb") in out and "3 ch" in out
    assert "resampled: E_pos 2x2 -> 4x4" in out and "replaced: the 7-way head by a new zero-initialised 3-way head" in out
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert ft.config.in_chans == 3 and ft.preprocess.mean == (0.4, 0.45, 0.5)  # the checkpoint's normalisation
    assert ft.preprocess.labels == ["blue", "green", "red"]


def test_curves_keep_dev_and_test_apart() -> None:
    recs = [{"step": 10, "loss": 2.0, "train_acc": 0.2}, {"step": 20, "loss": 1.0, "train_acc": 0.6},
            {"step": 10, "eval_top1": 0.3, "eval_loss": 1.9}, {"step": 20, "eval_top1": 0.5, "eval_loss": 1.2},
            {"step": 20, "split": "dev", "eval_top1": 0.625, "eval_loss": 1.1},
            {"step": 20, "split": "test", "eval_top1": 0.5, "eval_loss": 1.15}]
    acc = curve_series(recs)["accuracy"]
    assert acc["eval (during training)"] == ([10, 20], [30.0, 50.0])
    assert acc["dev (final)"] == ([20], [62.5]) and acc["test (final)"] == ([20], [50.0])


def test_logged_loss_is_weighted_by_examples(tmp_path: Path) -> None:
    """The logged loss is the mean over the examples of the steps since the last line (the figure a
    multi-process run reduces across ranks)."""
    from tests.helpers import digits_trainer
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
    from tests.helpers import digits_trainer
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


def test_eval_split_images_skipped_in_training_are_named(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for split in ("train", "val"):
        for i in range(16):
            png_file(root / split / str(i % 2) / f"{i}.png", 15 * i, (8, 8))
    (root / "val" / "1" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    cfg = load_config("digits_pretrain", TINY_LOGGED + ["data.name=\"folder\"", f"data.path=\"{root}\"", "data.dev_fraction=0",
                                                 "data.eval_split=\"test\"", "train.eval_every=3"])
    run_experiment(cfg, tmp_path / "run", progress=False, curves=False)
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    named = [m for r in recs for m in r.get("eval_skipped_images", [])]
    assert named and all("zz_broken.png" in m for m in named)


@pytest.mark.parametrize("override, key", [
    ("model.num_heads=0", "num_heads"), ("model.patch_size=0", "patch_size"), ("model.in_chans=0", "in_chans"),
    ("model.width=-8", "width"), ("model.width=16.5", "width"), ("model.depth=-1", "depth"),
    ("model.img_size=0", "img_size"), ("model.mlp_dim=0", "mlp_dim"), ("model.num_classes=-1", "num_classes"),
    ("train.grad_accum=0", "train.grad_accum"), ("train.log_every=0", "train.log_every"),
    ("optim.label_smoothing=1.0", "optim.label_smoothing"), ("optim.betas=[0.9]", "optim.betas"),
    ("schedule.steps=-5", "schedule.steps"), ("schedule.decay=\"cosnie\"", "schedule.decay"),
    ("train.device=\"cuda\"", "device"), ("train.batch_size=0", "train.batch_size"),
    ("data.holdout=0", "data.holdout"), ("data.augment=\"heavy\"", "data.augment"),
    ("optim.lr=0", "optim.lr"), ("data.num_workers=-1", "data.num_workers"),
])
def test_bad_config_values_are_refused_before_any_data_is_read(tmp_path: Path, override: str, key: str) -> None:
    if "cuda" in override and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # the data path does not exist: reading data first would raise FileNotFoundError instead. A value a section
    # checks fails when the config is built; one only the architecture can check, when the run builds it
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        cfg = load_config("digits_pretrain", TINY_LOGGED + ["data.name=\"folder\"", "data.path=\"/nonexistent/data\"", override])
        run_experiment(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing written either


def test_resume_validates_the_state_the_recipe_and_the_log(tmp_path: Path, capsys) -> None:
    cfg = load_config("digits_pretrain", TINY_LOGGED + ["schedule.steps=4", "train.ckpt_every=2"])
    run = tmp_path / "run"
    run_experiment(cfg, run, progress=False, curves=False)
    # another recipe: named, refused; --force accepts
    other = load_config("digits_pretrain", TINY_LOGGED + ["schedule.steps=6", "train.ckpt_every=2", "optim.lr=0.01"])
    with pytest.raises(ValueError, match=r"another recipe \(optim\.lr: 0\.002 -> 0\.01; schedule\.steps: 4 -> 6"):
        run_experiment(other, run, resume=True, progress=False)
    # a torn last line (a kill mid-append) and a temp file left by a kill mid-write
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')
    (run / ".train_state.pt.abc123.tmp").write_bytes(b"half a checkpoint")
    res = run_experiment(other, run, resume=True, force=True, progress=False, curves=False)
    assert res["steps"] == 6 and not (run / ".train_state.pt.abc123.tmp").exists()
    out = capsys.readouterr()
    assert "dropped a torn log line" in out.out + out.err
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(x) for x in lines)  # every line parses
    # another architecture: the differing tensors are named
    wide = load_config("digits_pretrain", TINY_LOGGED + ["schedule.steps=6", "train.ckpt_every=2", "optim.lr=0.01",
                                                  "model.width=32", "model.mlp_dim=64"])
    with pytest.raises(ValueError, match=r"weights of another architecture .*cls_token is \(1, 1, 16\), this model has "
                                         r"\(1, 1, 32\)"):
        run_experiment(wide, run, resume=True, force=True, progress=False)
    # a state missing keys
    torch.save({"step": 2, "model": {}}, run / "train_state.pt")
    with pytest.raises(ValueError, match=r"not a complete vitkit training state: missing \['optimizer'\]"):
        run_experiment(other, run, resume=True, force=True, progress=False)
    # metrics.jsonl is rewritten atomically (no temp file left, mode of a normal file)
    assert not list(run.glob(".*.tmp"))


def test_overwrite_removes_only_what_vitkit_wrote(tmp_path: Path, capsys, finished_tiny_run: Path) -> None:  # noqa: ANN001
    out = _copy_of(finished_tiny_run, tmp_path / "run")
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]
    assert main([*args, "--overwrite"]) == 0  # a run's own files (model/, metrics, ...) are replaced
    (out / "model" / "notes.txt").write_text("my notes")  # a user's file in a folder named model/
    assert main([*args, "--overwrite"]) == 2
    assert "files vitkit did not write (notes.txt)" in capsys.readouterr().err
    assert (out / "model" / "notes.txt").read_text() == "my notes" and (out / "model" / "config.json").is_file()
    (out / "model" / "notes.txt").unlink()
    (out / "tb").mkdir()
    (out / "tb" / "plan.md").write_text("mine")
    assert main([*args, "--overwrite"]) == 2
    assert (out / "tb" / "plan.md").read_text() == "mine" and (out / "model" / "model.safetensors").is_file()


def test_a_run_folder_and_a_pack_destination_are_locked_while_in_use(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    with FolderLock(out, "run folder"):  # another job holds it (the lock is per open file, as across processes)
        assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]) == 2
        err = capsys.readouterr().err
        assert f"in use by another vitkit job (pid {os.getpid()})" in err
        assert not (out / "run_config.json").exists()
        dest = tmp_path / "shards"
        with FolderLock(dest, "pack destination"):
            assert main(["data", "pack", str(noise_folder(tmp_path / "src")), str(dest), "--no-progress"]) == 2
            assert f"pid {os.getpid()}" in capsys.readouterr().err
            assert not list(dest.glob("*.tar"))
    assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]) == 0


# `vitkit train ARGS` twice at once: two processes forked back to back from one process (forked from the suite's
# preloaded interpreter, which made the imports a training run makes: tests.helpers.CLI_MODULES), each running the
# command's entry point as `python -m vitkit` does (its exit code is the process's, through the interpreter's exit),
# its stdout and stderr in LOGS/<i>.out, .err
TWO_JOBS = """
import os, sys
import matplotlib.figure
from vitkit.cli import main
# the figure drawn, not encoded (tests.helpers.figures_drawn_not_encoded: this test reads none)
matplotlib.figure.Figure.savefig = lambda fig, *args, **kwargs: fig.draw_without_rendering()
logs, argv = sys.argv[1], sys.argv[2:]
pids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(f"{logs}/{i}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.exit(main(argv))
    pids.append(pid)
for pid in pids:
    print("EXIT", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def test_two_train_jobs_started_together_one_is_refused(tmp_path: Path, preloaded) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    cmd = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", "--threads", "1", *TINY_FLAGS]
    r = preloaded.run(TWO_JOBS, str(tmp_path), *cmd, preload=CLI_MODULES)
    codes = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("EXIT ")]
    assert r.returncode == 0 and len(codes) == 2, r.stdout + r.stderr
    results = [(c, (tmp_path / f"{i}.err").read_text()) for i, c in enumerate(codes)]
    codes = sorted(c for c, _ in results)
    assert codes == [0, 2], results
    loser = next(err for c, err in results if c == 2)
    assert "in use by another vitkit job" in loser or "already holds a run" in loser
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines if "loss" in json.loads(x)] == sorted(
        {json.loads(x)["step"] for x in lines if "loss" in json.loads(x)})  # one writer: no interleaved steps


@pytest.mark.parametrize("override, match", [
    ("model.depth=10000", "depth must be at most 1,024"),
    ("data.randaugment=[1000000, 10]", "data.randaugment\\[0\\] must be at most 16"),
    ("data.glyph_images=1000000000", "data.glyph_images = 1,000,000,000 images .* over the"),
    ("data.crop_pct=0.0001", "data.crop_pct must be 0 \\(no crop\\) or in \\[0.05, 1\\]"),
])
def test_run_config_bounds_are_checked_in_moments(tmp_path: Path, override: str, match: str, capsys) -> None:  # noqa: ANN001
    t0 = time.process_time()
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "r"), "--set", override]) == 2
    assert __import__("re").search(match, capsys.readouterr().err)
    assert time.process_time() - t0 < 10
    assert not (tmp_path / "r" / "run_config.json").exists()


def test_a_hostile_training_state_is_refused(tmp_path: Path, capsys, finished_tiny_run: Path) -> None:  # noqa: ANN001
    out = _copy_of(finished_tiny_run, tmp_path / "run")
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]
    state = torch.load(out / "train_state.pt", weights_only=True)
    for change, match in ((lambda s: s.update(step=10**18), "step 1000000000000000000 is not a step of this run"),
                          (lambda s: s["model"].update({"head.weight": s["model"]["head.weight"].to(torch.int8)}),
                           "'head.weight' is torch.int8")):
        st = {**state, "model": dict(state["model"])}
        change(st)
        torch.save(st, out / "train_state.pt")
        assert main([*args, "--resume"]) == 2
        assert __import__("re").search(match, capsys.readouterr().err)


def test_a_finished_run_resumed_changes_nothing_and_the_final_lines_are_written_once(  # noqa: ANN001
        tmp_path: Path, capsys, finished_tiny_run: Path) -> None:
    out = _copy_of(finished_tiny_run, tmp_path / "run")
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]
    log = (out / "metrics.jsonl").read_bytes()
    assert main([*args, "--resume"]) == 0
    assert "this run already finished" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == log
    (out / "result.json").unlink()  # as a SIGKILL right after the final test line leaves it
    assert main([*args, "--resume"]) == 0
    assert (out / "metrics.jsonl").read_bytes() == log  # the final evaluation logged once, the same bytes
    (out / ".model.killed.tmp").mkdir()  # a model folder being written when a SIGKILL came
    (out / "result.json").unlink()
    assert main([*args, "--resume"]) == 0
    assert not list(out.glob(".*.tmp"))


def test_a_resume_on_changed_data_is_refused_unless_forced(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    data = noise_folder(tmp_path / "data", n=40, classes=2)
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS,
            "--set", f'data.path="{data}"',
            "--set", 'data.name="folder"', "--set", "data.channels=1", "--set", "model.img_size=8",
            "--set", "model.patch_size=4"]
    assert main(args) == 0
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(data / "c0" / "new.png")
    assert main([*args, "--resume"]) == 2
    assert __import__("re").search(r"the training data changed since this state was saved \((\d+ examples then, \d+ now|the same number of "
                                   r"examples, but other files, sizes or labels)\)",
                                   capsys.readouterr().err)
    assert main([*args, "--resume", "--force"]) == 0


def test_num_classes_below_the_data_is_refused_before_the_run_folder_is_written(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS]
    assert main([*args, "--set", "model.num_classes=3"]) == 2
    assert "model.num_classes = 3, but the data has 10 classes" in capsys.readouterr().err
    assert not (out / "run_config.json").exists()
    assert main(args) == 0  # no --overwrite needed after the refusal


def test_a_head_larger_than_the_data_keeps_the_class_names(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import vitkit

    out = tmp_path / "run"
    assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY_FLAGS,
                 "--set", "model.num_classes=12"]) == 0
    assert "outputs 10..11 have no data" in capsys.readouterr().out
    labels = vitkit.load_pretrained(out / "model").preprocess.labels
    assert labels[:10] == [str(i) for i in range(10)] and labels[10:] == ["unused_10", "unused_11"]


def test_sweep_and_train_exit_1_when_they_skip_images(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The one exit rule: a sweep (and a train run) that finished without some unreadable images exits 1 and names
    them, whether they were skipped in training, in the dev pick or in the final test (it exited 0 before)."""
    root = tmp_path / "data"
    for split in ("train", "val"):
        for i in range(16):
            png_file(root / split / str(i % 2) / f"{i}.png", 15 * i, (8, 8))
    (root / "train" / "1" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    (root / "val" / "0" / "zz_test_broken.png").write_bytes(b"\x89PNG broken")
    data = ["--set", "data.name=\"folder\"", "--set", f"data.path=\"{root}\"", "--set", "data.dev_fraction=0.25"]
    assert main(["sweep", "--config", "digits_pretrain", "--lrs", "0.01,0.001", "--out", str(tmp_path / "sw"),
                 "--no-progress", "--test", *TINY_FLAGS, *data]) == 1
    out = capsys.readouterr()
    assert "chosen on dev" in out.out and "test top-1 of the chosen run" in out.out
    assert f"unreadable images in the lr 0.01 run (named in {tmp_path / 'sw' / 'lr_0.01'}/metrics.jsonl)" in out.err
    assert "zz_test_broken.png" in out.err
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text())["skipped_images"] >= 1
    # train: an image skipped only in the final test evaluation counts too
    (root / "train" / "1" / "zz_broken.png").unlink()
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "tr"), "--no-progress", *TINY_FLAGS,
                 *data[:4], "--set", "data.dev_fraction=0"]) == 1
    assert "skipped 1 unreadable images (named in metrics.jsonl)" in capsys.readouterr().out


def test_a_resumed_runs_training_time_counts_every_sitting(tmp_path: Path) -> None:
    """`train_s` of a run stopped and resumed is the time of both fits (the state carries it), not the last one's;
    a state from before the time was kept says from which step its time counts (`train_s_from`)."""
    from tests.helpers import digits_trainer
    from vitkit.train.config import TrainConfig

    cfg = TrainConfig(steps=12, batch_size=16, lr=1e-3, warmup_steps=0, log_every=5, tensorboard=False)

    def trainer():
        torch.manual_seed(0)
        return digits_trainer(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), cfg, tmp_path / "run")

    first = trainer()
    first.fit(stop_at=7)
    spent = first.train_s
    time.sleep(0.3)  # idle after a fit is not training time
    assert first.train_s == spent > 0
    state = torch.load(first.save_state(), weights_only=True)
    assert (state["train_s"], state["train_s_from"]) == (spent, 0)
    again = trainer()
    again.load_state()
    assert (again.train_s, again.train_s_from) == (spent, 0)
    again.fit()
    assert again.train_s > spent
    # a state written before vitkit kept the time: the resumed run's time counts from the step it resumed at
    del state["train_s"], state["train_s_from"]
    torch.save(state, tmp_path / "old.pt")
    old = trainer()
    old.load_state(tmp_path / "old.pt")
    assert (old.train_s, old.train_s_from) == (0.0, 7)
    old.fit()
    assert torch.load(tmp_path / "run" / "train_state.pt", weights_only=True)["train_s_from"] == 7
