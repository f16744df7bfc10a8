"""REPRODUCTION.md's tables are generated from the committed JSON (vitkit/reproduce/report.py): the committed page
equals its rendering, the answer comes first and is short, and a change in a result file changes the answer."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from vitkit.reproduce import report
from vitkit.reproduce.report import (
    BLOCK,
    BLOCKS,
    NUMBERED,
    PAGES,
    answer_table,
    committed_runs,
    compare_runs,
    deviations_table,
    laptop_times_table,
    measured_numbers,
    render,
    replication_table,
    ties_table,
    time_log,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "REPRODUCTION.md"


@pytest.fixture(scope="module")
def runs() -> dict:
    return committed_runs()


def test_the_committed_report_is_what_the_committed_json_gives(runs: dict) -> None:
    """Every generated block is on the page `PAGES` names for it (REPRODUCTION.md, or the history page for the
    re-run's sweep detail), and each committed page equals its rendering."""
    assert PAGE in PAGES and sorted(b for blocks in PAGES.values() for b in blocks) == sorted(BLOCKS)
    for page, blocks in PAGES.items():
        text = page.read_text()
        assert sorted(m[2] for m in BLOCK.finditer(text)) == sorted(blocks), f"{page.name}: its generated blocks"
        assert render(text, runs) == text, f"{page.name} is stale: run `python -m vitkit.reproduce.report`"


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


def test_a_rerun_is_compared_number_by_number_and_by_verdict(runs: dict) -> None:
    """The laptop run against a copy of itself: every measured number equal; one seed moved by a point shows as one
    difference of 1.0 point; a copy whose Adam wins everywhere changes experiment 10's verdict, said in bold."""
    lap = runs["laptop"]
    c = compare_runs(lap["fig4"], copy.deepcopy(lap["fig4"]))
    assert c["differ"] == 0 and c["equal"] == c["compared"] > 500 and c["largest"] is None
    assert ("train_s",) not in measured_numbers({"train_s": 3.0}) and measured_numbers({"a": [0.5]}) == {("a", "0"): 0.5}
    moved = copy.deepcopy(lap)
    moved["optim"]["results"]["sgd"]["digits_test_5shot"]["values"][1] += 0.01
    row = replication_table(lap, moved).splitlines()[-1]
    assert row.startswith("| 10 |") and "| the same | the same | " in row and " / 1 (1.0) |" in row
    r = moved["optim"]["results"]
    r["adamw"]["digits_test_5shot"]["values"] = [v + 0.05 for v in r["sgd"]["digits_test_5shot"]["values"]]
    assert "**reproduces: 1 of 1 held**" in replication_table(lap, moved).splitlines()[-1]


def test_the_times_come_from_gnu_times_report(tmp_path: Path) -> None:
    log = tmp_path / "rerun.log"
    log.write_text("start 2026-11-27T17:22:07Z\n 17:22:07 up 6:12,  0 user,  load average: 1.04, 1.85, 2.04\n"
                   "...the run's output...\nend 2026-11-27T18:58:00Z\n 18:58:00 up, load average: 3.10, 3.00, 2.90\n"
                   "\tUser time (seconds): 3500.50\n\tSystem time (seconds): 100.25\n"
                   "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:35:53\n"
                   "\tMaximum resident set size (kbytes): 922746\n\tExit status: 0\n")
    got = time_log(log)
    assert got["wall_s"] == 5753 and got["cpu_s"] == pytest.approx(3600.75) and got["exit"] == 0
    assert got["load_start"] == ("1.04", "1.85", "2.04") and got["load_end"] == ("3.10", "3.00", "2.90")
    row = laptop_times_table(log).splitlines()[-1]
    assert "| 1 h 35 min 53 s | 3,601 s | 0.88 GiB |" in row and "the re-run, 2026-11-27 (exit 0)" in row
    log.write_text("start x\n")
    with pytest.raises(ValueError, match="no GNU time line for 'wall'"):
        time_log(log)


def test_experiment_10_is_judged_under_each_tied_rate(runs: dict) -> None:
    alt = copy.deepcopy(runs["laptop"]["optim"])
    alt["lr"]["sgd"] = 0.9
    alt["results"]["sgd"]["digits_test_5shot"]["values"] = [
        v - 0.04 - 0.002 * i for i, v in enumerate(alt["results"]["adamw"]["digits_test_5shot"]["values"])]
    rows = ties_table({"committed": runs["laptop"]["optim"]}, {"other rate": alt}).splitlines()[2:]
    assert rows[0].startswith("| committed | 0.3 | -0.9 [") and "| inconclusive |" in rows[0]
    assert rows[1].startswith("| other rate | 0.9 | +4.2 [") and "reproduces: 1 of 1 held" in rows[1]


def test_the_rerun_blocks_read_what_is_committed(runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a re-run folder the blocks say what is missing; with one (here: a copy of the committed run, and an
    experiment-10 result at another SGD rate) they compare and judge it."""
    monkeypatch.setattr(report, "RERUN", tmp_path / "laptop_rerun")
    assert "not committed yet" in report.replication_block(runs)
    assert "not trained yet" in report.ties_block(runs)
    (tmp_path / "laptop_rerun").mkdir()
    for name, res in runs["laptop"].items():
        (tmp_path / "laptop_rerun" / f"{name}.json").write_text(json.dumps(res))
    alt = copy.deepcopy(runs["laptop"]["optim"])
    alt["lr"]["sgd"] = 0.9
    (tmp_path / "laptop_rerun" / "optim_sgd0.9.json").write_text(json.dumps(alt))
    rows = report.replication_block(runs).splitlines()[2:]
    assert len(rows) == 10 and all("| the same | the same |" in r and " / 0 |" in r for r in rows)
    ties = report.ties_block(runs).splitlines()
    assert ties[3].startswith("| re-run (AMD EPYC), its pick | 0.3 |")
    assert ties[4].startswith("| re-run (AMD EPYC), SGD at 0.9: [optim_sgd0.9.json]") and "not trained" not in ties[-1]


def test_a_rerun_under_way_is_compared_sweep_by_sweep(runs: dict) -> None:
    """A snapshot of the re-run's finished units: ResNet-B's sweep exactly the committed one (equal, the same pick);
    ResNet-S's with an inner rate raised (its pick moves, and is named); Hybrid-B's with its edge raised (unfinished:
    no pick compared)."""
    sweeps = report.committed_sweeps(runs["laptop"])
    assert {"ViT-B", "ResNet-B", "ResNet-B sgd", "ViT-B pool-gap", "ViT-B pos-none"} <= set(sweeps)

    def unit(model: str, row: dict, raise_at: float = 0.0, **kw: object) -> dict:
        family, size = model.split("-")
        return {"family": family, "size": size, "posemb": "learn1d", "pooling": "token", "optimizer": "adamw",
                "objective": "classify", "images": 20_000, "steps": 500, "seed": 0, "lr": row["lr"],
                "dev": row["dev"] + (0.2 if row["lr"] == raise_at else 0), "glyph_test_top1": row["glyph_test_top1"],
                **kw}

    units = [unit("ResNet-B", r) for r in sweeps["ResNet-B"]]
    units += [unit("ResNet-S", r, raise_at=0.012) for r in sweeps["ResNet-S"]]
    units += [unit("Hybrid-B", r, raise_at=0.012) for r in sweeps["Hybrid-B"]]
    units.append(unit("ResNet-B", sweeps["ResNet-B"][0], seed=1))  # not a sweep run: left out
    text = report.sweep_replication(runs["laptop"], {"taken": "T", "units": units})
    rows = {ln.split(" | ")[0][2:]: ln for ln in text.splitlines() if ln.startswith("| ") and "model" not in ln}
    assert set(rows) == {"ResNet-B", "ResNet-S", "Hybrid-B"}
    assert rows["ResNet-B"].endswith("| 0.0 | 0.012 → 0.012 |") and rows["ResNet-S"].endswith("| 0.024 → 0.012 |")
    assert rows["Hybrid-B"].endswith("| 0.006 → (sweep unfinished) |") and "(not bracketed)" in rows["Hybrid-B"]
    assert "by T: 10 equal bit for bit to the committed run's, 2 different" in text
    assert "of 2 finished sweeps, 1 pick the committed rate, 1 another: ResNet-S." in text


def test_experiment_10s_tie_block_says_which_rates_have_a_verdict_on_which_cpu(
        runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed block: the tied rate trained on the re-run's CPU, its seed 0 checked number for number against
    the re-run's own sweep run, its time from its log, and the committed run's other tied rate named as missing; a
    seed 0 that differs is said so."""
    text = report.ties_block(runs)
    assert "| re-run (AMD EPYC), SGD at 0.3: [optim_sgd0.3.json]" in text and "equal bit for bit |" in text
    assert "every rate of the committed run's tie has a verdict: 0.3 (trained at it" in text
    assert "the committed run at 0.9 has no row" in text and "3 min 29 s wall clock" in text
    assert "dev 81.19 equal bit for bit, 5-shot test 80.76 equal bit for bit, glyph test 91.80 equal" in text
    alt = json.loads((report.RERUN / "optim_sgd0.3.json").read_text())
    alt["results"]["sgd"]["digits_test_5shot"]["values"][0] += 1e-9
    monkeypatch.setattr(report, "RERUN", tmp_path)
    (tmp_path / "optim.json").write_text((ROOT / "benchmarks/results/reproduce/laptop_rerun/optim.json").read_text())
    (tmp_path / "optim_sgd0.3.json").write_text(json.dumps(alt))
    text = report.ties_block(runs)
    assert "5-shot test 80.76 **different** (80.76)" in text and "its log is not committed" in text
    (tmp_path / "optim_sgd0.3.json").unlink()
    assert "of the committed run's tie only 0.9 (the re-run's own pick) has a verdict; 0.3 is not trained yet" in (
        report.ties_block(runs))
