"""`vitkit reproduce`: the paper's findings re-run at laptop scale (see REPRODUCTION.md).

plan.py is the set-up as plain data, transfer.py the few-shot targets, runs.py the cached, resumable
units of work, experiments.py the experiments, crossover.py the data-and-compute grid of the crossover
(experiment 7), plots.py their figures (drawn from the result JSON), stats.py the intervals and tests, rules.py
each experiment's rule and the verdict it gives, summary.py SUMMARY.md.
"""

from vitkit.reproduce.crossover import CROSSOVER_SCALES, CrossoverScale
from vitkit.reproduce.experiments import EXPERIMENTS, redraw, run_experiments
from vitkit.reproduce.plan import FULL, SCALES, SMOKE, Pretrain, Scale

__all__ = ["CROSSOVER_SCALES", "EXPERIMENTS", "FULL", "SCALES", "SMOKE", "CrossoverScale", "Pretrain", "Scale",
           "redraw", "run_experiments"]
