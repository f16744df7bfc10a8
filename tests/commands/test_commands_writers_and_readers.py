"""One rule for every writer (an existing output is replaced only with --overwrite; a file where a folder goes is
named) and every reader (a link out of a folder given is refused), and no run writes outside what it was asked to
write: OpenVINO's telemetry is declined (nothing under $HOME, no network lookup)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import digits_model
from tests.inputs import png_bytes
from vitkit.cli import main
from vitkit.formats import save_pretrained


def _model(tmp_path: Path) -> Path:
    return save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), tmp_path / "m")


def test_export_never_replaces_an_existing_file_without_overwrite(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    pytest.importorskip("onnxruntime")
    model = _model(tmp_path)
    notes = tmp_path / "notes.onnx"
    notes.write_text("my notes")
    capsys.readouterr()
    assert main(["export", str(model), "--out", str(notes), "--no-check"]) == 2
    assert "notes.onnx already exists; choose another --out, or --overwrite" in capsys.readouterr().err
    assert notes.read_text() == "my notes"
    shipped = model / "model.onnx"  # a model.onnx shipped in the checkpoint folder: the default --out
    shipped.write_text("shipped")
    assert main(["export", str(model), "--no-check"]) == 2
    assert shipped.read_text() == "shipped"
    (tmp_path / "dir.onnx").mkdir()
    assert main(["export", str(model), "--out", str(tmp_path / "dir.onnx"), "--no-check", "--overwrite"]) == 2
    assert "(a folder); choose another --out" in capsys.readouterr().err
    assert main(["export", str(model), "--out", str(notes), "--no-check", "--overwrite"]) == 0
    assert notes.read_bytes()[:4] != b"my n"


@pytest.mark.usefixtures("figures_not_encoded")  # its figures: drawn, not laid out nor encoded (inspect.json is read)
def test_inspect_never_writes_into_an_existing_folder_without_overwrite(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model = _model(tmp_path)
    img = tmp_path / "x.png"
    img.write_bytes(png_bytes())
    out = tmp_path / "figs"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    args = ["inspect", "--model", str(model), "--images", str(img), "--no-progress", "--out"]
    capsys.readouterr()
    assert main([*args, str(out)]) == 2
    assert "figs already exists and is not empty; choose another --out, or --overwrite" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert main([*args, str(img)]) == 2  # --out pointing at a file
    assert "x.png: is not a folder" in capsys.readouterr().err
    assert main([*args, str(out), "--overwrite"]) == 0
    assert (out / "inspect.json").is_file() and (out / "mine.txt").read_text() == "mine"


def test_predict_refuses_a_link_out_of_the_folder_as_eval_does(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model = _model(tmp_path)
    outside = tmp_path / "private.png"
    outside.write_bytes(png_bytes())
    photos = tmp_path / "photos" / "c0"
    photos.mkdir(parents=True)
    (photos / "a.png").write_bytes(png_bytes(50))
    os.symlink(outside, photos / "b.png")
    capsys.readouterr()
    assert main(["predict", str(photos.parent), "--model", str(model)]) == 2
    out = capsys.readouterr()
    assert "b.png is a symlink to" in out.err and "outside the data folder" in out.err and "private" not in out.out
    assert main(["eval", "--model", str(model), "--data", str(photos.parent)]) == 2
    assert "outside the data folder" in capsys.readouterr().err


GUARD = textwrap.dedent("""
    import socket, sys
    def refuse(*a, **k):
        open(sys.argv[1], "a").write(f"network: {a[:2]}\\n")
        raise OSError("no network in this test")
    socket.getaddrinfo = refuse
    socket.socket.connect = refuse
    socket.create_connection = refuse
    from vitkit.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def test_an_openvino_run_writes_nothing_under_home_and_opens_no_connection(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    pytest.importorskip("onnxruntime")
    model = _model(tmp_path)
    img = tmp_path / "x.png"
    img.write_bytes(png_bytes())
    home, log = tmp_path / "home", tmp_path / "network.log"
    home.mkdir()
    r = subprocess.run([sys.executable, "-c", GUARD, str(log), "predict", str(img), "--model", str(model),
                        "--runtime", "openvino", "--precision", "fp32"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HOME": str(home)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "openvino" in r.stderr  # (the run says which runtime it chose)
    assert list(home.rglob("*")) == []
    assert not log.exists(), log.read_text()
