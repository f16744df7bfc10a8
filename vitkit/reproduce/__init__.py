"""`vitkit reproduce`: the paper's findings re-run at laptop scale (see REPRODUCTION.md).

plan.py is the set-up as plain data, transfer.py the few-shot targets, runs.py the cached, resumable
units of work, experiments.py the six experiments, plots.py their figures.
"""

from vitkit.reproduce.experiments import EXPERIMENTS, run_experiments
from vitkit.reproduce.plan import FULL, SCALES, SMOKE, Pretrain, Scale

__all__ = ["EXPERIMENTS", "FULL", "SCALES", "SMOKE", "Pretrain", "Scale", "run_experiments"]
