"""A row of a batch is its own image's answer, whatever sits beside it: an 8-bit and a 16-bit image of one size in
one batch (issue 50: the 8-bit one was promoted to float 0..255 without its division by 255)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from tests.helpers import random_vit
from vitkit.inference.features import FeatureNet, embed_files


def _pair(root: Path) -> tuple[str, str]:
    """One grey picture written twice, as an 8-bit and a 16-bit PNG of the same size."""
    rng = np.random.default_rng(0)
    img8 = rng.integers(0, 256, (24, 24), dtype=np.uint8)
    p8, p16 = root / "a8.png", root / "a16.png"
    Image.fromarray(img8).save(p8)
    Image.fromarray(img8.astype(np.uint16) * 257).save(p16)  # the same levels on 0..65535
    assert Image.open(p16).mode.startswith("I")
    return str(p8), str(p16)


def test_8_and_16_bit_images_share_a_batch(tmp_path: Path) -> None:
    p8, p16 = _pair(tmp_path)
    model = random_vit()
    net = FeatureNet(model, "pooled", False)
    together = embed_files(net, model.preprocess, [p8, p16], batch_size=2).features
    alone8 = embed_files(net, model.preprocess, [p8], batch_size=1).features
    alone16 = embed_files(net, model.preprocess, [p16], batch_size=1).features
    np.testing.assert_allclose(together[0], alone8[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(together[1], alone16[0], rtol=1e-5, atol=1e-6)
    # the same picture at two bit depths: the same features up to the 8-bit resize's rounding
    cos = float(torch.nn.functional.cosine_similarity(torch.from_numpy(together[0]), torch.from_numpy(together[1]),
                                                      dim=0))
    assert cos > 0.99, cos
