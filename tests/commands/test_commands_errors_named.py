"""Mistakes named in vitkit's words before any work: a misspelt model name (with the nearest names), a `skimage:`
name that is not a bundled photo, an ONNX opset or a batch the export cannot take."""

from __future__ import annotations

from pathlib import Path

import pytest

import vitkit
from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.formats import save_pretrained


def test_a_misspelt_model_name_suggests_the_nearest() -> None:
    with pytest.raises(ValueError, match=r"2244 px is not a whole number of 16-px patches; did you mean "
                                         r"'vit_base_patch16_224'"):
        vitkit.create_model("vit_base_patch16_2244")
    with pytest.raises(ValueError, match=r"known names include \['vit_base_patch16_224'"):
        vitkit.create_model("vit_bse_patch16_224")


def test_only_bundled_photos_are_skimage_names(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    pytest.importorskip("skimage")
    model = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")
    capsys.readouterr()
    assert main(["inspect", "--model", str(model), "--images", "skimage:download_all", "--out", str(tmp_path / "i"),
                 "--no-progress"]) == 2
    assert "skimage:download_all is not one of scikit-image's bundled photos (astronaut" in capsys.readouterr().err
    # a skimage.data name that is not a bundled photo: named as the command's mistake (before: "none of the 1 images
    # could be read", after a warning line)
    assert main(["inspect", "--model", str(model), "--images", "skimage:lfw_subset", "--out", str(tmp_path / "i"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: skimage:lfw_subset is not one of scikit-image's bundled photos" in err and "none of" not in err


def test_export_options_out_of_range_are_named(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    pytest.importorskip("onnx")
    model = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")
    for flags, why in ((["--opset", "1"], "--opset 1: vitkit's ONNX export needs opset 14"),
                       (["--opset", "99"], "--opset 99: vitkit's ONNX export needs opset 14"),
                       (["--batch", "0"], "--batch must be")):
        capsys.readouterr()
        assert main(["export", str(model), "--out", str(tmp_path / "m.onnx"), *flags]) == 2, flags
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "m.onnx").exists()


def test_a_warning_is_one_line_in_vitkits_words(tmp_path: Path, preloaded) -> None:  # noqa: ANN001
    tanh = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")
    # `python -m vitkit` in a process of its own (pytest records warnings), forked from the suite's preloaded
    # interpreter (tests.helpers.Preloaded: Python's warning machinery as a fresh interpreter has it)
    r = preloaded.vitkit("convert", str(tanh), str(tmp_path / "t.safetensors"), "--to", "timm", preload=["vitkit.cli"])
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "vitkit convert: warning: this model uses tanh GELU" in err
    assert "UserWarning" not in err and ".py:" not in err


def test_the_crafted_input_script_gives_its_cases_their_verdicts(tmp_path: Path) -> None:
    """tests/crafted.py (benchmarks/crafted_inputs.py's cases, BENCHMARKS.md "Round 3"), a seconds-long slice: the
    data-loss and error cases."""
    from tests import crafted as mod

    for i, (name, group, build, want) in enumerate(mod.CASES):
        if group in ("data loss", "errors", "held checkpoints") and name not in mod.ROUND4B:  # (each has its test)
            d = tmp_path / str(i)
            d.mkdir()
            r = mod._in_process(build(d), 30, d)
            got = mod.verdict(r)
            assert got == want, (name, got, r.stderr[-500:])
            assert mod.SAYS.get(name, "") in r.stdout + r.stderr, name
            assert mod.kept(d), name


def test_binary_and_utf16_recipes_and_list_files_are_named(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A codec error names the file and says what it looks like (before: "'utf-8' codec can't decode byte 0xff in
    position 0", no file); /proc/self/mem among images is skipped and named (before: "error: Input/output error",
    exit 2, no file)."""
    from tests.inputs import png_file

    (tmp_path / "r.toml").write_text('description = "x"\n', encoding="utf-16")
    assert main(["train", "--config", str(tmp_path / "r.toml"), "--no-progress"]) == 2
    assert f"{tmp_path / 'r.toml'}: the recipe is not UTF-8 text: byte 0xff at offset 0 (it looks like UTF-16: " \
        "save it as UTF-8)" in capsys.readouterr().err
    model = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")
    (tmp_path / "list.txt").write_bytes(b"a.png 0\n" + bytes(range(128, 256)))
    assert main(["eval", "--model", str(model), "--data", str(tmp_path / "list.txt")]) == 2
    assert f"{tmp_path / 'list.txt'}: the list file is not UTF-8 text: byte 0x80 at offset 8" in capsys.readouterr().err
    good = png_file(tmp_path / "x.png", 200, (8, 8))
    assert main(["predict", "/proc/self/mem", str(good), "--model", str(model)]) == 1
    out = capsys.readouterr()
    assert "skipped: cannot read image /proc/self/mem: Input/output error" in out.err and str(good) in out.out


def test_a_folder_where_a_file_goes_is_named_not_the_temporary_file(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Before: "error: /x/.m.safetensors.4szqbp_u.tmp: is a folder, a file was expected" (vitkit's temp file)."""
    model = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")
    (tmp_path / "t.safetensors").mkdir()
    capsys.readouterr()
    assert main(["convert", str(model), str(tmp_path / "t.safetensors"), "--to", "timm"]) == 2
    err = capsys.readouterr().err
    # the temporary file's ".tmp" suffix nowhere in the message (the test's own folder may hold ".tmp": a TMPDIR's)
    assert f"{tmp_path / 't.safetensors'}: is a folder, a file was expected" in err
    assert ".tmp" not in err.replace(str(tmp_path), "")
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
