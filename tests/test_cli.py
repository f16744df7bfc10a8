"""Issue #39's leftovers, each proved through the command line: a batch larger than a small folder shrinks to fit
(logged, recorded, resumable), argparse mistakes are one line, the exit-code rule for skipped inputs, what the
few-shot features are for each pooling, and `reproduce --smoke` without names."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from PIL import Image

import vitkit
from tests.inputs import assert_one_line_error, run_cli, run_main
from vitkit import cli
from vitkit.cli import build_parser, main


def _rgb_model_and_folder(tmp_path: Path, per_class: int = 8) -> tuple[Path, Path]:
    m = vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                            num_classes=3)
    vitkit.save_pretrained(m, tmp_path / "model")
    for c, colour in (("red", (200, 30, 30)), ("green", (30, 200, 30)), ("blue", (30, 30, 200))):
        (tmp_path / "data" / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (20, 20), colour).save(tmp_path / "data" / c / f"{i}.png")
    return tmp_path / "model", tmp_path / "data"


def test_finetune_batch_larger_than_small_folder_shrinks_and_resumes(tmp_path: Path) -> None:
    model, data = _rgb_model_and_folder(tmp_path)  # 24 images, 18 for training after the 25% holdout
    args = ["finetune", "--model", str(model), "--data", str(data), "--img-size", "16", "--num-classes", "3",
            "--steps", "2", "--out", str(tmp_path / "ft"), "--no-progress", "--set", "data.num_workers=0",
            "--set", "train.eval_every=0", "--set", "data.holdout=0.25", "--set", "train.tensorboard=false"]
    r = run_main(*args)  # the recipe's batch 512 on 18 examples
    assert r.returncode == 0, r.stderr[-1500:]
    assert "batch size 512 is larger than the 18 training examples: using batch 18" in r.stderr, r.stderr
    assert "--set train.batch_size=" in r.stderr
    saved = json.loads((tmp_path / "ft" / "run_config.json").read_text())
    assert saved["train"]["batch_size"] == 18
    again = run_main(*args, "--resume")  # the same command resumes: the shrunk batch is no recipe change
    assert again.returncode == 0, again.stderr[-1500:]
    assert "another recipe" not in again.stderr and "already finished" in again.stdout


def test_argparse_mistakes_are_one_line_with_a_help_hint(tmp_path: Path) -> None:
    cases = [(("predict", "--model", "m", "--batch-size", "x", "a.png"), "vitkit predict", "--batch-size"),
             (("data", "pack"), "vitkit data pack", "required"), (("frobnicate",), "vitkit", "invalid choice")]
    for i, (argv, prog, what) in enumerate(cases):  # the last in a real process, the others through vitkit.cli.main
        r = run_cli(*argv) if i == len(cases) - 1 else run_main(*argv)
        assert r.returncode == 2, r.stderr
        assert_one_line_error(r, f"{prog}: error:", what, f"(see {prog} --help)")
        assert r.stderr.count("\n") == 1 and "usage:" not in r.stderr, r.stderr


def test_fewshot_names_the_pooling_it_uses(tmp_path: Path) -> None:
    """SigLIP-style MAP pooling, GAP and registers are described as what is pooled, not as a class token."""
    cases = [(dict(pooling="map"), "attention pooling (MAP, a learned query) of the final patch "
              "tokens (after the final LN) features"),
             (dict(pooling="gap", num_registers=4), "mean (GAP) of the final patch tokens"),
             (dict(pooling="token"), "final class token LN(z_L^0) features")]
    for i, (kw, _) in enumerate(cases):
        m = vitkit.create_model("vit", img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32,
                                num_classes=3, **kw)
        vitkit.save_pretrained(m, tmp_path / f"m{i}")
    _, data = _rgb_model_and_folder(tmp_path, per_class=4)
    for i, (kw, want) in enumerate(cases):
        r = run_main("fewshot", "--model", str(tmp_path / f"m{i}"), "--data", str(data), "--shots", "1",
                     "--seeds", "1", "--representation", "token", "--workers", "0")
        assert r.returncode == 0, r.stderr[-1500:]
        assert want in r.stdout, r.stdout
        assert ("class token" in r.stdout) == (kw["pooling"] == "token"), r.stdout
        if kw.get("num_registers"):
            assert "the 4 register tokens are not pooled" in r.stdout


def test_one_exit_rule_for_skipped_inputs(tmp_path: Path) -> None:
    """Exit 2: nothing was done (a user mistake); exit 1: the job ran to the end but skipped unreadable inputs, each
    named on stderr -- the same in predict, eval, fewshot, inspect and fine-tuning."""
    model, data = _rgb_model_and_folder(tmp_path, per_class=6)
    (data / "red" / "corrupt.png").write_bytes(b"\x89PNG broken")
    runs = {"predict": ("predict", str(data), "--model", str(model), "--runtime", "torch"),
            "eval": ("eval", "--model", str(model), "--data", str(data), "--workers", "0"),
            "fewshot": ("fewshot", "--model", str(model), "--data", str(data), "--shots", "1", "--seeds", "1",
                        "--workers", "0"),
            "inspect": ("inspect", "--model", str(model), "--images", str(data / "red" / "0.png"),
                        str(data / "red" / "corrupt.png"), "--out", str(tmp_path / "insp"), "--no-progress"),
            "finetune": ("finetune", "--model", str(model), "--data", str(data), "--steps", "1", "--img-size", "32", "--out",
                         str(tmp_path / "ft"), "--no-progress", "--set", "data.num_workers=0", "--set",
                         "train.eval_every=0", "--set", "data.holdout=0.25", "--set", "train.tensorboard=false")}
    for name, argv in runs.items():
        r = run_main(*argv)
        assert r.returncode == 1, (name, r.stderr[-1500:])
        assert "corrupt.png" in r.stderr + r.stdout + (
            (tmp_path / "ft" / "metrics.jsonl").read_text() if name == "finetune" else ""), name
        assert "vitkit's own failure" not in r.stderr, (name, r.stderr)
    only_bad = run_main("inspect", "--model", str(model), "--images", str(data / "red" / "corrupt.png"),
                       "--out", str(tmp_path / "insp2"), "--no-progress")
    assert only_bad.returncode == 2 and not (tmp_path / "insp2").exists()  # nothing could be done: a user mistake


def test_reproduce_smoke_without_names_says_what_to_type() -> None:
    """One smoke experiment takes over a minute on 2 cores (fig4: > 60 s, 2026-11-25), so `--smoke` alone is no
    default run: the one-line error gives the exact commands."""
    r = run_main("reproduce", "--smoke")
    assert r.returncode == 2
    assert_one_line_error(r, "vitkit reproduce --smoke fig4", "vitkit reproduce --all --smoke")
    plain = run_main("reproduce")
    assert_one_line_error(plain, "`vitkit reproduce fig4`", "`vitkit reproduce --all`")


def _parser_state(parser: argparse.ArgumentParser) -> list:
    """Everything parsing could change in a parser: its help, each action's destination, default, choices and
    options, and its set_defaults (the subparser itself named by its prog), for the parser and each command's."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    state = []
    for p in [parser, *sub.choices.values()]:
        actions = [(a.dest, repr(a.default), a.option_strings, repr(a.choices), a.nargs, a.required) for a in p._actions]
        defaults = {k: (v.prog if isinstance(v, argparse.ArgumentParser) else repr(v)) for k, v in p._defaults.items()}
        state.append((p.prog, p.format_help(), actions, defaults))
    return state


def test_main_builds_the_parser_once_and_parsing_leaves_it_as_built(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    built = []
    monkeypatch.setattr(cli, "build_parser", lambda: built.append(1) or build_parser())
    cli._parser.cache_clear()
    try:
        missing = str(tmp_path / "missing")
        assert main(["eval", "--model", missing, "--data", missing]) == 2  # parsed, then refused by the command
        assert main(["train", "--config", missing, "--set", "train.steps=1", "--set", "a.b=2"]) == 2  # --set appends
        with pytest.raises(SystemExit):
            main(["predict", "--no-such-option"])
        assert main([]) == 2  # no command: the help
        assert built == [1]  # one parser for the four calls
        assert _parser_state(cli._parser()) == _parser_state(build_parser())  # as a new one
    finally:
        cli._parser.cache_clear()  # the next test's main builds its own from the real build_parser
    capsys.readouterr()


def test_main_runs_the_command_modules_run_as_it_is_when_called(monkeypatch) -> None:  # noqa: ANN001
    import vitkit.commands.eval as ev

    cli._parser()  # the parser is built (or was), with the eval module's run of that moment
    monkeypatch.setattr(ev, "run", lambda args: 7)
    assert main(["eval", "--model", "x"]) == 7
