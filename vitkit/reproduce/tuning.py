"""Each model's pre-training learning rate, tuned once on a grid bracketed on both sides, then used for all its runs.

A *model* is a family at a size with its position embedding, pooling and optimiser (`model_key`). Its rate is
picked on the whole set, seed 0, at the scale's schedule, by the early-stopping 5-shot digits *dev* accuracy, on
the grid `rate_grid` gives; a sweep whose best lies at an edge of the rates tried is extended past it
(stats.extension) up to LR_EXTEND rates per side, so the pick is interior (rules.py caps a verdict resting on an
unbracketed sweep). Every seed and every data subset of that model then takes the pick (§4.2: the same
hyper-parameters for every subset). One sweep per model: experiments 8 and 10 read the same sweep of ViT-B and of
ResNet-B (AdamW) as experiments 1-5 and 9.

Units stay named as before: a run at the scale's own family rate (`Scale.lrs`) is the unit without a rate in its
name (`unit_lr`), so a folder written before tuning keeps its runs; only new (model, rate, seed) units train.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import Any

from vitkit.reproduce.plan import Pretrain, Scale
from vitkit.reproduce.runs import Finetune, Unit, Workbench
from vitkit.reproduce.stats import best_rates, extension, pick_rate, seeded

# rates added past an edge of a sweep that wins there, per side (stats.extension); 4 as the fine-tuning sweeps' and
# the laptop crossover's (2 until 2026-11-26, when the long scale's SGD sweep still won at its edge, 2.7, after two)
LR_EXTEND = 4
Sweep = list[dict[str, float]]


def model_key(run: Pretrain) -> Pretrain:
    """The model a run belongs to, as the run that tunes it would name it without a rate: the whole set, the
    scale's schedule, seed 0."""
    return replace(run, images=0, steps=0, seed=0, lr=0.0)


def unit_lr(scale: Scale, run: Pretrain, lr: float) -> float:
    """The rate as a unit is named with it: 0 (no rate in the name) for AdamW at the scale's own family rate, the
    rate itself otherwise."""
    return 0.0 if run.optimizer == "adamw" and lr == scale.lrs[run.family] else lr


def rate_grid(scale: Scale, model: Pretrain, own: tuple[float, ...] = ()) -> tuple[float, ...]:
    """The grid a model's rate is tuned on: its optimiser's (`optimizer_lrs`) for SGD; `scale.tune_lrs` for every
    AdamW model where that is set; else `own` (an experiment's own grid: experiment 8's `pooling_lrs`, 10's
    `optimizer_lrs["adamw"]`), and () -- not tuned, the scale's `lrs` -- where there is none."""
    if model.optimizer != "adamw":
        return scale.optimizer_lrs[model.optimizer]
    return scale.tune_lrs or own


def is_tuned(scale: Scale, run: Pretrain, own: tuple[float, ...] = ()) -> bool:
    """Whether the run takes its model's tuned rate: a supervised run without a rate of its own whose model has a
    grid (`rate_grid`; an SGD run always has: its rates are never the scale's)."""
    return run.objective == "classify" and not run.lr and bool(rate_grid(scale, run, own))


def fewshot_dev(wb: Workbench, runs: list[Pretrain]) -> list[dict[str, float]]:
    """The default score of a sweep's runs: each run's early-stopping 5-shot digits dev accuracy (`dev`) and its glyph
    test accuracy, the runs trained `wb.jobs` at a time."""
    key = f"digits_dev_{wb.scale.select_shots}shot"
    return [{"dev": s["best"][key], "glyph_test_top1": s["glyph_test_top1"]} for s in wb.pretrain_all(runs)]


def sweep_rates(wb: Workbench, variants: dict[Hashable, tuple[tuple[float, ...], Callable[[float], Pretrain]]],
                extend: int = LR_EXTEND,
                score: Callable[[Workbench, list[Pretrain]], list[dict[str, float]]] = fewshot_dev,
                ) -> dict[Hashable, Sweep]:
    """Each variant's sweep: `variants` maps a name to (grid, `at(lr)`: its run at a rate). Every variant's grid
    trains in one round (`wb.pretrain_all`: `wb.jobs` at a time), then every variant's next extension in the next
    round, until each best is bracketed or its extension spent. A sweep row: the rate, its early-stopping 5-shot
    digits dev accuracy and its glyph test accuracy; sorted by rate."""
    sweeps: dict[Hashable, Sweep] = {name: [] for name in variants}
    todo = {name: list(grid) for name, (grid, _) in variants.items()}
    while todo:
        runs = {(name, lr): variants[name][1](lr) for name, lrs in todo.items() for lr in lrs}
        # the plan counted the grids; an extension adds its run (done already when a resumed sweep reads it back)
        wb.count([r for (name, lr), r in runs.items() if lr not in variants[name][0]])
        for (name, lr), row in zip(runs, score(wb, list(runs.values()))):
            sweeps[name].append({"lr": lr, **row})
        todo = {}
        for name, (grid, _) in variants.items():
            if (lr := extension(sweeps[name], grid, extend)) is not None:
                todo[name] = [lr]
    return {name: sorted(sw, key=lambda r: r["lr"]) for name, sw in sweeps.items()}


