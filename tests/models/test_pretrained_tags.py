"""`create_model(name, pretrained=True)` with timm's names and tags (issue #52): the table of tags
(models/pretrained_tags.py) and its resolution to timm's hub repos, fetched from a hub endpoint on 127.0.0.1
serving timm-layout repos (tests/fixtures/timm_hub, written by timm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.hub_endpoint import FakeHub, folder_files, hub_fixture  # noqa: F401 - the `hub` fixture
from vitkit.models.pretrained_tags import PRETRAINED, pretrained_tag
from vitkit.models.registry import _REGISTRY, canonical_name

TIMM_HUB = Path(__file__).parents[1] / "fixtures" / "timm_hub"


def test_the_table_names_timms_tags_and_repos() -> None:
    # every name is one vitkit builds; its first line is its default tag; repos are timm's spelling
    for name, rows in PRETRAINED.items():
        assert canonical_name(name) in _REGISTRY, name
        assert all(r.name == name for r in rows) and len({r.tag for r in rows}) == len(rows), name
        for r in rows:
            if r.hf_hub_id and "_quickgelu_" not in name and r.hf_hub_id.startswith("timm/"):
                assert r.hf_hub_id == f"timm/{name}.{r.tag}"
            if "_quickgelu_" in name and r.hf_hub_id:  # timm reads the weights of the name without quickgelu
                assert r.hf_hub_id == f"timm/{name.replace('_clip_quickgelu_', '_clip_')}.{r.tag}"
    # the tags timm itself wrote into the fixtures' hub folders (tests/fixtures/timm_hub/reference.json) are listed,
    # with the license timm's config.json carries
    ref = json.loads((TIMM_HUB / "reference.json").read_text())["folders"]
    for folder, doc in ref.items():
        entry = pretrained_tag(doc["hub"])
        assert f"{entry.name}.{entry.tag}" == doc["hub"] and entry.hf_hub_id == f"timm/{doc['hub']}"
        cfg = json.loads((TIMM_HUB / folder / "config.json").read_text())
        assert entry.license == cfg["pretrained_cfg"]["license"] and entry.tag == cfg["pretrained_cfg"]["tag"]
    # defaults as timm picks them (the first tag with weights)
    for name, tag in (("vit_small_patch14_dinov2", "lvd142m"), ("vit_base_patch16_224", "augreg2_in21k_ft_in1k"),
                      ("vit_base_patch16_siglip_224", "v2_webli"), ("deit3_base_patch16_224", "fb_in1k")):
        assert pretrained_tag(name).tag == tag, name
    assert vitkit.list_pretrained("*dinov2*") == [
        f"vit_{s}_patch14{r}_dinov2.lvd142m" for r in ("", "_reg4") for s in ("small", "base", "large")]
    # what cannot be answered is named
    for name, match in (("vit_small_patch14_dinov2.nope", "has no tag 'nope'; its tags: lvd142m"),
                        ("vit_large_patch14_224", "without weights \\(its default tag\\)"),
                        ("vit_b16", "no pretrained tags are listed for 'vit_b16'")):
        with pytest.raises(ValueError, match=match):
            vitkit.create_model(name, pretrained=True)


@pytest.mark.parametrize("name, folder, repo", [
    ("vit_small_patch14_dinov2", "dinov2", "timm/vit_small_patch14_dinov2.lvd142m"),
    ("vit_base_patch16_clip_224.openai", "clip", "timm/vit_base_patch16_clip_224.openai"),
    ("vit_base_patch16_clip_quickgelu_224.openai", "clip", "timm/vit_base_patch16_clip_224.openai"),
])
def test_create_model_pretrained_fetches_the_repo_timm_uses(hub: FakeHub, name: str, folder: str, repo: str) -> None:
    files = folder_files(TIMM_HUB / folder)
    hub.add(repo, files)
    m = vitkit.create_model(name, pretrained=True)
    assert {path.split("/resolve/")[0] for _, path in hub.requests if "/resolve/" in path} == {f"/{repo}"}
    direct = vitkit.load_pretrained(TIMM_HUB / folder, gelu=m.config.gelu)
    x = torch.randn(1, 3, *m.config.img_size)
    with torch.no_grad():
        torch.testing.assert_close(m(x), direct(x), rtol=0, atol=0)
    assert m.config.gelu == ("quick" if "quickgelu" in name else "exact")
    cfg = m.pretrained_cfg
    tag = json.loads(files["config.json"])["pretrained_cfg"]["tag"]
    assert (cfg["tag"], cfg["hf_hub_id"], cfg["license"]) == (tag, repo, "apache-2.0")
    # §3.2 adaptations are taken; an architecture change is not
    k = vitkit.create_model(name, pretrained=True, num_classes=5)
    assert k.config.num_classes == 5


def test_a_saved_hf_or_timm_folder_carries_a_model_card(hub: FakeHub, tmp_path: Path) -> None:
    """save_pretrained writes README.md with the hub's metadata (read back with huggingface_hub's own parser): the
    library, the task, and the license and base model of weights that came by name; a README of the user's stays."""
    from huggingface_hub.repocard import metadata_load

    repo = "timm/vit_small_patch14_dinov2.lvd142m"
    hub.add(repo, folder_files(TIMM_HUB / "dinov2"))
    m = vitkit.create_model("vit_small_patch14_dinov2", pretrained=True)
    assert m.pretrained_cfg["revision"] == hub.refs[repo]["main"]  # the commit the weights were read at
    for fmt in ("timm", "hf"):
        out = m.save_pretrained(tmp_path / fmt, format=fmt)
        meta = metadata_load(out / "README.md")
        assert (meta["library_name"], meta["license"], meta["base_model"], meta["pipeline_tag"]) == (
            "vitkit", "apache-2.0", repo, "image-feature-extraction")
        assert "vision-transformer" in meta["tags"] and ("timm" in meta["tags"]) == (fmt == "timm")
        card = (out / "README.md").read_text()
        assert "3 x 518 x 518" in card and "(tag lvd142m)" in card
        torch.testing.assert_close(vitkit.load_pretrained(out).pos_embed, m.pos_embed)  # the card changes no load
    (tmp_path / "hf" / "README.md").write_text("my own card\n")
    m.save_pretrained(tmp_path / "hf", format="hf")
    assert (tmp_path / "hf" / "README.md").read_text() == "my own card\n"
    # a model of no known origin: no license or base model is claimed
    plain = vitkit.create_model("vit", img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64,
                                num_classes=3)
    meta = metadata_load(plain.save_pretrained(tmp_path / "plain", format="hf") / "README.md")
    assert "license" not in meta and "base_model" not in meta and meta["pipeline_tag"] == "image-classification"
