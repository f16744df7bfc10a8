"""`vitkit reproduce`: the paper's findings re-run at laptop scale (see REPRODUCTION.md).

plan.py is the set-up as plain data, transfer.py the few-shot targets, runs.py the cached, resumable
units of work, experiments.py the experiments, crossover.py the data-and-compute grid of the crossover
(experiment 7), plots.py their figures.
"""

from vitkit.reproduce.crossover import CROSSOVER_SCALES, CrossoverScale
from vitkit.reproduce.experiments import EXPERIMENTS, run_experiments
from vitkit.reproduce.plan import FULL, SCALES, SMOKE, Pretrain, Scale

__all__ = ["CROSSOVER_SCALES", "EXPERIMENTS", "FULL", "SCALES", "SMOKE", "CrossoverScale", "Pretrain", "Scale",
           "run_experiments"]
