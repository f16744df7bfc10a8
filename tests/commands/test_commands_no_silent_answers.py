"""Values that would give an answer that means nothing are refused by name, exit 2, before any work: a one-class data
set (every accuracy 100%), few-shot settings with no draw, no shot or a NaN L2, a negative head, an image size of
three numbers, class names that do not match the head."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import vitkit
from tests.helpers import digits_model
from tests.inputs import TINY_FLAGS, noise_folder, png_bytes
from vitkit.cli import main
from vitkit.formats import save_pretrained


def _tiny(tmp_path: Path) -> Path:
    return save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")


def test_a_one_class_folder_is_refused_naming_the_class(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    one = noise_folder(tmp_path / "one", n=4, classes=1)
    model = _tiny(tmp_path)
    capsys.readouterr()
    for argv in (["train", "--config", "digits_pretrain", "--set", "data.name=folder", "--set", f"data.path={one}",
                  "--out", str(tmp_path / "tr")],
                 ["finetune", "--model", str(model), "--data", str(one), "--out", str(tmp_path / "ft")],
                 ["fewshot", "--model", str(model), "--data", str(one)]):
        extra = ["--no-progress", *TINY_FLAGS] if argv[0] != "fewshot" else []
        assert main([*argv, *extra]) == 2, argv[0]
        err = capsys.readouterr().err
        assert re.search(r"needs at least 2 classes, the data has only class 'c0' \([1-4] images\)", err), err
        assert not (tmp_path / "tr" / "model").exists() and not (tmp_path / "ft" / "model").exists()
    two = noise_folder(tmp_path / "two", n=8, classes=2)
    assert main(["fewshot", "--model", str(model), "--data", str(two), "--shots", "1", "--seeds", "1"]) == 0


def test_fewshot_settings_that_measure_nothing_are_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model = str(_tiny(tmp_path))
    for flags, why in ((["--shots", "-5"], "shots must be whole numbers >= 1, got [-5]"),
                       (["--shots", "0,1"], "shots must be whole numbers >= 1, got [0, 1]"),
                       (["--seeds", "0"], "at least one random draw"),
                       (["--seeds", str(10**20)], f"--seeds must be at most 10,000 random draws of the shots, got {10**20}"),
                       (["--shots", str(10**20)], "shots must be at most 1,000,000,000 examples per class"),
                       (["--l2", "nan"], "l2 must be a finite number >= 0, got nan"),
                       (["--l2", "-1"], "l2 must be a finite number >= 0, got -1.0")):
        capsys.readouterr()
        assert main(["fewshot", "--model", model, *flags]) == 2, flags
        out = capsys.readouterr()
        assert why in out.err and "accuracy" not in out.out, (flags, out)
    from vitkit.inference.fewshot import fewshot_table

    with pytest.raises(ValueError, match="l2 must be a finite number"):
        fewshot_table((None, None), (None, None), 3, [1], [0], float("inf"))


def test_convert_refuses_a_negative_head_and_three_image_sides(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = _tiny(tmp_path)
    for flags, why in ((["--num-classes", "-1"], "num_classes must be"),
                       (["--num-classes", "1000000000"], "num_classes must be"),
                       (["--img-size", "32", "32", "32"], "expected a size S or HxW in pixels"),
                       (["--img-size", "65536"], "over vitkit's sanity bound of 262,144 tokens")):
        capsys.readouterr()
        assert main(["convert", str(src), str(tmp_path / "out"), "--to", "vitkit", *flags]) == 2, flags
        assert why in capsys.readouterr().err, flags
        assert not (tmp_path / "out").exists()
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "vitkit", "--img-size", "32", "48"]) == 0
    assert vitkit.load_pretrained(tmp_path / "out").config.img_size == (32, 48)


def test_class_names_that_do_not_match_the_head_are_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = _tiny(tmp_path)  # a 10-way head
    doc = json.loads((src / "config.json").read_text())
    doc["preprocess"]["labels"] = ["a", "b", "c"]
    (src / "config.json").write_text(json.dumps(doc))
    (tmp_path / "x.png").write_bytes(png_bytes())
    with pytest.raises(ValueError, match="3 class names \\(labels\\) for a 10-way head"):
        vitkit.load_pretrained(src)
    assert main(["predict", str(tmp_path / "x.png"), "--model", str(src)]) == 2
    hf = save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "hf", format="hf")
    doc = json.loads((hf / "config.json").read_text())
    doc["id2label"] = {"0": "a", "1": "b", "2": "c"}
    (hf / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="config.json: id2label names 3 classes, but the classifier in the weights "
                                         "has 10 outputs"):
        vitkit.load_pretrained(hf)
