"""The model card a saved hf or timm folder carries (README.md): the hub's YAML metadata (library_name, tags,
pipeline_tag, license and base_model where known) and the model's preprocessing, so that a folder pushed as it is
reads on the hub as the model it is. A README.md the user already keeps in the folder is left as it is.

The license and base model are known for weights that came by name (`create_model(name, pretrained=True)`: the tag's
repo and license) or by hub id (`load_pretrained("org/name")`: the repo), recorded in `config.extra["pretrained"]`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CARD_NAME = "README.md"


def model_card(model: Any, fmt: str) -> str:
    """The card's text: YAML front matter, then what the model is and how it is fed."""
    cfg, pre = model.config, model.pretrained_cfg
    known = (getattr(cfg, "extra", None) or {}).get("pretrained", {})
    task = "image-classification" if getattr(cfg, "num_classes", 0) else "image-feature-extraction"
    meta: dict[str, Any] = {"library_name": "vitkit", "pipeline_tag": task,
                            "tags": ["vitkit", "vision-transformer", task, *(["timm"] if fmt == "timm" else [])]}
    if known.get("license"):
        meta["license"] = known["license"]
    if known.get("hf_hub_id"):
        meta["base_model"] = known["hf_hub_id"]
    lines = ["---"]
    for key, value in meta.items():  # JSON scalars are YAML scalars: quoted, never misread
        if isinstance(value, list):
            lines += [f"{key}:", *(f"- {json.dumps(v)}" for v in value)]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    name = getattr(cfg, "name", "") or type(model).__name__
    c, h, w = pre["input_size"]
    lines += ["---", "", f"# {name}", "",
              f"A Vision Transformer (Dosovitskiy et al., 2021) saved by vitkit in the {fmt} format"
              + (f", from {known['hf_hub_id']}" + (f" (tag {known['tag']})" if known.get("tag") else "") + "."
                 if known.get("hf_hub_id") else "."), "",
              "| | |", "|---|---|",
              f"| input | {c} x {h} x {w} |",
              f"| outputs | {cfg.num_classes} classes |" if cfg.num_classes else "| outputs | features (no head) |",
              f"| resize | {pre['interpolation']}, crop_pct {pre['crop_pct']} ({pre['crop_mode']}) |",
              f"| mean / std | {list(pre['mean'])} / {list(pre['std'])} |", "",
              "```python", "import vitkit", "", 'model = vitkit.load_pretrained("<this folder or repo id>")', "```", ""]
    return "\n".join(lines)


def write_card(model: Any, folder: Path, fmt: str, keep: Path | None = None) -> None:
    """Write the card into `folder`, unless `keep` (the folder being replaced) already holds a README.md."""
    if keep is not None and (keep / CARD_NAME).exists():
        return
    (folder / CARD_NAME).write_text(model_card(model, fmt), encoding="utf-8")
