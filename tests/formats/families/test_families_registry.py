"""The checkpoint-family registry (vitkit/formats/families/): docs/checkpoints.md's family table is rendered from it, every
family file is registered, and the option that marks each family picks that family's class when writing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import vitkit
from vitkit.formats import families
from vitkit.formats.common import Choices
from vitkit.formats.families import FAMILIES, HF_FAMILY_TYPES, family_of_hf_type, readme_table
from vitkit.formats.families.family import Family
from vitkit.formats.hf import HF_MODEL_TYPES
from vitkit.formats.hf_families import hf_family
from vitkit.models.vit import VisionTransformer, ViTConfig

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "vitkit" / "formats" / "families"


def _readme_table(header: str) -> list[str]:
    """The lines of docs/checkpoints.md's table whose first line is `header`."""
    lines = (ROOT / "docs" / "checkpoints.md").read_text().splitlines()
    assert header in lines, f"docs/checkpoints.md has no table headed {header!r}"
    start = lines.index(header)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_readme_family_table_is_the_registry() -> None:
    want = readme_table().splitlines()
    assert _readme_table(want[0]) == want, "docs/checkpoints.md's family table differs from the registry: paste readme_table()"


def test_every_family_file_is_registered_once() -> None:
    modules = sorted(f.stem for f in FOLDER.glob("*.py") if f.stem not in ("__init__", "family"))
    registered = [type(f).__module__.rsplit(".", 1)[1] for f in FAMILIES]
    assert sorted(registered) == modules  # a file without its registry line (or a line without a file) fails here
    for fam in FAMILIES:
        assert (ROOT / fam.file).is_file()
        assert importlib.import_module(type(fam).__module__).FAMILY is fam
    assert len(set(HF_FAMILY_TYPES)) == len(HF_FAMILY_TYPES)  # one family per transformers model_type
    assert all(family_of_hf_type(t).hf_model_types.count(t) == 1 for t in HF_FAMILY_TYPES)


def test_readme_transformers_table_names_the_model_types_read() -> None:
    rows = _readme_table("| transformers class (model_type) | read as | written from a vitkit ViT with |")[2:]
    named = {t for row in rows for t in re.findall(r"`(\w+)`", re.search(r"\(([^()]*)\) \|", row).group(1))}
    assert named == set(HF_MODEL_TYPES) - {"vit"}


@pytest.mark.parametrize("kind", [k for f in FAMILIES for k in f.hf_shapes])
def test_the_option_that_marks_a_family_writes_its_class(kind: str) -> None:
    """A tiny ViT with exactly the options of `kind`'s class (its `hf_shapes`) is written as that class; the
    registry's order settles models that carry two families' marks."""
    shape = family_of_hf_type(kind).hf_shapes[kind]
    given = {k: v for k, v in shape.items() if v is not None}
    given |= {"layer_scale": 1e-5} if "layer_scale" in shape else {}
    given |= {"num_registers": 2} if "num_registers" in shape else {}
    plain = ViTConfig(img_size=32, patch_size=16, width=32, depth=1, num_heads=2, mlp_dim=64)
    assert hf_family(plain.replace(**given)) == kind
    assert hf_family(plain) is None  # transformers' ViTModel (formats/hf.py)
    # DeiT's and DINOv2's marks together: Dinov2Model's to write (which then names the distillation token it refuses)
    assert hf_family(plain.replace(distill_token=True, layer_scale=1e-5)) == "dinov2"


class _Trunk(Family):
    """A made-up family whose own repository saves timm's names under `trunk.` and whose code fixes 4 heads and
    ImageNet normalisation (what its files do not say)."""

    name, paper, marks = "Trunk", "-", "-"
    own_layout = "`trunk.`-prefixed state dicts"

    def is_own_layout(self, state: dict[str, torch.Tensor]) -> bool:
        return any(k.startswith("trunk.") for k in state)

    def from_own_layout(self, state: dict[str, torch.Tensor], meta: dict[str, Any], path: Path, choices: Choices
                        ) -> tuple[dict[str, torch.Tensor], dict[str, Any], str | None]:
        out = {k.removeprefix("trunk."): v for k, v in state.items()}
        meta = {**meta, "model_args": {"num_heads": 4}, "pretrained_cfg": {"mean": (0.485, 0.456, 0.406),
                                                                           "std": (0.229, 0.224, 0.225)}}
        return out, meta, None


def test_a_new_family_is_one_class_and_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new family file declares is all the loaders need: a file in the made-up family's own layout, whose
    width (64) is none of Table 1's (so the head count is not in the file), loads with its family's head count and
    preprocessing, and gives the original model's outputs; without the registry entry it is refused."""
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(img_size=32, patch_size=8, width=64, depth=2, num_heads=4, mlp_dim=128,
                                        num_classes=5, ln_eps=1e-6, gelu="exact")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    path = tmp_path / "trunk.pth"
    torch.save({f"trunk.{k}": v for k, v in model.state_dict().items()}, path)
    with pytest.raises(ValueError, match="missing tensor .patch_embed.proj.weight."):  # a layout nobody reads
        vitkit.load_pretrained(path)
    monkeypatch.setattr(families, "FAMILIES", (*families.FAMILIES, _Trunk()))
    got = vitkit.load_pretrained(path)
    assert got.config.num_heads == 4 and got.preprocess.mean == (0.485, 0.456, 0.406)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(got(x), model(x), rtol=0, atol=1e-6)
