"""One parser per user-facing value (vitkit.utils.options): the image size is `S` or `HxW` in every command and
recipe, with errors that name the option and the value; convert's old `H W` still reads, with a note."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import digits_model
from vitkit.cli import build_parser, main
from vitkit.formats import load_pretrained, save_pretrained
from vitkit.utils.options import (
    LOAD_HINTS,
    PRECISIONS,
    img_size_arg,
    img_sizes_arg,
    legacy_img_size,
    parse_img_size,
    precision_list_arg,
)
from vitkit.utils.precision import CHOICES


def test_one_image_size_syntax() -> None:
    assert parse_img_size("384") == 384 and parse_img_size(" 384x512 ") == (384, 512)
    assert parse_img_size("384X512") == (384, 512) and parse_img_size(224) == 224 and parse_img_size([8, 16]) == (8, 16)
    for bad in ("0", "-4", "abc", "1x2x3", "384,512", "", "4.5", True, [1, 2, 3]):
        with pytest.raises(ValueError, match=r"--img-size: expected a size S or HxW in pixels \(e.g. 384 or 384x512\), got"):
            parse_img_size(bad)
    with pytest.raises(ValueError, match="model.img_size: expected"):
        parse_img_size("x", "model.img_size")
    with pytest.raises(argparse.ArgumentTypeError, match="got '0x3'"):
        img_size_arg("0x3")
    assert img_sizes_arg("224,384x512") == [224, (384, 512)]
    with pytest.warns(FutureWarning, match="--img-size 24 32 is deprecated: write --img-size 24x32"):
        assert legacy_img_size([24, 32]) == (24, 32)
    with pytest.raises(ValueError, match="--img-size: expected"):
        legacy_img_size([24, (3, 4)])
    assert precision_list_arg("fp32,bf16") == ["fp32", "bf16"]
    with pytest.raises(argparse.ArgumentTypeError, match="one of fp32, bf16, bf16-autocast, int8; got 'bf8'"):
        precision_list_arg("fp32,bf8")
    assert CHOICES == ("auto", *PRECISIONS)


def _options(parser: argparse.ArgumentParser) -> dict[str, dict[str, argparse.Action]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {s: a for a in p._actions for s in a.option_strings} for name, p in sub.choices.items()}


def test_every_command_parses_a_value_with_its_one_parser() -> None:
    """Every --img-size is the one syntax; every loading hint has one description; every --precision one list."""
    seen = 0
    for command, opts in _options(build_parser()).items():
        if "--img-size" in opts:
            assert opts["--img-size"].type in (img_size_arg, img_sizes_arg), command
            seen += 1
        for flag, (_, kw) in LOAD_HINTS.items():
            if flag in opts:
                assert opts[flag].help == kw["help"], (command, flag)
        if "--precision" in opts and opts["--precision"].choices:
            assert set(opts["--precision"].choices) <= set(CHOICES), command
    assert seen >= 7  # bench, convert, eval, export, finetune, inspect, predict, ...


def test_commands_take_hxw_and_refuse_a_bad_size_by_name(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    assert main(["convert", str(tmp_path / "m"), str(tmp_path / "a"), "--to", "vitkit", "--img-size", "24x32"]) == 0
    assert load_pretrained(tmp_path / "a").config.img_size == (24, 32)
    with pytest.warns(FutureWarning, match="write --img-size 24x32"):  # the README's old spelling still reads
        assert main(["convert", str(tmp_path / "m"), str(tmp_path / "b"), "--to", "vitkit", "--img-size", "24", "32"]) == 0
    assert load_pretrained(tmp_path / "b").config.img_size == (24, 32)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path / "m"), "--img-size", "24y32"])
    assert "argument --img-size: expected a size S or HxW in pixels (e.g. 384 or 384x512), got '24y32'" in \
        capsys.readouterr().err
    assert main(["bench", "--models", "vit_ti16", "--img-size", "32x16"]) == 2
    assert "--img-size 32x16: the benchmark times square images" in capsys.readouterr().err


def test_export_precision_is_the_vocabulary_and_int8_a_deprecated_alias() -> None:
    from vitkit.commands.export import export_int8

    assert export_int8("int8", False) and not export_int8(None, False) and not export_int8("fp32", False)
    with pytest.warns(FutureWarning, match="write --precision int8"):
        assert export_int8(None, True)
    with pytest.raises(ValueError, match="--int8 disagrees with --precision fp32"):
        export_int8("fp32", True)


def test_merge_has_one_parser() -> None:
    import argparse

    from vitkit.utils.options import merge_arg

    assert merge_arg("4") == 4 and merge_arg("1,2,0") == [1, 2, 0]
    for bad in ("x", "-1", "", "2,-3"):
        with pytest.raises(argparse.ArgumentTypeError, match="tokens merged per block"):
            merge_arg(bad)


def test_bench_names_its_rows_of_merge_rates_apart_from_merge(capsys) -> None:  # noqa: ANN001
    """`bench --merge-rows 4,8` times one row per rate; `--merge R1,R2` elsewhere is one model's per-block schedule.
    bench's old `--merge 4,8` still reads, with a FutureWarning naming the new spelling; both parsers live in
    vitkit/utils/options.py."""
    import argparse

    from vitkit.cli import build_parser
    from vitkit.utils.options import merge_rows, merge_rows_arg

    assert merge_rows_arg("4,8") == [4, 8] and merge_rows_arg("16") == [16]
    for bad in ("x", "0", "", "4,-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="one row per rate"):
            merge_rows_arg(bad)
    assert merge_rows([4, 8], None) == (4, 8) and merge_rows(None, None) == ()
    with pytest.warns(FutureWarning, match="bench --merge 4,8 is deprecated .* write --merge-rows 4,8"):
        assert merge_rows(None, [4, 8]) == (4, 8)
    with pytest.raises(ValueError, match="bench --merge 4 disagrees with --merge-rows 8"):
        merge_rows([8], [4])
    args = build_parser().parse_args(["bench", "--merge-rows", "2,4"])
    assert args.merge_rows == [2, 4] and args.merge is None
    with pytest.raises(SystemExit) as e:
        main(["bench", "--merge-rows", "0"])
    assert e.value.code == 2 and "argument --merge-rows: expected R1,R2,... (one row per rate" in capsys.readouterr().err


def _load_hook(name: str) -> ModuleType:
    """A build hook of the docs site (docs/_hooks/NAME.py), imported by its path (docs/ is not a package)."""
    path = Path(__file__).resolve().parents[2] / "docs" / "_hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli_reference = _load_hook("cli_reference")  # the one walk over the parser (the docs' CLI reference uses it too)
# what a help text must not carry: a date or a time of day, a measured speed, size, time, ratio or share (those live
# in BENCHMARKS.md and the docs pages, which the help points to); paper citations (a year) and sizes a user types
# (384x512, 1,000 images) are not measurements
MEASURED = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d"
                      r"|\d\s*(?:img/s|images?/s|it/s|ms|s/step|[GMKT]i?B|GFLOP/s|TFLOP/s)\b|\d(?:\.\d+)?\s*%"
                      r"|\d(?:\.\d+)?\s*[×x](?![\d])|\b(?:about|under|several|~)\s*(?:an?|\d+|a few)?\s*(?:hours?|minutes?)\b"
                      r"|\b(?:faster|slower) than\b", re.I)


def test_help_texts_carry_no_measured_figures_or_dates() -> None:
    """Every description, summary and option help of every (sub)command says what it does, never a measured figure
    or a date: figures change with machines and releases (two commits had to correct them); the docs hold them."""
    texts = list(cli_reference.help_texts(build_parser()))
    assert len(texts) > 200 and any(w == "--grad-checkpoint" for _, w, _ in texts)  # the walk reaches every option
    found = [f"{prog} {what}: {m.group(0)!r} in {text!r}" for prog, what, text in texts if (m := MEASURED.search(text))]
    assert not found, "\n".join(found)
    root = Path(__file__).resolve().parents[2]
    pages = {page for _, _, text in texts for page in re.findall(r"docs/[\w/-]+\.md", text)}
    assert pages and all((root / page).is_file() for page in pages), pages  # where a help text sends the reader
    assert MEASURED.search("about 1.1-1.4x slower (2026-11-26)") and MEASURED.search("peak 5.42 GiB")
    assert not MEASURED.search("--img-size 384x512 (Dosovitskiy et al. 2021), 1,000 images")
