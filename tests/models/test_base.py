"""models/base.py's `no_random_init`: a model built for a checkpoint's weights draws no random initial values (the
global generator is left as it was), has the architecture a normal build has, and only in the thread that asked."""

from __future__ import annotations

import threading

import torch

from vitkit.models.base import no_random_init, random_init_skipped
from vitkit.models.resnet import ResNetV2
from vitkit.models.vit import VisionTransformer, ViTConfig

CFG = dict(img_size=16, patch_size=8, width=16, depth=1, num_heads=2, mlp_dim=32, num_classes=3, num_registers=1,
           representation_size=8)


def _seeded_vit() -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(ViTConfig(**CFG))


def _layout(m: torch.nn.Module) -> dict:
    return {k: (tuple(t.shape), t.dtype) for k, t in m.state_dict().items()}


def test_no_random_init_draws_nothing_and_builds_the_same_architecture() -> None:
    normal, bit = _seeded_vit(), ResNetV2((1, 1, 1, 1), num_classes=3)
    state = torch.get_rng_state()
    with no_random_init():
        assert random_init_skipped()
        skipped, bit_skipped = VisionTransformer(ViTConfig(**CFG)), ResNetV2((1, 1, 1, 1), num_classes=3)
    assert torch.equal(torch.get_rng_state(), state)  # no draw at all: torch's layers' nor vitkit's init
    assert not random_init_skipped()
    assert _layout(skipped) == _layout(normal) and _layout(bit_skipped) == _layout(bit)
    assert all(torch.equal(t, torch.zeros_like(t)) for n, t in skipped.state_dict().items() if n.startswith("head."))
    again = _seeded_vit()  # outside the context a build draws its init as before
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), normal.state_dict().values(), strict=True))
    assert not torch.equal(torch.get_rng_state(), state)


def test_no_random_init_is_for_its_own_thread_only() -> None:
    normal = _seeded_vit()
    built: list[VisionTransformer] = []
    with no_random_init():
        t = threading.Thread(target=lambda: built.append(_seeded_vit()))
        t.start()
        t.join()
    assert all(torch.equal(a, b) for a, b in zip(built[0].state_dict().values(), normal.state_dict().values(),
                                                 strict=True))
