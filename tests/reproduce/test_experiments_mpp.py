"""Experiment 6 (masked patch prediction, §4.6): pre-training seeds paired with fine-tuning seeds, MPP's rate picked
on dev, and the rule reading both the seeded files and the files written before them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from tests.helpers import check_reproduction
from vitkit.formats import load_pretrained
from vitkit.reproduce.experiments import _mpp_pretrain, run_experiments
from vitkit.reproduce.plan import LAPTOP, SMOKE, Pretrain
from vitkit.reproduce.rules import MPP_RATE, verdict
from vitkit.reproduce.runs import STATE_FILE, Finetune, Workbench
from vitkit.reproduce.stats import pick_rate, seeded

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reproduce"


@pytest.mark.usefixtures("figures_not_laid_out")  # reads its figure as a file (check_reproduction)
def test_each_mpp_arm_has_pretraining_seeds_each_fine_tuned_with_its_own_seed(tmp_path: Path) -> None:
    scale = dataclasses.replace(SMOKE, finetune_seeds=(0, 1), finetune_steps=20)
    threads = torch.get_num_threads()
    try:  # one thread: tiny models on a 2-core CI machine running other tests
        torch.set_num_threads(1)
        res = run_experiments(["mpp"], tmp_path, scale, progress=False)["mpp"]
    finally:
        torch.set_num_threads(threads)
    # the smoke run of experiment 6 (test_reproduce.py's smoke parts leave it to this test): its result, figure and
    # summary section
    assert check_reproduction(tmp_path, ["mpp"])["mpp"]["mpp_lr"] == res["mpp_lr"]
    wb = Workbench(tmp_path, scale, progress=False)
    assert res["seeds"] == [0, 1]
    sweep = res["mpp_lr_sweep"]  # the rate: the best digits dev accuracy after fine-tuning, over the grid and beyond
    assert set(scale.mpp_lrs) <= {r["lr"] for r in sweep} and res["mpp_lr"] == pick_rate(sweep)
    lr = res["mpp_lr"]
    for n in scale.mpp_steps:  # MPP pre-training seed i, fine-tuned with seed i, in the order of `seeds`
        runs = [_mpp_pretrain(scale, n, lr, s) for s in (0, 1)]
        assert [wb.pretrain(r)["seed"] for r in runs] == [0, 1]
        got = [wb.finetune(Finetune(r, 16, s))["test_top1"] for r, s in zip(runs, (0, 1))]
        assert res["mpp"][str(n)]["values"] == got
        assert res["masked_colour_test"][str(n)]["values"] == [wb.pretrain(r)["glyph_test_top1"] for r in runs]
        a, b = (load_pretrained(wb.pretrain(r)["model_dir"]).state_dict() for r in runs)
        assert any(not torch.equal(a[k], b[k]) for k in a)  # two pre-training runs, not one read twice
    sup = [wb.finetune(Finetune(Pretrain("ViT", "B", seed=s), 16, s))["test_top1"] for s in (0, 1)]
    assert res["supervised"]["values"] == sup
    assert res["scratch"]["values"] == [wb.finetune(Finetune(None, 16, s))["test_top1"] for s in (0, 1)]
    _, ev, _ = verdict("mpp", {**res, "scale": "smoke"})
    assert ev.checks[MPP_RATE][0] and any("paired by seed [0, 1]" in c for c in ev.context)
    assert f"(lr {lr:g})" in res["markdown"] and "pre-training seed i fine-tuned with seed i" in res["markdown"]


def _seeded_result(sweep: list[dict[str, float]]) -> dict:
    s = seeded
    return {"scale": "laptop", "seeds": [3, 4, 5], "scratch": s([0.5, 0.52, 0.49]), "supervised": s([0.9, 0.91, 0.9]),
            "mpp": {"500": s([0.6, 0.7, 0.62])},
            "equal_budget_scratch": {"500": {"steps": 650, "top1": s([0.55, 0.58, 0.6])}},
            "mpp_lr": pick_rate(sweep), "mpp_lr_sweep": sweep}


def test_the_rule_pairs_mpp_by_seed_and_needs_its_rate_bracketed() -> None:
    inner = [{"lr": 2e-4, "dev": 0.6}, {"lr": 6e-4, "dev": 0.7}, {"lr": 2e-3, "dev": 0.65}]
    rule, ev, j = verdict("mpp", _seeded_result(inner))
    beats = ev.parts["beats_scratch"]
    assert beats.n == 3 and beats.mean == pytest.approx((0.05 + 0.12 + 0.02) / 3)
    assert j.outcomes["behind_supervised"] == "holds" and j.failed_checks == []
    edge = [{"lr": 2e-4, "dev": 0.6}, {"lr": 6e-4, "dev": 0.7}, {"lr": 2e-3, "dev": 0.75}]  # the top edge wins
    _, ev, j = verdict("mpp", _seeded_result(edge))
    assert not ev.checks[MPP_RATE][0] and j.verdict.startswith("not established (precondition not met")


# the seeded laptop run of 2026-11-25 (one pre-training run per arm, MPP at 6e-3), as committed before 2026-11-26's
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reproduce" / "laptop_mpp_2026-11-25.json"


@pytest.mark.parametrize("path, beats", [(RESULTS / "mpp.json", (-11.3, -13.2, -9.5)), (FIXTURE, (-65.1, -83.8, -46.5))])
def test_files_from_before_the_seeds_are_not_established(path: Path, beats: tuple[float, float, float]) -> None:
    res = json.loads(path.read_text())  # one pre-training run per arm, no MPP rate sweep
    _, ev, j = verdict("mpp", res)
    assert ev.checks[MPP_RATE][0] is None  # nothing swept: not checked
    # one pre-training run per arm: its fine-tuning seeds are not replicates (pseudo-replication)
    assert j.verdict == "not established (precondition not met: independent pre-training seeds)"
    assert j.outcomes == {"beats_scratch": "fails", "behind_supervised": "holds"}
    e = ev.parts["beats_scratch"]
    assert [round(100 * v, 1) for v in (e.mean, e.lo, e.hi)] == list(beats)


def test_a_folder_written_before_the_mpp_rate_grid_existed_is_still_the_laptop_scale(tmp_path: Path) -> None:
    """/work/runs/laptop100-style folders keep the scale of their day; a key added later (mpp_lrs, a tuple) reads as
    its default, and must compare equal to the run's own (a list once written as JSON)."""
    old = json.loads(json.dumps(LAPTOP.to_dict()))
    del old["mpp_lrs"]
    (tmp_path / STATE_FILE).write_text(json.dumps({"scale": old, "device": "cpu"}))
    Workbench(tmp_path, LAPTOP, progress=False)  # accepted: its units still hold
    other = dataclasses.replace(LAPTOP, mpp_lrs=(1e-3,))
    with pytest.raises(ValueError, match="with other settings"):
        Workbench(tmp_path, other, progress=False)
