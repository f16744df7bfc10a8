"""One rule for every file a command writes for the user (issue 50, `utils.files.OutputFile`): an existing file
only with --overwrite, one writer per destination, the old file kept until the new one is whole; and inputs that
name nothing are an error, not an empty answer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.formats import save_pretrained
from vitkit.inference import backends
from vitkit.utils.files import OutputFile


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("door")
    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), root / "m")
    imgs = root / "imgs"
    imgs.mkdir()
    for i in range(3):
        Image.fromarray(np.full((16, 16), 40 * i, np.uint8)).save(imgs / f"{i}.png")
    return root


@pytest.mark.parametrize("command, flag, name", [("predict", "--output", "p.csv"), ("embed", "--output", "e.npz")])
def test_an_existing_output_needs_overwrite(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                            command: str, flag: str, name: str) -> None:
    out = tmp_path / name
    out.write_text("the user's file")
    args = [command, str(ckpt / "imgs"), "--model", str(ckpt / "m"), flag, str(out), "--no-progress"]
    assert main(args) == 2
    assert f"{flag} {out} exists" in capsys.readouterr().err and out.read_text() == "the user's file"
    assert main([*args, "--overwrite"]) == 0
    assert out.read_bytes() != b"the user's file" and out.stat().st_size > 0
    assert not list(tmp_path.glob(".*"))  # no lock file, no temporary file left


def test_fewshot_json_needs_overwrite(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "t.json"
    out.write_text("{}")
    args = ["fewshot", "--model", str(ckpt / "m"), "--shots", "1", "--seeds", "1", "--method", "ridge",
            "--json", str(out)]
    assert main(args) == 2
    assert f"--json {out} exists" in capsys.readouterr().err and out.read_text() == "{}"
    assert main([*args, "--overwrite"]) == 0
    assert "1" in json.loads(out.read_text())


def test_one_writer_per_destination_and_the_old_file_kept(tmp_path: Path) -> None:
    out = tmp_path / "f.csv"
    out.write_text("old")
    first = OutputFile(out, overwrite=True)
    with pytest.raises(BlockingIOError, match=f"--output {out} is in use by another vitkit job"):
        OutputFile(out, overwrite=True)  # a second `--overwrite` job on the same file, while the first runs
    with pytest.raises(RuntimeError, match="boom"), first.replacing() as tmp:
        tmp.write_text("half a ne")
        raise RuntimeError("boom")  # the job fails while writing
    assert out.read_text() == "old"
    with first.replacing() as tmp:
        tmp.write_text("new")
    first.release()
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]
    OutputFile(out, overwrite=True).release()  # free again once released


def test_a_failed_export_keeps_the_earlier_export(ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    pytest.importorskip("onnx")
    model = vitkit.load_pretrained(ckpt / "m")
    out = tmp_path / "m.onnx"
    backends.export_model(model, "onnx", out)
    good = out.read_bytes()
    real = backends.FORMATS["onnx"]

    def torn(model: torch.nn.Module, path: Path, opset: int) -> Path:  # the exporter dies after opening its file
        Path(path).write_bytes(b"\x08")
        raise RuntimeError("killed mid-export")

    monkeypatch.setitem(backends.FORMATS, "onnx", real.__class__(**{**real.__dict__, "export": torn}))
    with pytest.raises(RuntimeError, match="killed mid-export"):
        backends.export_model(model, "onnx", out)
    assert out.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_inputs_that_name_nothing_are_errors(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "none.txt"
    empty.write_text("# nothing here\n")
    assert main(["embed", str(empty), "--model", str(ckpt / "m"), "--output", str(tmp_path / "e.npz")]) == 2
    assert f"{empty}: this list file names no image" in capsys.readouterr().err
    assert not (tmp_path / "e.npz").exists()
    model = vitkit.load_pretrained(ckpt / "m")
    with pytest.raises(FileNotFoundError, match="no such image file: .*typo.png"):
        vitkit.embed(model, tmp_path / "typo.png")
    with pytest.raises(FileNotFoundError, match="no such image file: .*typo.png"):  # before any work, beside good ones
        vitkit.embed(model, [ckpt / "imgs", tmp_path / "typo.png"])
    (tmp_path / "torn.png").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(ValueError, match=r"1 of the 4 images could not be read: .*torn.png.*skip_unreadable=True"):
        vitkit.embed(model, [ckpt / "imgs", tmp_path / "torn.png"])  # (was: 3 rows, the torn file in .skipped only)
    kept = vitkit.embed(model, [ckpt / "imgs", tmp_path / "torn.png"], skip_unreadable=True)
    assert kept.features.shape[0] == 3 and "torn.png" in kept.skipped[0]
    with pytest.raises(TypeError, match="got PIL.Image.Image"):
        vitkit.embed(model, [Image.new("L", (16, 16))])
    with pytest.raises(TypeError, match="got torch.Tensor"):
        vitkit.embed(model, torch.zeros(1, 1, 16, 16))
    assert vitkit.embed(model, ckpt / "imgs").features.shape[0] == 3


def test_a_capped_value_is_reported_as_run(ckpt: Path, capsys: pytest.CaptureFixture) -> None:
    """--merge 10^9 runs as ToMe's clipped schedule: the log and the model (so an export's metadata) say that one;
    more shots than a class has: the row says how many examples it used."""
    import argparse

    from vitkit.commands._merge_args import apply_merge
    from vitkit.inference.fewshot import fewshot_table
    from vitkit.models.tome import merge_schedule

    model = vitkit.load_pretrained(ckpt / "m")
    apply_merge(model, argparse.Namespace(merge=10**9))
    cfg = model.config
    real = list(merge_schedule(10**9, cfg.depth, cfg.num_prefix_tokens + cfg.num_patches, cfg.num_prefix_tokens))
    assert list(model.merge_r) == real and max(real) < 10**9
    assert f"merging {real} tokens" in capsys.readouterr().err
    rng = np.random.default_rng(0)
    y = np.array([0] * 8 + [1] * 3)
    x = rng.normal(size=(11, 4)) + y[:, None]
    with pytest.warns(UserWarning, match="the 5-shot row uses 8 examples, not 10"):
        table = fewshot_table((x, y), (x, y), 2, shots=[5], seeds=[0])
    assert table[5]["examples"] == 8


def test_knn_at_a_tiny_temperature_votes_for_the_nearest() -> None:
    from vitkit.inference.fewshot import knn_predict

    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.1]])
    y = np.array([2, 1, 1])
    t = np.array([[1.0, 0.05]])  # nearest: class 2; two farther neighbours of class 1
    with np.errstate(over="raise"):
        assert knn_predict(x, y, t, 3, k=3, temperature=1e-4).tolist() == [2]
    assert knn_predict(x, y, t, 3, k=3, temperature=100.0).tolist() == [1]  # nearly equal weights: the majority


def test_inspect_images_takes_a_folder(ckpt: Path, tmp_path: Path) -> None:
    from vitkit.inspect.report import load_images

    model = vitkit.load_pretrained(ckpt / "m")
    got = load_images([str(ckpt / "imgs")], model.preprocess, warn=pytest.fail)
    assert [i.name for i in got] == ["0.png", "1.png", "2.png"]


def test_a_run_folder_and_an_adapter_folder_say_what_to_load(ckpt: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ckpt / "m", run / "model")
    with pytest.raises(ValueError, match=f"{run}: a run folder, not a checkpoint: its model is {run / 'model'}"):
        vitkit.load_pretrained(run)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="a LoRA adapter folder, not a checkpoint: .*load_adapters"):
        vitkit.load_pretrained(adapter)


def test_a_backbone_gets_a_head_added_not_a_0_way_head_replaced(tmp_path: Path) -> None:
    from vitkit.train.config import load_config
    from vitkit.train.run import build_model

    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, num_classes=0), tmp_path / "b")
    ft = load_config("digits_finetune", [f"model.pretrained='{tmp_path / 'b'}'"])
    notes: list[str] = []
    build_model(ft.model, [str(i) for i in range(10)], 1, ft.data, notes)
    assert "added: a new zero-initialised 10-way head (the checkpoint has none: a backbone)" in notes
    assert not any("the 0-way head" in n for n in notes), notes
