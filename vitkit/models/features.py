"""One definition of each feature a ViT gives for an image, read from its token record (`Tokens`): what `vitkit embed`,
few-shot evaluation (§4.1) and `VisionTransformer.intermediates` return under these names.

- "cls": the class token z_L^0 after the final LayerNorm; "mean": the mean of the patch tokens after it (class
  token and registers left out; merged tokens counted by their patch counts, as GAP counts them); "cls_mean": both,
  concatenated (DINOv2's linear evaluation); "patch": every patch token (refused once tokens have merged: they are
  no longer patches);
- "pooled": eq. 4's y (`VisionTransformer.pool`: class token, GAP or MAP, merged tokens weighted by size);
- "pre_logits": the classifier's input (`forward_head(pre_logits=True)`): y through the pre-logits layer where there
  is one; a distilled DeiT without one: timm's convention, the mean of the class and distillation tokens (the
  inputs of its two heads);
- "logits": the head's output in eval mode (a distilled DeiT: the two heads' mean; a model without a head, its
  input).
"""

from __future__ import annotations

from typing import Any

import torch

from vitkit.models.layers import Tokens, TwoHeads
from vitkit.models.tome import weighted_mean

FEATURES = ("cls", "mean", "cls_mean", "patch", "pooled", "pre_logits", "logits")


def check_feature(model: Any, name: str) -> None:
    """A ValueError where `model` (a VisionTransformer) has no feature `name` (checked before any image is read)."""
    cfg = model.config
    if name not in FEATURES:
        raise ValueError(f"unknown feature {name!r}; one of {', '.join(FEATURES)}")
    if name in ("cls", "cls_mean") and cfg.num_class_tokens == 0:
        raise ValueError(f"feature {name!r}: this model has no class token (pooling {cfg.pooling!r}); use mean")
    if name == "patch" and model.merging:
        raise ValueError("feature 'patch': this model merges tokens (token merging, set_token_merging), so its "
                         "output tokens are no longer patches; turn merging off (set_token_merging(0)) for patch "
                         "features")


def feature(model: Any, t: Tokens, name: str) -> torch.Tensor:
    """The feature `name` (see the module docstring) of `model` (a VisionTransformer) from its token record `t`."""
    check_feature(model, name)
    if name == "patch":
        if t.packed:
            raise ValueError("feature 'patch': packed images (native resolution) each have their own patch grid; "
                             "run an image alone for its patch tokens")
        if t.sizes is not None:  # a record made by a merging encoder outside the model's own option
            raise ValueError("feature 'patch': these tokens have merged, they are no longer patches")
        return t.patches
    if name in ("pooled", "pre_logits"):
        return model.pool(t) if name == "pooled" else model.forward_head(t, pre_logits=True)
    if name == "logits":
        y = model.forward_head(t)
        return y.mean() if isinstance(y, TwoHeads) else y
    mean = weighted_mean(t.patches, t.patch_sizes) if name != "cls" else None
    return {"cls": lambda: t.z[:, 0], "mean": lambda: mean,
            "cls_mean": lambda: torch.cat([t.z[:, 0], mean], -1)}[name]()
