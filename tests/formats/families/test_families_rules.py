"""A family's rules are in its files (formats/families/<key>.py, its timm names in models/timm_families.py under the
same key) and one registry joins them: the timm names are keyed by registered families, and the pooled feature the
embedding code asks the registry for is the one it used to decide itself."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers import random_vit
from vitkit.formats import families
from vitkit.formats.families import FAMILIES, pooled_feature
from vitkit.inference.features import _distilled_note, default_feature
from vitkit.models.registry import create_model
from vitkit.models.timm_families import BY_FAMILY, SPECS


def test_timm_names_are_keyed_by_registered_families() -> None:
    keys = {f.key for f in FAMILIES}
    assert set(BY_FAMILY) - {"vit"} <= keys  # "vit": the paper's own hybrids; every other key is a family's file
    assert {n for f in FAMILIES for n in f.timm_specs} | set(BY_FAMILY["vit"]) == set(SPECS)
    for fam in FAMILIES:
        for name, (fields, _) in list(fam.timm_specs.items())[:2]:
            with torch.device("meta"):  # the registry builds it (no memory)
                assert create_model(name).config.name == fields["name"]
    assert families.deit.FAMILY.key == "deit" and "deit_small_distilled_patch16_224" in families.deit.FAMILY.timm_specs


# (overrides of the tiny ViT, the feature its family calls pooled)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "plain": ({}, "pre_logits"),
    "clip_projection": ({"name": "clip_vision_model", "pre_norm": True, "patch_bias": False}, "logits"),
    "clip_model": ({"name": "clip", "pre_norm": True, "patch_bias": False}, "logits"),
    "clip_tower": ({"name": "clip_vision_model", "pre_norm": True, "patch_bias": False, "num_classes": 0},
                   "pre_logits"),
    "deit_pooler": ({"name": "deit", "distill_token": True, "num_classes": 0, "representation_size": 32},
                    "pre_logits"),
    "deit_transformers": ({"name": "deit", "distill_token": True}, "cls"),
    "deit_timm": ({"distill_token": True}, "pre_logits"),
}


@pytest.mark.parametrize("case", CASES)
def test_pooled_feature_is_the_one_embed_uses(case: str) -> None:
    over, want = CASES[case]
    model = random_vit(**over)
    found = pooled_feature(model.config) or ("pre_logits", _distilled_note(model.config))
    assert found[0] == want
    assert found == default_feature(model)
