"""Each model's pre-training rate tuned once on a bracketed grid (vitkit/reproduce/tuning.py), fine-tuning sweeps
extended past a winning edge (Workbench.finetune), and the rules' preconditions that check both."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from vitkit.reproduce import tuning
from vitkit.reproduce.experiments import run_experiments
from vitkit.reproduce.plan import LAPTOP, SMOKE, Pretrain
from vitkit.reproduce.rules import verdict
from vitkit.reproduce.runs import STATE_FILE, UNIT_FILE, Finetune, Workbench
from vitkit.reproduce.stats import bracketed, extension, pick_rate

ROOT = Path(__file__).resolve().parents[2]
LAPTOP_RESULTS = ROOT / "benchmarks" / "results" / "reproduce" / "laptop"


def _fake_pretrain_all(wb: Workbench, dev: dict[str, object], rounds: list[list[str]]) -> None:
    """wb.pretrain_all answering from `dev` (family -> lr -> 5-shot digits dev accuracy), recording each round."""
    def pretrain_all(runs: list[Pretrain]) -> list[dict[str, object]]:
        rounds.append([r.name(wb.scale) for r in runs])
        out = []
        for r in runs:
            lr = r.lr or wb.scale.lrs[r.family]
            out.append({"best": {"digits_dev_5shot": dev[r.family](lr)}, "glyph_test_top1": 0.5})
        return out

    wb.pretrain_all = pretrain_all  # type: ignore[method-assign]


def test_a_sweep_whose_edge_wins_is_extended_until_its_pick_is_interior(tmp_path: Path) -> None:
    wb = Workbench(tmp_path, LAPTOP, progress=False)
    rounds: list[list[str]] = []
    # the ResNet's dev accuracy peaks at 2.4e-2, past the grid's upper edge; the ViT's at 6e-3, inside it
    _fake_pretrain_all(wb, {"ResNet": lambda lr: 0.8 - abs(lr - 2.4e-2), "ViT": lambda lr: 0.7 - abs(lr - 6e-3)},
                       rounds)
    runs = [Pretrain("ViT", "B", images=2_500, seed=1), Pretrain("ResNet", "B", seed=2), Pretrain("ViT", "B")]
    sweeps = tuning.tune(wb, runs)
    resnet, vit = Pretrain("ResNet", "B"), Pretrain("ViT", "B")
    assert list(sweeps) == [vit, resnet]  # each model once, whatever its runs' sizes and seeds
    assert [r["lr"] for r in sweeps[resnet]] == pytest.approx([3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2])
    assert pick_rate(sweeps[resnet]) == pytest.approx(2.4e-2) and bracketed(sweeps[resnet])
    assert [r["lr"] for r in sweeps[vit]] == [3e-3, 6e-3, 1.2e-2] and bracketed(sweeps[vit])
    # one round per step of the sweep, every model's grid in the first (so `--jobs 2` keeps both cores busy); the
    # scale's own rate is the unit named without a rate (the folder's existing run)
    assert [len(r) for r in rounds] == [6, 1, 1]
    assert "vit-B_n20000_steps500_seed0" in rounds[0] and "resnet-B_n20000_steps500_seed0" in rounds[0]
    assert rounds[1:] == [["resnet-B_n20000_steps500_lr0.024_seed0"], ["resnet-B_n20000_steps500_lr0.048_seed0"]]
    # every run of a model takes its pick; a pick equal to the scale's rate keeps the old unit name
    assert tuning.resolve(wb, runs[1]) == Pretrain("ResNet", "B", seed=2, lr=pytest.approx(2.4e-2))
    assert tuning.resolve(wb, runs[0]).name(LAPTOP) == "vit-B_n2500_steps500_seed1"
    ft = tuning.resolve(wb, Finetune(runs[1], 32, 2))
    assert ft.source.lr == pytest.approx(2.4e-2) and ft.name(LAPTOP).startswith("resnet-B_n20000_steps500_lr0.024_seed2")
    tuning.tune(wb, runs)  # read back from the Workbench: one sweep per model, never run twice
    assert len(rounds) == 3
    # an extension stops after LR_EXTEND rates past an edge: the pick then stands unbracketed (the rules say so)
    wb2 = Workbench(tmp_path / "b", LAPTOP, progress=False)
    _fake_pretrain_all(wb2, {"ViT": lambda lr: lr}, [])  # better and better as the rate grows
    sweep = tuning.tune(wb2, [Pretrain("ViT", "S")])[Pretrain("ViT", "S")]
    assert len(sweep) == 3 + tuning.LR_EXTEND and not bracketed(sweep)
    # an SGD run always takes a swept rate (the scale's rates are Adam's); an MPP run never does
    assert tuning.is_tuned(SMOKE, Pretrain("ResNet", "B", optimizer="sgd"))
    assert not tuning.is_tuned(LAPTOP, Pretrain("ViT", "B", objective="mpp"))
    assert not tuning.is_tuned(SMOKE, Pretrain("ViT", "B"))  # the smoke scale does not tune


def test_a_folder_written_before_tuning_keeps_its_units(tmp_path: Path) -> None:
    """The laptop folder of 2026-11-25 has no tune_lrs / finetune_extend keys: it opens, and its units keep their
    names (a pick equal to the scale's rate is the unit without a rate)."""
    doc = {"scale": json.loads(json.dumps(LAPTOP.to_dict())), "device": "cpu"}
    for k in ("tune_lrs", "finetune_extend"):
        del doc["scale"][k]
    (tmp_path / STATE_FILE).write_text(json.dumps(doc))
    Workbench(tmp_path, LAPTOP, progress=False)
    with pytest.raises(ValueError, match="with other settings"):
        Workbench(tmp_path, replace(LAPTOP, steps=400), progress=False)
    assert tuning.unit_lr(LAPTOP, Pretrain("ViT", "B"), 6e-3) == 0.0
    assert tuning.unit_lr(LAPTOP, Pretrain("ResNet", "B"), 1.2e-2) == 1.2e-2
    assert tuning.unit_lr(LAPTOP, Pretrain("ResNet", "B", optimizer="sgd"), 6e-3) == 6e-3


@pytest.mark.slow
@pytest.mark.usefixtures("figures_not_encoded")  # reads no figure: drawn, not encoded
def test_tuned_runs_share_one_sweep_per_model_and_fine_tunes_extend_on_reread(tmp_path: Path) -> None:
    """Real runs at smoke size with tuning on: experiment 4 (ViT-B, fine-tuned at 16 and 32 px) and 8 (token = ViT-B,
    GAP its own model) read one ViT-B sweep; every run takes its model's pick; every fine-tune's sweep is extended
    past a winning edge; a finished fine-tune whose sweep lacks its extension trains only the new rate when read."""
    # 10 fine-tuning steps (the scale's 40 learn the digits; here nothing reads an accuracy, only which rates ran)
    scale = replace(SMOKE, tune_lrs=(3e-3, 6e-3), finetune_lrs=(0.02, 0.05), finetune_extend=1, finetune_steps=10)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        res = run_experiments(["hires", "pooling"], tmp_path, scale, progress=False)
    finally:
        torch.set_num_threads(threads)
    hires, pooling = res["hires"], res["pooling"]
    assert hires["lr_sweeps"]["ViT-B"] == pooling["lr_sweeps"]["token"]  # one sweep per model
    assert hires["lr"]["ViT-B"] == pooling["lr"]["token"] == pick_rate(hires["lr_sweeps"]["ViT-B"])
    for sweep in (hires["lr_sweeps"]["ViT-B"], pooling["lr_sweeps"]["gap"]):
        assert set(scale.tune_lrs) <= {r["lr"] for r in sweep}
        # a 2-rate grid always wins at an edge: extended until bracketed or LR_EXTEND rates past it
        assert len(sweep) > 2 and (bracketed(sweep) or extension(sweep, scale.tune_lrs, tuning.LR_EXTEND) is None)
    pick = hires["lr"]["ViT-B"]
    wb = Workbench(tmp_path, scale, progress=False)
    at_pick = Pretrain("ViT", "B", lr=tuning.unit_lr(scale, Pretrain("ViT", "B"), pick))
    fts = [json.loads((wb.folder(Finetune(at_pick, px, 0)) / UNIT_FILE).read_text()) for px in (16, 32)]
    assert [f["test_top1"] for f in fts] == hires["results"]["16px"]["accs"] + hires["results"]["32px"]["accs"]
    for f in fts:
        assert f["source"] == at_pick.name(scale)  # the fine-tunes start from the run at the pick
        lrs = [r["lr"] for r in f["sweep"]]
        assert set(scale.finetune_lrs) < set(lrs) and f["lr"] == pick_rate(f["sweep"], "dev_top1")
        assert f["bracketed"] == bracketed(f["sweep"], "dev_top1")
        assert f["bracketed"] or extension(f["sweep"], scale.finetune_lrs, 1, "dev_top1") is None
    # a fine-tune finished before its sweep was extended: re-read, it trains the extension only
    ft = Finetune(at_pick, 16, 0)
    folder = wb.folder(ft)
    old = copy.deepcopy(fts[0])
    new_rates = [r["lr"] for r in old["sweep"] if r["lr"] not in scale.finetune_lrs]
    assert new_rates  # a 2-rate grid is always won at an edge
    for lr in new_rates:
        for p in sorted((folder / f"lr_{lr:g}").rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        (folder / f"lr_{lr:g}").rmdir()
    cut = {**old, "sweep": [r for r in old["sweep"] if r["lr"] in scale.finetune_lrs]}
    (folder / UNIT_FILE).write_text(json.dumps(cut))
    stamps = {lr: (folder / f"lr_{lr:g}" / "result.json").stat().st_mtime_ns for lr in scale.finetune_lrs}
    again = wb.finetune(ft)
    assert {lr: (folder / f"lr_{lr:g}" / "result.json").stat().st_mtime_ns for lr in scale.finetune_lrs} == stamps
    assert all((folder / f"lr_{lr:g}" / "result.json").is_file() for lr in new_rates)
    assert [r["lr"] for r in again["sweep"]] == [r["lr"] for r in old["sweep"]]
    assert again["bracketed"] == old["bracketed"]
    assert wb.finetune(ft) == again  # bracketed or spent: read back as it is


def _laptop(name: str) -> dict[str, object]:
    return json.loads((LAPTOP_RESULTS / f"{name}.json").read_text())


def test_an_unbracketed_sweep_caps_the_verdict_and_legacy_files_keep_theirs() -> None:
    fig4 = {k: v for k, v in _laptop("fig4").items() if k not in ("lr_sweeps", "lr")}  # as a file written before
    # each model's sweep was recorded: not checked, its verdict what it was
    _, ev, legacy = verdict("fig4", fig4)
    assert ev.checks["lr grids bracketed"][0] is None and not legacy.verdict.startswith("not established")
    good = [{"lr": 3e-3, "dev": 0.6}, {"lr": 6e-3, "dev": 0.7}, {"lr": 1.2e-2, "dev": 0.65}]
    edge = [{"lr": 3e-3, "dev": 0.6}, {"lr": 6e-3, "dev": 0.7}, {"lr": 1.2e-2, "dev": 0.75}]
    assert verdict("fig4", {**fig4, "lr_sweeps": {"ViT-B": good, "ResNet-B": good}})[2].verdict == legacy.verdict
    capped = verdict("fig4", {**fig4, "lr_sweeps": {"ViT-B": good, "ResNet-B": edge}})[2]
    assert capped.verdict == "not established (precondition not met: lr grids bracketed)"
    assert verdict("fig4", {**fig4, "lr_sweeps": {}})[2].failed_checks == ["lr grids bracketed"]  # not tuned
    for name in ("size", "fig5", "fig7", "posemb"):
        assert verdict(name, {**_laptop(name), "lr_sweeps": {"ViT-B": edge}})[2].failed_checks == ["lr grids bracketed"]
    # fine-tuned accuracy (experiment 4): every fine-tune's sweep must be bracketed too
    hires = _laptop("hires")
    ft_good = [{"lr": 0.01, "dev_top1": 0.8}, {"lr": 0.03, "dev_top1": 0.9}, {"lr": 0.09, "dev_top1": 0.85}]
    ft_edge = ft_good[:2]
    res = copy.deepcopy(hires)
    res["lr_sweeps"] = {"ViT-B": good}
    for px in ("16px", "32px"):
        res["results"][px]["finetune_sweeps"] = [ft_good] * 3
    assert verdict("hires", res)[2].verdict == verdict("hires", hires)[2].verdict
    res["results"]["32px"]["finetune_sweeps"][1] = ft_edge
    assert verdict("hires", res)[2].failed_checks == ["fine-tuning lr grids bracketed"]
    mpp = _laptop("mpp")
    assert verdict("mpp", {**mpp, "finetune_sweeps": [ft_good] * 2})[2].verdict == verdict("mpp", mpp)[2].verdict
    assert verdict("mpp", {**mpp, "finetune_sweeps": [ft_good, ft_edge]})[2].failed_checks == [
        "fine-tuning lr grids bracketed"]


@pytest.mark.slow
def test_fine_tunes_run_in_workers_with_their_extensions(tmp_path: Path) -> None:
    """`--jobs 2` fine-tunes in worker processes too: the same sweeps (extension included) as one after another."""
    scale = replace(SMOKE, finetune_lrs=(0.02, 0.05), finetune_extend=1, finetune_steps=10)
    fts = [Finetune(None, 16, seed) for seed in (0, 1)]
    par = Workbench(tmp_path / "par", scale, progress=False, jobs=2).finetune_all(fts)
    threads = torch.get_num_threads()
    try:  # one thread, as the workers: a busy 2-core machine thrashes two spinning threads
        torch.set_num_threads(1)
        seq = Workbench(tmp_path / "seq", scale, progress=False).finetune_all(fts)
    finally:
        torch.set_num_threads(threads)
    for p, s in zip(par, seq):
        assert [r["lr"] for r in p["sweep"]] == [r["lr"] for r in s["sweep"]] and len(p["sweep"]) > 2
        # one thread in the workers and here: the same numbers
        assert [r["dev_top1"] for r in p["sweep"]] == [r["dev_top1"] for r in s["sweep"]]
    wb = Workbench(tmp_path / "par", scale, progress=False, jobs=2)
    assert not any(wb._extends(f) for f in fts)  # bracketed or spent: nothing left to train


def test_a_run_trains_with_the_same_threads_alone_or_beside_another(tmp_path: Path, pair_in_workers) -> None:  # noqa: ANN001
    """With `--jobs 2` a lone run (a sweep's last extension) trains in this process, the others in workers: all with
    cores // jobs threads, so the same run gives the same numbers either way (a run's sums depend on its threads)."""
    scale, (run, other), (pair, _) = pair_in_workers  # run and other trained at once by jobs=2, in workers
    assert run.seed != other.seed
    wb = Workbench(tmp_path / "alone", scale, progress=False, jobs=2)
    before = torch.get_num_threads()
    alone = wb.pretrain_all([run])[0]  # one run: this process
    assert torch.get_num_threads() == before  # restored after the run
    assert alone["threads"] == pair["threads"] == max(1, before // 2)
    assert alone["curve"] == pair["curve"] and alone["glyph_test_top1"] == pair["glyph_test_top1"]


def test_a_resumed_sweeps_finished_extensions_move_the_progress_bar_once(tmp_path: Path) -> None:
    """Reading back a sweep whose grid and extension finished in an earlier sitting: the bar's total counts the
    extension once and its steps as done (before, the total grew by the extension but the bar never moved for it,
    so a resumed long crossover ended at 344,000 of 372,000 steps), and planning the unit again adds nothing."""
    wb = Workbench(tmp_path, SMOKE, progress=True)
    grid = (3e-3, 6e-3)
    at = lambda lr: Pretrain("ViT", "B", seed=0, lr=lr)  # noqa: E731
    for lr in (*grid, 1.2e-2):  # every run of the sweep finished before this sitting
        wb.folder(at(lr)).mkdir(parents=True)
        (wb.folder(at(lr)) / UNIT_FILE).write_text("{}")
    wb.start([at(lr) for lr in grid], "t")
    dev = {3e-3: 0.7, 6e-3: 0.8, 1.2e-2: 0.75}  # the upper edge wins, its extension 1.2e-2 brackets it
    got = tuning.sweep_rates(wb, {"v": (grid, at)}, extend=1,
                             score=lambda w, runs: [{"dev": dev[r.lr], "glyph_test_top1": 0.5} for r in runs])
    assert [r["lr"] for r in got["v"]] == [3e-3, 6e-3, 1.2e-2]
    assert wb.bar is not None and wb.bar.total == wb.bar.n == 3 * SMOKE.steps
    wb.count([at(1.2e-2), at(6e-3)])  # the experiments' units at the pick: counted already
    wb.count([at(6e-3)], planned=True)
    assert wb.bar.total == wb.bar.n == 3 * SMOKE.steps
    wb.close()


def test_a_tied_pick_is_reported_under_the_other_tied_rate(tmp_path: Path) -> None:
    """Experiment 10's laptop pick rests on an exact dev tie (SGD 0.3 and 0.9): the other tied rate is named, and
    every pre-training seed is trained at it (the seed-0 run being the sweep's own unit at that rate)."""
    sweep = [{"lr": 0.1, "dev": 0.7}, {"lr": 0.3, "dev": 0.8}, {"lr": 0.9, "dev": 0.8}, {"lr": 2.7, "dev": 0.6}]
    assert pick_rate(sweep) == 0.3 and tuning.other_tied_rates(sweep) == [0.9]
    assert tuning.other_tied_rates(sweep[:2]) == []
    committed = json.loads((LAPTOP_RESULTS / "optim.json").read_text())
    assert tuning.other_tied_rates(committed["lr_sweeps"]["sgd"]) == pytest.approx([0.9])
    wb = Workbench(tmp_path, LAPTOP, progress=False)
    rounds: list[list[str]] = []

    def pretrain_all(runs: list[Pretrain]) -> list[dict[str, object]]:
        rounds.append([r.name(wb.scale) for r in runs])
        return [{"best": {"digits_test_5shot": 0.7 + 0.01 * r.seed}, "glyph_test_top1": 0.9 - 0.01 * r.seed}
                for r in runs]

    wb.pretrain_all = pretrain_all  # type: ignore[method-assign]
    got = tuning.seeded_at_rate(wb, lambda seed=0: Pretrain("ResNet", "B", optimizer="sgd", seed=seed), 0.9)
    assert rounds == [[f"resnet-B_sgd_n20000_steps500_lr0.9_seed{s}" for s in (0, 1, 2)]]  # one round, all seeds
    assert got["digits_test_5shot"]["values"] == pytest.approx([0.70, 0.71, 0.72])
    assert got["glyph_test_top1"]["mean"] == pytest.approx(0.89)


def test_seeds_at_another_rate_train_for_real_and_read_back(tmp_path: Path) -> None:
    torch.manual_seed(0)
    wb = Workbench(tmp_path, SMOKE, progress=False)
    at = lambda seed=0: Pretrain("ResNet", "B", optimizer="sgd", seed=seed)  # noqa: E731
    got = tuning.seeded_at_rate(wb, at, 0.2)
    unit = tmp_path / "pretrain" / "resnet-B_sgd_n1000_steps4_lr0.2_seed0" / UNIT_FILE
    summary = json.loads(unit.read_text())
    assert summary["optimizer"] == "sgd" and summary["lr"] == pytest.approx(0.2)
    assert got["digits_test_5shot"]["values"] == [summary["best"]["digits_test_5shot"]]
    assert 0.0 < got["glyph_test_top1"]["values"][0] <= 1.0
    assert tuning.seeded_at_rate(wb, at, 0.2) == got  # read back from the folder, not trained again
