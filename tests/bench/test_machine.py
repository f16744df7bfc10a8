"""The int8 roof of vitkit/bench/machine.py: the integer matmul it times computes the product it claims, and its rate
is a finite positive op/s; an unknown backend is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from vitkit.bench.machine import _ort_matmul_integer, int8_matmul_peak

pytest.importorskip("onnxruntime")


def test_the_int8_roof_times_onnxruntimes_integer_matmul_and_reports_its_rate() -> None:
    sess, a, b = _ort_matmul_integer(64, threads=1)
    (got,) = sess.run(None, {"A": a})
    assert got.dtype == np.int32 and np.array_equal(got, a.astype(np.int32) @ b.astype(np.int32))
    peak = int8_matmul_peak("onnxruntime", sizes=(64,), repeats=2)
    assert 1e6 < peak < 1e15
    assert 0 < int8_matmul_peak("torch", sizes=(32,), repeats=1) < 1e15
    with pytest.raises(ValueError, match="unknown int8 matmul backend 'int4'"):
        int8_matmul_peak("int4")
