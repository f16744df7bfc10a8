"""Checkpoint families beyond the paper's plain ViT, one file each, and their registry (`FAMILIES`).

Each file holds one family's `Family` (family.py): the ViTConfig options that mark it, what timm's builders set
for it, its key maps for the layouts it ships in (timm's, transformers', its own repository's), its preprocessing
defaults and its writers. formats/timm.py, formats/hf_families.py and formats/hf.py ask this registry.

To add a family: write `vitkit/formats/families/<name>.py` with a `Family` subclass and `FAMILY = <it>()`, and add
`<name>.FAMILY` to `FAMILIES` below; the family table of docs/checkpoints.md is `readme_table()` (a test checks they agree).
"""

from __future__ import annotations

from typing import Any

from vitkit.formats.common import appendix_parts
from vitkit.formats.families import clip, deit, deit3, dinov2, mae, siglip
from vitkit.formats.families.family import Family

# In this order the first family whose option marks a ViT (`hf_kind`, `timm_architecture`) writes it.
FAMILIES: tuple[Family, ...] = (
    deit.FAMILY,
    deit3.FAMILY,
    dinov2.FAMILY,
    clip.FAMILY,
    siglip.FAMILY,
    mae.FAMILY,
)
HF_FAMILY_TYPES = tuple(t for f in FAMILIES for t in f.hf_model_types)  # transformers model_types read via families


def family_of_hf_type(model_type: object) -> Family | None:
    """The family whose transformers class has config.json `model_type` (None: none of them)."""
    return next((f for f in FAMILIES if model_type in f.hf_model_types), None)


def keeps_table(name: object) -> bool:
    """Whether a checkpoint of timm architecture or transformers model_type `name` ("vit_base_patch14_dinov2",
    "dinov2_with_registers"; "dinov2" for DINOv2's own layout) is of a family that keeps its position table as it
    came (`Family.keeps_table`)."""
    return isinstance(name, str) and any(f.keeps_table and f.key in name for f in FAMILIES)


def variant_parts(cfg: Any) -> list[str]:
    """What of a ViT config a plain ViT's file (the .npz, transformers' ViTModel) cannot hold: the paper's appendix
    variants and each family's options (`Family.option_parts`)."""
    return appendix_parts(cfg) + [p for f in FAMILIES for p in f.option_parts(cfg)]


def pooled_feature(cfg: Any) -> tuple[str, str] | None:
    """The feature a model's family calls its pooled output, and a note on how the file decided it
    (`Family.pooled_feature`: CLIP's projected embedding, DeiT's pooler or class token); None: the head's input."""
    return next((found for f in FAMILIES if (found := f.pooled_feature(cfg)) is not None), None)


def readme_table() -> str:
    """The family table of docs/checkpoints.md, rendered from the registry."""
    rows = ["| family | its file | marked by (`ViTConfig`) | timm names | transformers model_type | own layout |",
            "|---|---|---|---|---|---|"]
    for f in FAMILIES:
        hf = ", ".join(f"`{t}`" for t in f.hf_model_types) or "—"
        rows.append(f"| {f.name} ({f.paper}) | `{f.file}` | {f.marks} | {f.timm_names or '—'} | {hf} | "
                    f"{f.own_layout or '—'} |")
    return "\n".join(rows)
