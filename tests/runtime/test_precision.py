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
