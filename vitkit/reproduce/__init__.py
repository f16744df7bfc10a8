"""`vitkit reproduce`: the paper's findings re-run at laptop scale (see REPRODUCTION.md).

plan.py is the set-up as plain data, transfer.py the few-shot targets, runs.py the cached, resumable
units of work, experiments.py the experiments, crossover.py the data-and-compute grid of the crossover
(experiment 7), plots.py their figures (drawn from the result JSON), stats.py the intervals and tests, rules.py
each experiment's rule and the verdict it gives, summary.py SUMMARY.md.
"""

import importlib
from typing import Any

from vitkit.reproduce.plan import CROSSOVER_SCALE_NAMES, EXPERIMENT_NAMES, FULL, SCALES, SMOKE, Pretrain, Scale

# the experiments and the crossover grid import the trainer and matplotlib: loaded on first use (PEP 562), so that
# the CLI, which lists the experiment names, starts without them
_LAZY = {"CROSSOVER_SCALES": "crossover", "CrossoverScale": "crossover", "EXPERIMENTS": "experiments",
         "redraw": "experiments", "run_experiments": "experiments"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"vitkit.reproduce.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'vitkit.reproduce' has no attribute {name!r}")


__all__ = ["CROSSOVER_SCALES", "CROSSOVER_SCALE_NAMES", "EXPERIMENTS", "EXPERIMENT_NAMES", "FULL", "SCALES", "SMOKE",
           "CrossoverScale", "Pretrain", "Scale", "redraw", "run_experiments"]
