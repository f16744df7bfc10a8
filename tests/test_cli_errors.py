"""The command line's error boundary: one line, no traceback, exit 2 for a user's mistake naming the key, help for every option."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests.helpers import digits_model
from tests.inputs import TINY_LOGGED, assert_one_line_error, noise_folder, png_bytes, run_main
from vitkit.cli import build_parser, main
from vitkit.formats import save_pretrained


def test_every_command_line_option_has_help() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, sp in sub.choices.items() for a in sp._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert missing == []


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path: Path, monkeypatch, capsys, preloaded) -> None:  # noqa: ANN001
    # in-process (`vitkit.cli.main`, the entry point the process runs); the full disk below in a process of its own
    # an existing file where a run folder is wanted
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(run_main("train", "--config", "digits_pretrain", "--out", str(tmp_path / "afile"), "--dry-run", "1"),
                    "afile", "not a folder")
    # NaN loss from an absurd learning rate
    assert_one_line_error(run_main("train", "--config", "digits_pretrain", "--out", str(tmp_path / "nan"), "--no-progress",
                         *[x for s in TINY_LOGGED + ["optim.lr=100", "optim.clip_norm=0", "schedule.steps=30"]
                           for x in ("--set", s)]), "NaN", "optim.lr")
    assert_one_line_error(run_main("train", "--config", "digits_pretrain", "--out", str(tmp_path / "nan2"), "--set",
                         "optim.lr=1e300"), "optim.lr must be a number in (0, 100]", "1e+300")
    # a full disk while saving (the file-size limit makes every write past 64 KiB fail with EFBIG), in a process of
    # its own (the limit is the process's) forked from the suite's preloaded interpreter: `python -m vitkit demo`
    limit = "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n" \
            "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))"
    r = preloaded.vitkit("demo", "--steps", "2", "--out", str(tmp_path / "full"), "--no-progress", setup=limit)
    assert_one_line_error(r, "could not write", "disk full")
    # permission denied and other OS errors, raised anywhere in a command
    import vitkit.commands.eval as ev

    def denied(args):
        raise PermissionError(13, "Permission denied", "/data/secret.png")

    monkeypatch.setattr(ev, "run", denied)
    assert main(["eval", "--model", "x"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "vitkit eval: error: /data/secret.png: permission denied (Permission denied)"
    # an internal failure: one line that says so, and --debug / VITKIT_DEBUG shows the traceback
    monkeypatch.setattr(ev, "run", lambda args: {}["missing"])
    assert main(["eval", "--model", "x"]) == 1
    assert "vitkit's own failure" in capsys.readouterr().err
    assert main(["--debug", "eval", "--model", "x"]) == 1  # the same exit code, with the traceback before the line
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'missing'" in err
    assert err.strip().endswith("vitkit eval: error: missing key 'missing'")
    monkeypatch.setenv("VITKIT_DEBUG", "1")
    monkeypatch.setattr(ev, "run", denied)  # a user's mistake exits 2 with --debug too
    assert main(["eval", "--model", "x"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().endswith("permission denied (Permission denied)")


def test_thread_count_and_pixel_limit_are_checked_up_front(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    img = tmp_path / "x.png"
    img.write_bytes(png_bytes())
    assert main(["predict", str(img), "--model", str(folder), "--threads", "100000"]) == 2
    assert f"--threads must be a whole number from 1 to {os.cpu_count()}" in capsys.readouterr().err
    assert main(["predict", str(img), "--model", str(folder), "--max-pixels", "0"]) == 2
    assert "pixel limit must be >= 1" in capsys.readouterr().err
    # a limit past any file: 2^62 ended in an OverflowError, 10^15 in MemoryError (the reader allocated its cap)
    assert main(["predict", str(img), "--model", str(folder), "--max-pixels", str(2**62)]) == 0
    # --native --max-patches 10^6 asked the allocator for 1 TB ("enforce fail at alloc_cpu.cpp"); 10^9 hung
    assert main(["predict", str(img), "--model", str(folder), "--native", "--max-patches", "1000000"]) == 2
    assert "--max-patches must be at most 262,144, got 1000000" in capsys.readouterr().err
    # export --bench's batch of 10^6 images asked the allocator for 12 GB after the export; 10^9 repeats ran for days
    for flags, says in ((["--batch", "1000000"], "--batch must be at most 4,096, got 1000000"),
                        (["--repeats", "1000000000"], "--repeats must be at most 1,000, got 1000000000")):
        assert main(["export", str(folder), "--out", str(tmp_path / "m.onnx"), "--bench", *flags]) == 2
        assert says in capsys.readouterr().err and not (tmp_path / "m.onnx").exists()
    for flags, says in ((["--batch", "1,10000000"], "--batch must be at most 4,096, got 10000000"),
                        (["--repeats", "1000000000"], "--repeats must be at most 1,000, got 1000000000"),
                        (["--peak-sizes", "1024,1000000"], "--peak-sizes must be at most 16,384, got 1000000")):
        assert main(["bench", "--models", "vit_ti16", "--img-size", "32", "--peers", "none", *flags]) == 2
        assert says in capsys.readouterr().err
    monkeypatch.setenv("VITKIT_MAX_IMAGE_PIXELS", "abc")
    assert main(["eval", "--model", str(folder), "--data", str(noise_folder(tmp_path / "data"))]) == 2
    assert "VITKIT_MAX_IMAGE_PIXELS='abc' is not a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("override, match", [
    ('train.bf16="yes"', "bf16 must be true or false"),
    ('train.compile="banana"', "compile must be true, false or a torch.compile backend"),
    ("train.seed=1e14", "train.seed must be a whole number"),
    ("train.seed=100000000000000", "train.seed must be at most 4,294,967,295"),
    ("data.max_patches=1000000", "data.max_patches must be at most 262,144"),
    ("optim.lr=1e300", "optim.lr must be a number in \\(0, 100\\]"),
    ("model.width=" + "[" * 5000 + "]" * 5000, "nested too deep|model.width"),
])
def test_user_mistakes_exit_2_naming_the_key_before_any_file_is_written(tmp_path: Path, override: str, match: str,
                                                                        capsys) -> None:  # noqa: ANN001
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "r"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(match, err) and "vitkit's own failure" not in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_loader_worker_error_is_one_line_naming_the_original_error(capsys) -> None:  # noqa: ANN001
    from torch.utils.data._utils import ExceptionWrapper

    import vitkit.commands.eval as ev

    def failing(args):  # noqa: ANN001, ANN202 - what torch raises in the main process for a worker's error
        try:
            raise ValueError("cannot read image /data/a.png: broken data stream")
        except ValueError:
            ExceptionWrapper(where="in DataLoader worker process 0").reraise()

    mp = pytest.MonkeyPatch()
    mp.setattr(ev, "run", failing)
    try:
        assert main(["eval", "--model", "x"]) == 2
    finally:
        mp.undo()
    err = capsys.readouterr().err.strip()
    assert err == ("vitkit eval: error: ValueError: cannot read image /data/a.png: broken data stream (caught "
                   "valueerror in dataloader worker process 0)"), err
    assert "Traceback" not in err


def test_demo_into_an_existing_folder_names_only_its_own_flags(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "result.json").write_text("{}")
    assert main(["demo", "--out", str(tmp_path / "d"), "--steps", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "vitkit demo --overwrite" in err and "--resume" not in err


def test_a_worker_killed_by_a_signal_is_reported_as_a_stop_not_as_vitkits_failure(monkeypatch, capsys) -> None:  # noqa: ANN001
    """Before: a SIGTERM to the job killed the data-loading workers first, and the main process's "RuntimeError:
    DataLoader worker (pid 4242) is killed by signal: Terminated." was called vitkit's own failure (exit 1)."""
    import vitkit.commands.eval as ev

    def stopped(args):  # noqa: ANN001, ANN202
        raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Terminated. ")

    monkeypatch.setattr(ev, "run", stopped)
    assert main(["eval", "--model", "x"]) == 143
    err = capsys.readouterr().err
    assert "stopped by a signal (Terminated)" in err and "own failure" not in err, err
