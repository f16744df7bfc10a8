"""Evaluation and prediction say what they did: classes matched by name, unknown classes refused, the features few-shot uses, predict's options.

`vitkit eval --native` (NaViT): each image scored at its own aspect ratio, packed, on an ordinary checkpoint; the
accuracy is the one of the model run on each image alone at its native size."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import digits_model, native_images, tiny_labelled_vit
from tests.inputs import digit_folder, noise_folder, top_k_percent
from vitkit.cli import main
from vitkit.data.preprocess import read_image
from vitkit.formats import save_pretrained
from vitkit.models.packing import native_grid


def test_eval_maps_a_folders_classes_by_name(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    """A folder holding only digits 3 and 7 used to be scored by sorted index (3 -> class 0, 7 -> class 1):
    ~0% top-1. Matched by name it scores as the model really does, and top-5 is not reported for 2 classes."""
    folder = digit_folder(tmp_path / "two", [3, 7])
    assert main(["eval", "--model", str(digits_ckpt), "--data", str(folder), "--split", "all"]) == 0
    out = capsys.readouterr().out
    top1 = top_k_percent(out, 1)
    assert top1 is not None and top1 > 70.0, out
    assert top_k_percent(out, 5) is None and "classes: 2 present of the 10" in out
    # the same folder with all ten digits reports top-5 (> 5 classes present)
    folder10 = digit_folder(tmp_path / "ten", list(range(10)), n=100)
    assert main(["eval", "--model", str(digits_ckpt), "--data", str(folder10), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert top_k_percent(out, 5) is not None and top_k_percent(out, 5) >= top_k_percent(out, 1)


def test_eval_refuses_classes_the_model_does_not_know(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    assert main(["eval", "--model", str(digits_ckpt), "--data", "lfw"]) == 2
    err = capsys.readouterr().err
    assert "'non-face', 'face' are not among the 10 classes" in err
    # a model with no stored labels: matched by index only when the counts agree
    m = vitkit.load_pretrained(digits_ckpt)
    m.preprocess.labels = []
    vitkit.save_pretrained(m, tmp_path / "nolabels")
    folder = digit_folder(tmp_path / "two", [3, 7])
    assert main(["eval", "--model", str(tmp_path / "nolabels"), "--data", str(folder), "--split", "all"]) == 2
    assert "stores no class names and predicts 10 classes" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "nolabels")]) == 0  # digits: 10 classes, matched by index
    assert "matched by index" in capsys.readouterr().err


def test_predict_options_and_messages(digits_ckpt: Path, tmp_path: Path, capsys) -> None:
    img = tmp_path / "d.png"
    Image.new("L", (8, 8), 100).save(img)
    assert main(["predict", str(img), "--model", str(digits_ckpt), "--topk", "0"]) == 2
    assert "--topk must be a positive whole number, got 0" in capsys.readouterr().err
    assert main(["predict", str(img), "--model", str(digits_ckpt), "--topk", "3"]) == 0
    assert len(re.findall(r"\(\d+\.\d%\)", capsys.readouterr().out)) == 3


def test_fewshot_names_the_features_it_uses(tmp_path: Path, capsys) -> None:
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    assert main(["fewshot", "--model", str(tmp_path / "m"), "--seeds", "1", "--shots", "1"]) == 0
    out = capsys.readouterr().out
    assert "pre_logits features" not in out and "final class token LN(z_L^0) features (the head's input" in out
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, representation_size=8),
                           tmp_path / "r")
    assert main(["fewshot", "--model", str(tmp_path / "r"), "--seeds", "1", "--shots", "1"]) == 0
    assert "pre_logits features (the 8-d tanh layer" in capsys.readouterr().out


def test_eval_scores_a_folder_without_splits_whole(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    model = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    model.preprocess.labels = ["c0", "c1", "c2"] + [f"x{i}" for i in range(7)]
    save_pretrained(model, folder)
    data = noise_folder(tmp_path / "data", n=30, classes=3)
    (data / "c3").mkdir()  # an empty class folder is named
    with pytest.warns(UserWarning, match="class folder\\(s\\) c3 hold no image files"):
        assert main(["eval", "--model", str(folder), "--data", str(data)]) == 2  # c3 is no class of the model
    (data / "c3").rmdir()
    assert main(["eval", "--model", str(folder), "--data", str(data)]) == 0
    assert "scored 30 images, all of it (it has no test split of its own)" in capsys.readouterr().out
    assert main(["eval", "--model", str(folder), "--data", str(data), "--split", "test"]) == 0
    assert "its test split (a holdout vitkit carved" in capsys.readouterr().out


def test_eval_native_scores_each_image_at_its_own_aspect(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    m = tiny_labelled_vit()
    vitkit.save_pretrained(m, tmp_path / "m")
    files = {}
    for seed, c in enumerate("ab"):  # two of the model's five classes, four images each of mixed aspects
        (tmp_path / "data" / c).mkdir(parents=True)
        files[c] = native_images(tmp_path / "data" / c, seed)
    right = 0
    for label, fs in files.items():
        for f in fs:
            x = read_image(str(f), 3)
            gh, gw = native_grid(*x.shape[1:], 8, 16)
            alone = copy.deepcopy(m)
            alone.set_img_size((8 * gh, 8 * gw))
            with torch.no_grad():
                right += int(alone(m.preprocess.native(x[None], 8, 16)).argmax(-1)) == "abcde".index(label)
    assert main(["eval", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "data"), "--native",
                 "--max-patches", "16", "--batch-size", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"scored 8 images", out)
    top1 = float(re.search(r"top-1: ([\d.]+)%", out).group(1))
    assert abs(top1 - 100 * right / 8) < 0.01
