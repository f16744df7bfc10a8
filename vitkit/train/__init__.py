"""Training: optimisers and schedules (optim.py), the engine (engine.py), run configs (config.py) and the
recipe runner (run.py) that `vitkit demo`, `train`, `finetune` and `sweep` all go through."""

from vitkit.train.engine import TrainConfig, Trainer

__all__ = ["TrainConfig", "Trainer"]
