"""The one precision vocabulary (vitkit.utils.precision) as predict, eval, bench and train use it."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.formats import save_pretrained
from vitkit.utils import precision


def test_names_dtypes_and_autocast() -> None:
    assert precision.CHOICES == ("auto", "fp32", "bf16", "bf16-autocast", "int8")
    assert precision.input_dtype("bf16") == torch.bfloat16 and precision.input_dtype("bf16-autocast") == torch.float32
    m = torch.nn.Linear(4, 4)
    assert precision.get("bf16").cast(m) is not m and m.weight.dtype == torch.float32  # a copy
    assert precision.get("bf16-autocast").cast(m) is m
    with precision.autocast("bf16-autocast"):
        assert m(torch.randn(2, 4)).dtype == torch.bfloat16  # fp32 weights, bf16 matmul
    with precision.autocast("fp32"):
        assert m(torch.randn(2, 4)).dtype == torch.float32
    assert precision.resolve("auto", native="bf16-autocast", flags={"amx_bf16"})[0] == "bf16-autocast"
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, bf16-autocast; got 'int8'"):
        precision.get("int8", ("fp32", "bf16", "bf16-autocast"))


def test_eval_takes_every_precision_from_one_flag(tmp_path, capsys) -> None:  # noqa: ANN001
    save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    tops = {}
    for p in ("fp32", "bf16-autocast", "bf16"):
        assert main(["eval", "--model", str(tmp_path / "m"), "--precision", p]) == 0
        out = capsys.readouterr()
        assert f"precision: {p} (asked for)" in out.err
        tops[p] = float(out.out.split("top-1: ")[1].split("%")[0])
    assert abs(tops["bf16-autocast"] - tops["fp32"]) <= 2.0 and abs(tops["bf16"] - tops["fp32"]) <= 2.0
    with pytest.raises(SystemExit):  # --bf16 is folded into --precision: argparse refuses it
        main(["eval", "--model", str(tmp_path / "m"), "--bf16"])


def test_predict_and_eval_answer_in_fp32_by_default_even_where_bf16_is_native(tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """The default is the checkpoint's own answer (fp32, the same rows as --precision fp32), also on a CPU with native
    bf16 (forced here, so that the test means the same on any machine); `--precision auto` picks bf16 there, says
    what it costs, and its rows differ."""
    import csv

    from PIL import Image

    from vitkit.data.digits import load_digits_split

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda flags=None: True)
    torch.manual_seed(0)
    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    torch.nn.init.normal_(model.head.weight, std=1.0)  # a zero head would answer 0.1 everywhere, in any precision
    save_pretrained(model, tmp_path / "m")
    images = load_digits_split()[1].images[:3]
    for i, im in enumerate(images):
        Image.fromarray((im[0].numpy() * 255).round().astype("uint8")).save(tmp_path / f"{i}.png")
    base = ["predict", *(str(tmp_path / f"{i}.png") for i in range(3)), "--model", str(tmp_path / "m"),
            "--no-progress", "--topk", "10"]
    rows = {}
    for name, extra in (("default", []), ("fp32", ["--precision", "fp32"]), ("auto", ["--precision", "auto"])):
        assert main([*base, *extra, "--output", str(tmp_path / f"{name}.csv")]) == 0
        err = capsys.readouterr().err
        rows[name] = list(csv.reader(open(tmp_path / f"{name}.csv")))[1:]
        if name == "default":
            assert "precision: fp32 (the default: the checkpoint's own answer" in err
        if name == "auto":
            assert "precision: bf16 (auto: the CPU multiplies bf16 natively" in err
            assert "cost: answers are no longer fp32's" in err and "--precision fp32 gives the checkpoint's" in err
    assert rows["default"] == rows["fp32"]
    assert rows["auto"] != rows["fp32"]  # bf16 answers differ in the printed probabilities: not the default's
    assert main(["eval", "--model", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err  # neither option given: each choice says it is the default, not "asked for"
    assert "precision: fp32 (the default" in err and "runtime: torch eager, fp32 (the default" in err, err
    assert main(["eval", "--model", str(tmp_path / "m"), "--runtime", "torch", "--precision", "fp32"]) == 0
    assert "precision: fp32 (asked for); runtime: torch eager, fp32 (asked for)" in capsys.readouterr().err
    assert main(["embed", str(tmp_path / "0.png"), "--model", str(tmp_path / "m"), "-o", str(tmp_path / "f.npz"),
                 "--no-progress"]) == 0
    assert "precision: fp32 (the default" in capsys.readouterr().err