def grid_runs(scale: Scale, runs: Iterable[Pretrain], own: tuple[float, ...] = ()) -> list[Pretrain]:
    """The grid runs (before any extension) of the models of `runs` whose rate is tuned: the plan's first round."""
    models = dict.fromkeys(model_key(r) for r in runs if is_tuned(scale, r, own))
    return [replace(m, lr=unit_lr(scale, m, lr)) for m in models for lr in rate_grid(scale, m, own)]


def tune(wb: Workbench, runs: Iterable[Pretrain], own: tuple[float, ...] = ()) -> dict[Pretrain, Sweep]:
    """Sweep (or read back) the rate of every model of `runs` whose rate is tuned, all models in the same rounds;
    kept in `wb.sweeps` (one sweep per model for the whole reproduction). Returns those models' sweeps."""
    models = list(dict.fromkeys(model_key(r) for r in runs if is_tuned(wb.scale, r, own)))
    new = {m: (rate_grid(wb.scale, m, own), lambda lr, m=m: replace(m, lr=unit_lr(wb.scale, m, lr)))
           for m in models if m not in wb.sweeps}
    if new:
        wb.sweeps.update(sweep_rates(wb, new))
    return {m: wb.sweeps[m] for m in models}


def resolve(wb: Workbench, unit: Unit, own: tuple[float, ...] = ()) -> Any:
    """The unit at its model's picked rate (the model tuned first where it was not yet); a fine-tune's source
    likewise; a unit with a rate of its own, or at a scale that does not tune, as it is."""
    if isinstance(unit, Finetune):
        return unit if unit.source is None else replace(unit, source=resolve(wb, unit.source, own))
    if not is_tuned(wb.scale, unit, own):
        return unit
    m = model_key(unit)
    tune(wb, [unit], own)
    return replace(unit, lr=unit_lr(wb.scale, unit, pick_rate(wb.sweeps[m])))


def sweeps_of(wb: Workbench, runs: Iterable[Pretrain], own: tuple[float, ...] = ()) -> dict[str, Sweep]:
    """The sweeps `runs` rest on, by model name (`model_name`), for a result's `lr_sweeps`."""
    return {model_name(m): sw for m, sw in tune(wb, runs, own).items()}


def picks_of(sweeps: dict[str, Sweep]) -> dict[str, float]:
    return {name: pick_rate(sw) for name, sw in sweeps.items()}


def model_name(model: Pretrain) -> str:
    """ViT-B, ViT-B pos-none, ViT-B pool-gap, ResNet-B sgd: a model as tables and `lr_sweeps` name it."""
    tags = [t for t in (model.posemb != "learn1d" and f"pos-{model.posemb}", model.pooling != "token" and
                        f"pool-{model.pooling}", model.optimizer != "adamw" and model.optimizer) if t]
    return " ".join([f"{model.family}-{model.size}", *tags])


def _seeded_scores(wb: Workbench, got: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs' seeded 5-shot digits test (at the early-stopping step) and glyph test accuracies, as results keep them."""
    m = f"digits_test_{wb.scale.select_shots}shot"
    return {m: seeded([r["best"][m] for r in got]), "glyph_test_top1": seeded([r["glyph_test_top1"] for r in got])}


def seeded_at_picks(wb: Workbench, variants: dict[str, Callable[..., Pretrain]], own: tuple[float, ...] = ()
                    ) -> tuple[dict[str, float], dict[str, Sweep], dict[str, Any]]:
    """Experiments 8 and 10: each variant (`at(seed=s)`: its run without a rate of its own) at its model's pick,
    every pre-training seed, in one round. Returns the picks and sweeps (by variant) and per variant the seeded
    5-shot digits test (at the early-stopping step) and glyph test accuracies."""
    bases = {name: at(seed=0) for name, at in variants.items()}
    tune(wb, bases.values(), own)
    sweeps = {name: wb.sweeps[model_key(b)] for name, b in bases.items()}
    runs = {name: [resolve(wb, at(seed=s), own) for s in wb.scale.pretrain_seeds] for name, at in variants.items()}
    done = iter(wb.pretrain_all([r for rs in runs.values() for r in rs]))
    res = {name: _seeded_scores(wb, [next(done) for _ in rs]) for name, rs in runs.items()}
    return picks_of(sweeps), sweeps, res


def other_tied_rates(sweep: Sweep) -> list[float]:
    """The rates that reach a sweep's best dev accuracy beside its pick (`stats.pick_rate`: the smaller of a tie),
    smallest first; empty when the pick is the only best. A verdict resting on a tied pick is reported under each of
    them too (rules.tied_sweeps flags the tie)."""
    pick = pick_rate(sweep)
    return sorted(r for r in best_rates(sweep) if r != pick)


def seeded_at_rate(wb: Workbench, at: Callable[..., Pretrain], lr: float) -> dict[str, Any]:
    """A variant (`at(seed=s)`: its run without a rate of its own) at the rate `lr` instead of its pick, every
    pre-training seed in one round (`wb.jobs` at a time): its seeded 5-shot digits test and glyph test accuracies, as
    `seeded_at_picks` gives them per variant. The seed-0 run is the sweep's own unit at that rate (read back where
    the folder holds it)."""
    runs = [replace(at(seed=s), lr=unit_lr(wb.scale, at(seed=s), lr)) for s in wb.scale.pretrain_seeds]
    return _seeded_scores(wb, wb.pretrain_all(runs))
