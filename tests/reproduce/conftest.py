"""Runs that several reproduction tests read, built once per test session for every pytest-xdist worker
(`tests.helpers.shared_folder`): a test reads them and copies what it changes."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import shared_folder
from vitkit.cli import main
from vitkit.reproduce.runs import Workbench


@pytest.fixture(scope="session")
def smoke_crossover(tmp_path_factory) -> Path:  # noqa: ANN001
    """`vitkit reproduce crossover --smoke` with its progress bar, from an empty folder: the folder, with `stdout.txt`
    (what the command printed) and `bar_ends.json` ([description, steps done, steps planned] of each progress bar
    when it closed)."""

    def build(out: Path) -> None:
        ends: list[list[Any]] = []
        close = Workbench.close

        def recording_close(self: Workbench) -> None:
            if self.bar is not None:
                ends.append([self.bar.desc, self.bar.n, self.bar.total])
            close(self)

        threads, printed = torch.get_num_threads(), io.StringIO()
        Workbench.close = recording_close  # type: ignore[method-assign]
        try:  # one thread (torch and BLAS): a 2-core CI machine running other tests does not thrash
            with contextlib.redirect_stdout(printed):
                assert main(["reproduce", "crossover", "--smoke", "--out", str(out), "--threads", "1"]) == 0
        finally:
            Workbench.close = close  # type: ignore[method-assign]
            torch.set_num_threads(threads)
        (out / "stdout.txt").write_text(printed.getvalue())
        (out / "bar_ends.json").write_text(json.dumps(ends))

    return shared_folder(tmp_path_factory, "smoke-crossover", build)
