"""Training: run configs (config.py: RunConfig and its typed sections), the engine (engine.py: the Trainer),
the world-invariant gradient (grads.py), optimisers and schedules (optim.py), distillation (distill.py), metrics
and curves (metrics.py), and the recipe runner (run.py) that `vitkit demo`, `train`, `finetune` and `sweep` all
go through."""

from vitkit.train.config import RunConfig, TrainConfig, load_config
from vitkit.train.engine import Trainer

__all__ = ["RunConfig", "TrainConfig", "Trainer", "load_config"]
