"""REPRODUCTION.md's tables are generated from the committed JSON (vitkit/reproduce/report.py): the committed page
equals its rendering, the answer comes first and is short, and a change in a result file changes the answer."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from vitkit.reproduce.report import BLOCK, BLOCKS, NUMBERED, answer_table, committed_runs, deviations_table, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "REPRODUCTION.md"


@pytest.fixture(scope="module")
def runs() -> dict:
    return committed_runs()


def test_the_committed_report_is_what_the_committed_json_gives(runs: dict) -> None:
    text = PAGE.read_text()
    assert {m[2] for m in BLOCK.finditer(text)} == set(BLOCKS), "REPRODUCTION.md lacks a generated block"
    assert render(text, runs) == text, "REPRODUCTION.md is stale: run `python -m vitkit.reproduce.report`"


def test_the_answer_comes_first_and_fits_in_fifteen_lines(runs: dict) -> None:
    text = PAGE.read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    assert sections[1].startswith("0. The answer") and "<!-- generated: answer -->" in sections[1]
    shown = [ln for ln in sections[1].splitlines()[1:] if ln.strip() and not ln.startswith("<!--")]
    assert len(shown) <= 15, shown
    rows = answer_table(runs).splitlines()[2:]
    assert [int(r.split("|")[1]) for r in rows] == list(NUMBERED)  # one row per experiment, in the page's order


def test_the_answer_table_changes_with_the_json(runs: dict) -> None:
    """The laptop's experiment 10 made to favour Adam by 5 points in every seed: its row says reproduces."""
    changed = copy.deepcopy(runs)
    r = changed["laptop"]["optim"]["results"]
    r["adamw"]["digits_test_5shot"]["values"] = [v + 0.05 + 0.001 * i for i, v in
                                                 enumerate(r["sgd"]["digits_test_5shot"]["values"])]
    before = answer_table(runs).splitlines()[-1]
    after = answer_table(changed).splitlines()[-1]
    assert "| **inconclusive** 0/0/1 | **inconclusive** 0/0/1 |" in before
    assert "| **reproduces** 1/0/0 | **inconclusive** 0/0/1 |" in after and "+5.1 [" in after


def test_the_deviations_recompute_what_the_1200_step_schedule_moved(runs: dict) -> None:
    row = next(ln for ln in deviations_table(runs).splitlines() if "1,200-step schedule" in ln)
    # before it, the matched-steps point was the 600-step run (-14.4) and the matched-FLOPs point the 300-step run
    assert "*large_data_steps* -14.4 [" in row and "became -7.9 [" in row
    assert "*large_data_flops* -27.8 [" in row and "became -14.3 [" in row


def test_render_refuses_a_block_it_cannot_generate(runs: dict) -> None:
    with pytest.raises(ValueError, match="no generator for block 'nonsense'"):
        render("<!-- generated: nonsense -->\nx\n<!-- end: nonsense -->\n", runs)
