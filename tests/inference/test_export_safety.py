"""Exports never overwrite their input, and their timings say how reliable they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.formats import save_pretrained


def test_export_never_overwrites_its_source(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = tmp_path / "ckpt" / "model.bin"  # a checkpoint named as OpenVINO names its weights
    src.parent.mkdir()
    src.write_bytes(b"the user's only copy of the weights")
    assert main(["export", str(src), "--format", "openvino"]) == 2
    assert "never replaces its input" in capsys.readouterr().err
    assert src.read_bytes() == b"the user's only copy of the weights"
    assert main(["export", str(src), "--format", "onnx", "--out", str(tmp_path / "ckpt" / "model.bin.onnx"),
                 "--no-check"]) == 2  # not a checkpoint vitkit reads, but nothing else was written or lost either
    assert src.read_bytes() == b"the user's only copy of the weights"
    # a vitkit folder holding a file that an OpenVINO export would write over
    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    (folder / "model.bin").write_bytes(b"user data")
    assert main(["export", str(folder), "--format", "openvino"]) == 2
    assert (folder / "model.bin").read_bytes() == b"user data"


def test_export_bench_reports_spread_and_flags_noisy_timings(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("onnxruntime")
    import vitkit.bench.exported as bx
    from vitkit.bench.timing import Timing

    def noisy(model, paths, batch=8, warmup=1, repeats=5):  # noqa: ANN001, ANN202 - a contended machine's samples
        return {"pytorch": Timing([0.010, 0.011, 0.60]), **{n: Timing([0.0001, 0.0002, 0.0001]) for n in paths}}

    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    monkeypatch.setattr(bx, "bench_exports", noisy)
    assert main(["export", str(folder), "--no-check", "--bench", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "onnx fp32" in out and "UNRELIABLE: repeats spread" in out and "spread" in out
    assert main(["export", str(folder), "--no-check", "--bench", "--repeats", "1"]) == 2
