"""Transfer targets of `vitkit reproduce`: few-shot linear evaluation (§4.1) on real images no run trains on.

- digits (scikit-learn, 1,797 8x8 handwritten digits, 10 classes): the fixed train split is cut into a
  few-shot pool (80%) and a dev part (20%) used only to pick the early-stopping step; accuracy is
  reported on the test split (450 images).
- lfw_subset (scikit-image, 200 25x25 grey crops, face / non-face): half pool, half test.

Both are resized to the model's input size by its own evaluation preprocessing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import nn

from vitkit.data.base import Dataset, holdout
from vitkit.data.digits import load_digits_split
from vitkit.data.lfw import load_lfw_subset
from vitkit.inference.evaluate import eval_loader
from vitkit.inference.fewshot import extract_features, fewshot_table


def transfer_sets(limit: int = 0) -> dict[str, dict[str, Dataset]]:
    """{"digits": {"pool", "dev", "test"}, "lfw": {"pool", "test"}}; the same split every call. `limit` > 0
    keeps a stratified subset of at most that many images per part (smoke runs only)."""
    train, test = load_digits_split()
    pool, dev = holdout(train, 0.2, seed=0)
    lfw_pool, lfw_test = holdout(load_lfw_subset(), 0.5, seed=0)
    sets: dict[str, dict[str, Dataset]] = {"digits": {"pool": pool, "dev": dev, "test": test},
                                           "lfw": {"pool": lfw_pool, "test": lfw_test}}
    if limit:
        sets = {name: {part: (holdout(ds, limit / len(ds), seed=0)[1] if len(ds) > limit else ds)
                       for part, ds in parts.items()} for name, parts in sets.items()}
    return sets


class FewShotEvaluator:
    """`fn(model) -> {"digits_test_5shot": acc, "digits_dev_5shot": ..., "lfw_test_5shot": ..., ...}`: mean
    accuracy over the few-shot seeds of the closed-form linear fit on frozen features (fewshot.py)."""

    def __init__(self, shots: Sequence[int], seeds: Sequence[int], batch_size: int = 256, limit: int = 0) -> None:
        self.shots, self.seeds, self.batch_size = tuple(shots), tuple(seeds), batch_size
        self.sets = transfer_sets(limit)

    def features(self, model: nn.Module, ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
        return extract_features(model, eval_loader(ds, model.preprocess, self.batch_size), "pre_logits")

    def __call__(self, model: nn.Module) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, parts in self.sets.items():
            k = len(parts["pool"].classes)
            pool = self.features(model, parts["pool"])
            for split in ("dev", "test"):
                if split not in parts:
                    continue
                table = fewshot_table(pool, self.features(model, parts[split]), k, self.shots, self.seeds)
                for shots, row in table.items():
                    out[f"{name}_{split}_{shots}shot"] = float(row["mean"])
                    out[f"{name}_{split}_{shots}shot_std"] = float(row["std"])
        return out
