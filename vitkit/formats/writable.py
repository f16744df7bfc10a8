"""What every saver does before it writes: LoRA adapters merged, and the whole state dict accounted for.

The rule, one for every saver (`save_pretrained`'s "vitkit", "hf", "timm" and "npz", sharded or not): a model that
carries unmerged LoRA adapters (vitkit.models.lora) is written *merged* -- `merge_lora` on a copy, so the caller's
model keeps its adapters -- which is said in the log and kept in the written config (`config.extra["merged_lora"]`:
the LoRA config whose update W + (alpha / r) B A is in the weights). Its reload is a plain model whose logits are
the adapted model's (up to fp32 rounding); to keep the adapters apart, `save_adapters` writes them alone. After
that, every tensor of the model's state dict must be one the saver's key table writes: a tensor no table entry
takes (a parameter or buffer added to the model, a module replaced by one with other tensors) is refused by name,
never dropped or written into a file the loader then refuses.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable

import torch
from torch import nn

from vitkit.formats.common import KeyTable, built_to_load
from vitkit.models.lora import lora_modules, merge_lora

log = logging.getLogger("vitkit")
MERGED_KEY = "merged_lora"  # config.extra's record of adapters merged at save


def writable(model: nn.Module, fmt: str) -> nn.Module:
    """`model`, or for a model with unmerged LoRA adapters a merged copy of it (logged; its config records the
    merge under `MERGED_KEY`). `fmt` names the format in the log."""
    if not lora_modules(model):
        return model
    lcfg = getattr(model, "lora_config", None)
    merged = merge_lora(copy.deepcopy(model))
    note = {"lora": lcfg.to_dict() if lcfg is not None else None,
            "note": "LoRA adapters merged into the weights at save (W + alpha / r B A); the model has no adapters"}
    merged.config.extra = {**merged.config.extra, MERGED_KEY: note}
    log.warning("the model carries unmerged LoRA adapters: written in the %s format merged into its weights (the "
                "model itself keeps them; save_adapters writes the adapters alone)", fmt)
    return merged


def table_keys(table: KeyTable) -> set[str]:
    """The vitkit state-dict keys a key table writes (`qkv.weight#0` is a chunk of `qkv.weight`)."""
    return {tkey.partition("#")[0] for tkey, _, _ in table}


def check_consumed(model: nn.Module, written: Iterable[str], fmt: str) -> None:
    """Refuse, naming them, the tensors of `model`'s state dict that the `fmt` writer's key table (`written`: the
    vitkit keys it writes) leaves out."""
    left = sorted(set(model.state_dict()) - set(written))
    if left:
        more = f" (+{len(left) - 6} more)" if len(left) > 6 else ""
        raise ValueError(f"cannot save as {fmt}: the model's tensor(s) {', '.join(map(repr, left[:6]))}{more} are "
                         f"not in the {fmt} format's key table, and would be dropped or make a file its loader refuses "
                         f"(a parameter or buffer added to a {type(model).__name__}, or a module replaced by another)")


def check_architecture(model: nn.Module, cls: type, fmt: str) -> None:
    """For the writers that write the state dict as it is (vitkit's format, timm's): its keys and shapes must be
    those of the model `cls` builds from `model.config` (on the meta device: no memory), as the loader does."""
    with torch.device("meta"):
        ref = built_to_load(cls, model.config).state_dict()
    check_consumed(model, ref, fmt)
    own = model.state_dict()
    bad = [k for k in ref if k in own and tuple(own[k].shape) != tuple(ref[k].shape)]
    missing = [k for k in ref if k not in own]
    if missing or bad:
        what = (f"lacks {', '.join(map(repr, missing[:6]))}" if missing else
                f"has {bad[0]!r} of shape {tuple(own[bad[0]].shape)}, its config's model {tuple(ref[bad[0]].shape)}")
        raise ValueError(f"cannot save as {fmt}: the model {what}: its tensors are not those of the model its "
                         "config describes, which the loader builds")
