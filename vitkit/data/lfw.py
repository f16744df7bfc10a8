"""scikit-image's `lfw_subset`: 100 face and 100 non-face 25x25 grey crops, shipped with scikit-image."""

from __future__ import annotations

import numpy as np
import torch

from vitkit.data.base import ArrayDataset

LFW_CLASSES = ["non-face", "face"]


def load_lfw_subset() -> ArrayDataset:
    try:
        from skimage.data import lfw_subset
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ValueError("the lfw data set needs scikit-image (pip install 'vitkit[images]')") from e
    x = np.asarray(lfw_subset(), dtype=np.float32)  # (200, 25, 25) in [0, 1]; faces first
    labels = np.r_[np.ones(100, np.int64), np.zeros(len(x) - 100, np.int64)]
    return ArrayDataset(torch.from_numpy(x[:, None].copy()), labels, LFW_CLASSES, "lfw_subset")
