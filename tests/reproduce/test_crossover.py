"""Experiment 7 (the crossover): the gap analysis on known curves, the grid and its learning-rate picks, parallel
runs, and the folder checks (one scale and one kind of device per folder). The end-to-end smoke run is part of
test_reproduce.py's `--all --smoke`."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from vitkit.reproduce.crossover import (
    CROSSOVER_SCALES,
    FAMILIES,
    CrossoverScale,
    crossing,
    gap_analysis,
    grid_runs,
    matched_flops,
    run_crossover,
    trend,
    tuning_runs,
)
from vitkit.reproduce.plan import FULL, LAPTOP, SMOKE, Pretrain, pretrain_config
from vitkit.reproduce.runs import STATE_FILE, Workbench
from vitkit.reproduce.stats import bracketed, extension


def test_crossing_is_interpolated_in_log_x_and_needs_the_gap_to_stay_positive() -> None:
    x = [1e3, 1e4, 1e5, 1e6]
    assert math.isclose(crossing(x, [-0.3, -0.1, 0.1, 0.2]), 10**4.5, rel_tol=1e-12)
    assert math.isclose(crossing(x, [-0.3, -0.3, -0.1, 0.3]), 10**5.25, rel_tol=1e-12)
    # a gap that turns positive and back is not a crossing: the last sign change from - to + counts
    assert math.isclose(crossing(x, [-0.2, 0.1, -0.1, 0.1]), 10**5.5, rel_tol=1e-12)
    assert crossing(x, [-0.2, 0.1, 0.2, -0.1]) is None
    assert crossing(x, [0.1, 0.2, 0.1, 0.3]) is None  # ahead everywhere: nothing to find
    assert crossing(x, [-0.4, -0.3, -0.2, -0.1]) is None


def test_trend_extrapolates_a_closing_gap_and_not_a_widening_one() -> None:
    x = [1e3, 1e4, 1e5, 1e6]
    closing = trend(x, [-0.5, -0.4, -0.3, -0.2])  # +0.1 per decade over the last three
    assert math.isclose(closing["slope_per_decade"], 0.1, rel_tol=1e-9)
    assert math.isclose(closing["meets_at_log10"], 8.0, rel_tol=1e-9)
    widening = trend(x, [-0.1, -0.2, -0.3, -0.4])
    assert widening["slope_per_decade"] < 0 and widening["meets_at_log10"] is None
    # a gap closing ever so slowly meets far away: a number, not an overflow
    assert trend(x, [-0.5, -0.5, -0.5 + 1e-12, -0.5 + 2e-12])["meets_at_log10"] > 1e9


def test_compute_is_matched_only_where_both_families_were_measured() -> None:
    vit, resnet = [2.0, 8.0, 24.0], [1.4, 5.6, 16.0]  # the ViT costs more per step: its points sit to the right
    assert matched_flops(vit, resnet) == [2.0, 5.6, 8.0, 16.0]  # 1.4 and 24 would need an extrapolation
    assert matched_flops([1.0, 2.0], [3.0, 4.0]) == []


def test_gap_analysis_pairs_seeds_and_gives_the_spread_of_the_crossing() -> None:
    x = [1e3, 1e4, 1e5]
    vit = [[0.1, 0.3, 0.6], [0.1, 0.35, 0.55]]
    resnet = [[0.3, 0.4, 0.5], [0.3, 0.3, 0.5]]
    g = gap_analysis(x, vit, resnet)
    for got, want in zip(g["per_seed"], [[-0.2, -0.1, 0.1], [-0.2, 0.05, 0.05]]):
        assert got == pytest.approx(want)
    assert g["gap"] == pytest.approx([-0.2, -0.025, 0.075])
    assert g["gap_std"] == pytest.approx([0.0, 0.075, 0.025])
    lo, hi = g["crossing_range"]
    assert lo == pytest.approx(crossing(x, [-0.2, 0.05, 0.05])) and hi == pytest.approx(10**4.5)
    assert g["crossing"] == pytest.approx(crossing(x, g["gap"]))


def test_grids_reuse_the_picked_tuning_run_and_hold_what_the_rule_needs() -> None:
    smoke, laptop, long = (CROSSOVER_SCALES[n] for n in ("smoke", "laptop", "long"))
    tune = tuning_runs(smoke)
    assert {r.steps for r in tune} == {4, 8}  # 12 steps take the 8-step picks (lr_from)
    assert len(tune) == len(FAMILIES) * 2 * len(smoke.lr_grid)
    picks = {(f, t): smoke.lr_grid[1] for f in FAMILIES for t in smoke.schedules}
    runs = grid_runs(smoke, picks)
    assert len(runs) == len(FAMILIES) * len(smoke.seeds) * (2 + 2 + 1)  # 12 steps on the largest set only
    assert {r.images for r in runs if r.steps == 12} == {4_000}
    # the grid's point at (largest set, seed 0) is the tuning run of the picked rate: one unit, trained once
    assert set(tune) & set(runs) == {r for r in tune if r.lr == smoke.lr_grid[1]}
    # both grids are what the rule needs: 3 seeds everywhere, every schedule tuned on a bracketed, extensible grid,
    # a ViT run inside the ResNet's FLOPs range at the largest set (the matched-FLOPs part)
    for cs in (laptop, long):
        assert len(cs.seeds) >= 3 and not cs.lr_from and cs.lr_extend > 0 and len(cs.lr_grid) >= 3
        assert cs.sizes_at(cs.schedules[-1])[-1] == cs.sizes[-1] == cs.scale.glyph_images
        assert cs.schedules[-1] / cs.schedules[0] > 1.5  # > the ViT's 1.46x FLOPs per image of the ResNet's
    assert long.scale.glyph_stream and long.sizes[-1] == 1_000_000
    assert not laptop.scale.glyph_stream  # 40,000 images: drawn once per process, held


def test_parallel_runs_give_the_summaries_of_the_sequential_ones(tmp_path: Path, pair_in_workers) -> None:  # noqa: ANN001
    scale, runs, par = pair_in_workers  # two runs at the crossover's smoke scale, trained in two worker processes
    assert [r.seed for r in runs] == [0, 1] and {(r.images, r.steps, r.lr) for r in runs} == {(500, 3, 6e-3)}
    seq = Workbench(tmp_path / "seq", scale, progress=False).pretrain_all(runs)
    for p, s in zip(par, seq):
        assert p["name"] == s["name"] and p["steps"] == s["steps"] == 3 and p["lr"] == 6e-3
        assert [c["step"] for c in p["curve"]] == [c["step"] for c in s["curve"]]
        # the workers train with fewer threads than this process: equal within float reordering
        assert p["final"]["digits_test_5shot"] == pytest.approx(s["final"]["digits_test_5shot"], abs=0.05)


def test_a_folder_holds_one_scale_on_one_kind_of_device(tmp_path: Path) -> None:
    Workbench(tmp_path, SMOKE, progress=False)
    Workbench(tmp_path, SMOKE, progress=False, device="cpu")
    with pytest.raises(ValueError, match="holds a reproduction run on cpu; this run is on cuda"):
        Workbench(tmp_path, SMOKE, progress=False, device="cuda:0")
    with pytest.raises(ValueError, match="holds a reproduction at scale 'smoke'"):
        Workbench(tmp_path, CROSSOVER_SCALES["smoke"].scale, progress=False)
    with pytest.raises(ValueError, match="jobs must be a positive whole number"):
        Workbench(tmp_path, SMOKE, progress=False, jobs=0)
    # a folder written before the crossover's Scale keys existed (and without a device) still opens
    doc = json.loads((tmp_path / STATE_FILE).read_text())
    for k in ("glyph_stream", "evals_per_run", "num_workers"):
        del doc["scale"][k]
    del doc["device"]
    (tmp_path / STATE_FILE).write_text(json.dumps(doc))
    Workbench(tmp_path, SMOKE, progress=False)


def test_a_sweep_won_at_its_edge_is_extended_until_bracketed() -> None:
    grid = (3e-3, 6e-3, 1.2e-2)

    def sweep(devs: dict[float, float]) -> list[dict[str, float]]:
        return [{"lr": lr, "dev": d} for lr, d in devs.items()]

    assert extension(sweep({3e-3: 0.7, 6e-3: 0.8, 1.2e-2: 0.75}), grid, 2) is None  # bracketed
    assert extension(sweep({3e-3: 0.7, 6e-3: 0.8, 1.2e-2: 0.85}), grid, 2) == pytest.approx(2.4e-2)  # up, x2
    assert extension(sweep({3e-3: 0.9, 6e-3: 0.8, 1.2e-2: 0.75}), grid, 2) == pytest.approx(1.5e-3)  # down, /2
    # at most `extend` rates past an edge: then the pick stands, unbracketed (rules.py refuses the verdict)
    assert extension(sweep({3e-3: 0.7, 6e-3: 0.8, 1.2e-2: 0.85, 2.4e-2: 0.86, 4.8e-2: 0.87}), grid, 2) is None
    assert extension(sweep({3e-3: 0.7, 6e-3: 0.8}), (3e-3, 6e-3), 1) == pytest.approx(1.2e-2)
    assert extension(sweep({3e-3: 0.7, 6e-3: 0.8}), (3e-3, 6e-3), 0) is None
    # an edge tied with the best still wins there (2026-11-25: SGD 0.3 and 0.9 both 80.7% counted as bracketed)
    tied = sweep({0.03: 0.698, 0.1: 0.766, 0.3: 0.807, 0.9: 0.807})
    assert extension(tied, (0.03, 0.1, 0.3), 2) == pytest.approx(2.7) and not bracketed(tied)
    assert bracketed(sweep({0.03: 0.698, 0.1: 0.766, 0.3: 0.807, 0.9: 0.807, 2.7: 0.5}))
    assert not bracketed(sweep({3e-3: 0.8, 6e-3: 0.8, 1.2e-2: 0.7}))  # tied at the lower edge


def test_a_folder_may_grow_seeds_but_not_change_its_runs(tmp_path: Path) -> None:
    Workbench(tmp_path, SMOKE, progress=False)
    Workbench(tmp_path, replace(SMOKE, pretrain_seeds=(0, 1, 2), posemb_seeds=(0, 1, 2)), progress=False)
    with pytest.raises(ValueError, match="with other settings"):
        Workbench(tmp_path, replace(SMOKE, steps=5), progress=False)
    # how often a run writes its training state changes none of its numbers: the folder keeps its units either way
    Workbench(tmp_path, replace(SMOKE, pretrain_checkpoints=4), progress=False)
    # the smoke scale's 4-step runs write 2 training states (step 2 and the end), the others every steps // 4 as ever
    for scale, every in ((SMOKE, 2), (LAPTOP, 125), (FULL, 250)):
        assert pretrain_config(Pretrain("ViT", "B"), scale)["train"]["ckpt_every"] == every
    assert CROSSOVER_SCALES["smoke"].scale.pretrain_checkpoints == 2
    assert CROSSOVER_SCALES["laptop"].scale.pretrain_checkpoints == CROSSOVER_SCALES["long"].scale.pretrain_checkpoints == 4
    # the smoke runs evaluate 250 glyph test images at their end (1,000 cost more than their training); the other
    # scales' runs keep the default split, their configs as they were (no key)
    smoke, *others = (pretrain_config(Pretrain("ViT", "B"), s.scale if isinstance(s, CrossoverScale) else s)
                      for s in (SMOKE, CROSSOVER_SCALES["smoke"], LAPTOP, FULL, *list(CROSSOVER_SCALES.values())[1:]))
    assert smoke["data"]["glyph_test_images"] == others[0]["data"]["glyph_test_images"] == 250
    assert all("glyph_test_images" not in c["data"] for c in others[1:]) and len(others) == 5
    with pytest.raises(ValueError, match="with other settings"):  # a smoke folder of 1,000 test images is another
        Workbench(tmp_path, replace(SMOKE, glyph_test_images=0), progress=False)


@pytest.mark.slow
def test_the_progress_bar_ends_full_in_a_fresh_and_in_a_resumed_folder(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                                      smoke_crossover: Path) -> None:
    """The bar counts every run of the grid and of the sweeps (extensions included) once, as done when finished
    before: a fresh run and a read-back both end at total (the long crossover resumed across sittings ended at
    344,000 of 372,000: done extensions never moved it)."""
    # the fresh run: `reproduce crossover --smoke` from an empty folder (the smoke grid: every kind of unit the bar
    # counts -- sweeps and their extensions, a schedule taking another's picks, the ragged grid, grid points that are
    # the sweep's own units, the seed check)
    fresh = [(n, total) for desc, n, total in json.loads((smoke_crossover / "bar_ends.json").read_text())
             if desc.startswith("crossover")]
    ends: list[tuple[int, int]] = []
    close = Workbench.close

    def recording_close(self: Workbench) -> None:
        if self.bar is not None:
            ends.append((self.bar.n, self.bar.total))
        close(self)

    monkeypatch.setattr(Workbench, "close", recording_close)
    # the same folder read back in a later sitting: a copy of its finished units (their unit.json; the weights and
    # training states of finished units are not read again)
    shutil.copytree(smoke_crossover / "crossover", tmp_path / "crossover",
                    ignore=shutil.ignore_patterns("model", "train_state.pt"))
    run_crossover(CROSSOVER_SCALES["smoke"], tmp_path / "crossover", progress=True)
    assert len(fresh) == 1 and len(ends) == 1
    assert all(n == total > 0 for n, total in fresh + ends), (fresh, ends)
    assert ends == fresh  # the read-back plans the same steps, every one of them done
