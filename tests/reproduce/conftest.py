"""Runs that several reproduction tests read, built once per test session for every pytest-xdist worker
(`tests.helpers.built_once`): a test reads them and copies what it changes."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import built_once, figures_not_laid_out, shared_root
from vitkit.cli import main
from vitkit.reproduce.crossover import CROSSOVER_SCALES
from vitkit.reproduce.plan import Pretrain, Scale
from vitkit.reproduce.runs import UNIT_FILE, Workbench

# two crossover-scale runs that differ in their seed only, trained side by side in two worker processes: the smoke
# grid's scale (its glyph stream drawn in each worker, its evaluations) with the smoke scale's tiny models (what the
# tests compare -- workers against one process, a lone run against a pair -- holds for any model)
PAIR_SCALE = replace(CROSSOVER_SCALES["smoke"].scale, models="tiny")
PAIR_RUNS = [Pretrain("ViT", "B", images=500, steps=3, seed=s, lr=6e-3) for s in (0, 1)]


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
            # its figures are read as files (check_reproduction): drawn and encoded, not laid out
            with contextlib.redirect_stdout(printed), pytest.MonkeyPatch.context() as patch:
                figures_not_laid_out(patch)
                assert main(["reproduce", "crossover", "--smoke", "--out", str(out), "--threads", "1"]) == 0
        finally:
            Workbench.close = close  # type: ignore[method-assign]
            torch.set_num_threads(threads)
        (out / "stdout.txt").write_text(printed.getvalue())
        (out / "bar_ends.json").write_text(json.dumps(ends))

    return built_once(shared_root(tmp_path_factory), "smoke-crossover", build)


@pytest.fixture(scope="session")
def pair_in_workers(tmp_path_factory) -> tuple[Scale, list[Pretrain], list[dict[str, Any]]]:  # noqa: ANN001
    """(PAIR_SCALE, PAIR_RUNS, their summaries): the two runs pre-trained at once by `Workbench(jobs=2)`, each in a
    worker process."""

    def build(out: Path) -> None:
        Workbench(out, PAIR_SCALE, progress=False, jobs=2).pretrain_all(PAIR_RUNS)

    folder = built_once(shared_root(tmp_path_factory), "pair-in-workers", build)
    return PAIR_SCALE, PAIR_RUNS, [json.loads((folder / "pretrain" / r.name(PAIR_SCALE) / UNIT_FILE).read_text())
                                   for r in PAIR_RUNS]
