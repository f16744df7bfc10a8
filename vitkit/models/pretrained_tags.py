"""timm's pretrained tags of the names vitkit builds, as data: one line per `name.tag`, in timm's order of preference
(the first line of a name is its default tag, as timm's `generate_default_cfgs` picks it: the first tag with
weights), with the weights' license and, where it is not `timm/<name>.<tag>`, the hub repo timm loads them from
(`*_clip_quickgelu_*` names read the weights of the name without `quickgelu`). A repo of "-" means timm lists the tag
without weights. Facts read from timm's `default_cfgs` (timm/models/vision_transformer.py, deit.py,
vision_transformer_hybrid.py); tags timm fetches from other URLs than the hub are left out.

`create_model(name, pretrained=True)` (models/registry.py) fetches the repo through vitkit.load_pretrained's hub
support (formats/hub.py); `list_pretrained(pattern)` lists the `name.tag` pairs.
"""

from __future__ import annotations

import fnmatch
from typing import NamedTuple

# name.tag                                               license       hub repo (blank: timm/<name>.<tag>)
TABLE = """
vit_base_patch16_224.augreg2_in21k_ft_in1k               apache-2.0
vit_base_patch16_224.augreg_in21k_ft_in1k                apache-2.0
vit_base_patch16_224.orig_in21k_ft_in1k                  apache-2.0
vit_base_patch16_224.augreg_in1k                         apache-2.0
vit_base_patch16_224.orig_in21k                          apache-2.0
vit_base_patch16_224.augreg_in21k                        apache-2.0
vit_base_patch16_224.sam_in1k                            apache-2.0
vit_base_patch16_224.dino                                apache-2.0
vit_base_patch16_224.mae                                 cc-by-nc-4.0
vit_base_patch8_224.augreg2_in21k_ft_in1k                apache-2.0
vit_base_patch8_224.augreg_in21k_ft_in1k                 apache-2.0
vit_base_patch8_224.augreg_in21k                         apache-2.0
vit_base_patch8_224.dino                                 apache-2.0
vit_tiny_patch16_224.augreg_in21k_ft_in1k                apache-2.0
vit_tiny_patch16_224.augreg_in21k                        apache-2.0
vit_tiny_patch16_384.augreg_in21k_ft_in1k                apache-2.0
vit_small_patch32_224.augreg_in21k_ft_in1k               apache-2.0
vit_small_patch32_224.augreg_in21k                       apache-2.0
vit_small_patch32_384.augreg_in21k_ft_in1k               apache-2.0
vit_small_patch16_224.augreg_in21k_ft_in1k               apache-2.0
vit_small_patch16_224.augreg_in1k                        apache-2.0
vit_small_patch16_224.augreg_in21k                       apache-2.0
vit_small_patch16_224.dino                               apache-2.0
vit_small_patch16_384.augreg_in21k_ft_in1k               apache-2.0
vit_small_patch16_384.augreg_in1k                        apache-2.0
vit_base_patch32_224.augreg_in21k_ft_in1k                apache-2.0
vit_base_patch32_224.augreg_in1k                         apache-2.0
vit_base_patch32_224.orig_in21k                          apache-2.0
vit_base_patch32_224.augreg_in21k                        apache-2.0
vit_base_patch32_224.sam_in1k                            apache-2.0
vit_base_patch32_384.augreg_in21k_ft_in1k                apache-2.0
vit_base_patch32_384.augreg_in1k                         apache-2.0
vit_base_patch16_384.augreg_in21k_ft_in1k                apache-2.0
vit_base_patch16_384.orig_in21k_ft_in1k                  apache-2.0
vit_base_patch16_384.augreg_in1k                         apache-2.0
vit_large_patch16_224.augreg_in21k_ft_in1k               apache-2.0
vit_large_patch16_224.orig_in21k                         apache-2.0
vit_large_patch16_224.augreg_in21k                       apache-2.0
vit_large_patch16_224.mae                                cc-by-nc-4.0
vit_large_patch16_384.augreg_in21k_ft_in1k               apache-2.0
vit_large_patch32_384.orig_in21k_ft_in1k                 apache-2.0
vit_huge_patch14_224.orig_in21k                          apache-2.0
vit_huge_patch14_224.mae                                 cc-by-nc-4.0
vit_large_patch32_224.orig_in21k                         apache-2.0
vit_small_patch8_224.dino                                apache-2.0
vit_small_patch14_dinov2.lvd142m                         apache-2.0
vit_base_patch14_dinov2.lvd142m                          apache-2.0
vit_large_patch14_dinov2.lvd142m                         apache-2.0
vit_small_patch14_reg4_dinov2.lvd142m                    apache-2.0
vit_base_patch14_reg4_dinov2.lvd142m                     apache-2.0
vit_large_patch14_reg4_dinov2.lvd142m                    apache-2.0
vit_base_patch32_clip_224.laion2b_ft_in12k_in1k          apache-2.0
vit_base_patch32_clip_224.laion2b_ft_in1k                apache-2.0
vit_base_patch32_clip_224.openai_ft_in1k                 apache-2.0
vit_base_patch32_clip_224.laion2b                        apache-2.0
vit_base_patch32_clip_224.laion400m_e32                  mit
vit_base_patch32_clip_224.datacompxl                     apache-2.0
vit_base_patch32_clip_224.metaclip_2pt5b                 cc-by-nc-4.0
vit_base_patch32_clip_224.metaclip_400m                  cc-by-nc-4.0
vit_base_patch32_clip_224.openai                         apache-2.0
vit_base_patch32_clip_384.laion2b_ft_in12k_in1k          apache-2.0
vit_base_patch32_clip_384.openai_ft_in12k_in1k           apache-2.0
vit_base_patch32_clip_448.laion2b_ft_in12k_in1k          apache-2.0
vit_base_patch16_clip_224.laion2b_ft_in12k_in1k          apache-2.0
vit_base_patch16_clip_224.openai_ft_in12k_in1k           apache-2.0
vit_base_patch16_clip_224.laion2b_ft_in1k                apache-2.0
vit_base_patch16_clip_224.openai_ft_in1k                 apache-2.0
vit_base_patch16_clip_224.laion2b_ft_in12k               apache-2.0
vit_base_patch16_clip_224.openai_ft_in12k                apache-2.0
vit_base_patch16_clip_224.laion2b                        apache-2.0
vit_base_patch16_clip_224.laion400m_e32                  mit
vit_base_patch16_clip_224.datacompxl                     apache-2.0
vit_base_patch16_clip_224.dfn2b                          apple-ascl
vit_base_patch16_clip_224.metaclip_2pt5b                 cc-by-nc-4.0
vit_base_patch16_clip_224.metaclip_400m                  cc-by-nc-4.0
vit_base_patch16_clip_224.openai                         apache-2.0
vit_base_patch16_clip_384.laion2b_ft_in12k_in1k          apache-2.0
vit_base_patch16_clip_384.openai_ft_in12k_in1k           apache-2.0
vit_base_patch16_clip_384.laion2b_ft_in1k                apache-2.0
vit_base_patch16_clip_384.openai_ft_in1k                 apache-2.0
vit_large_patch14_clip_224.laion2b_ft_in12k_in1k         apache-2.0
vit_large_patch14_clip_224.openai_ft_in12k_in1k          apache-2.0
vit_large_patch14_clip_224.laion2b_ft_in1k               apache-2.0
vit_large_patch14_clip_224.openai_ft_in1k                apache-2.0
vit_large_patch14_clip_224.laion2b_ft_in12k              apache-2.0
vit_large_patch14_clip_224.openai_ft_in12k               apache-2.0
vit_large_patch14_clip_224.laion2b                       apache-2.0
vit_large_patch14_clip_224.laion400m_e32                 mit
vit_large_patch14_clip_224.datacompxl                    apache-2.0
vit_large_patch14_clip_224.dfn2b_s39b                    apple-ascl
vit_large_patch14_clip_224.dfn2b                         apple-ascl
vit_large_patch14_clip_224.metaclip_2pt5b                cc-by-nc-4.0
vit_large_patch14_clip_224.metaclip_400m                 cc-by-nc-4.0
vit_large_patch14_clip_224.openai                        apache-2.0
vit_large_patch14_clip_224.apple_mclip2_dfndr2b          apple-amlr
vit_large_patch14_clip_336.laion2b_ft_in12k_in1k         apache-2.0
vit_large_patch14_clip_336.openai_ft_in12k_in1k          apache-2.0
vit_large_patch14_clip_336.laion2b_ft_in1k               apache-2.0
vit_large_patch14_clip_336.openai                        apache-2.0
vit_huge_patch14_clip_224.laion2b_ft_in12k_in1k          apache-2.0
vit_huge_patch14_clip_224.laion2b_ft_in1k                apache-2.0
vit_huge_patch14_clip_224.laion2b_ft_in12k               apache-2.0
vit_huge_patch14_clip_224.laion2b                        apache-2.0
vit_huge_patch14_clip_224.dfn5b                          apple-ascl
vit_huge_patch14_clip_224.metaclip2_worldwide            cc-by-nc-4.0
vit_huge_patch14_clip_224.metaclip_2pt5b                 cc-by-nc-4.0
vit_huge_patch14_clip_224.metaclip_altogether            cc-by-nc-4.0
vit_huge_patch14_clip_336.laion2b_ft_in12k_in1k          apache-2.0
vit_giant_patch14_clip_224.laion2b                       apache-2.0
vit_gigantic_patch14_clip_224.laion2b                    apache-2.0
vit_gigantic_patch14_clip_224.metaclip2_worldwide        cc-by-nc-4.0
vit_gigantic_patch14_clip_224.metaclip_2pt5b             cc-by-nc-4.0
vit_base_patch16_plus_clip_240.laion400m_e32             mit
vit_base_patch32_clip_256.datacompxl                     apache-2.0
vit_huge_patch14_clip_378.dfn5b                          apple-ascl
vit_huge_patch14_clip_378.metaclip2_worldwide            cc-by-nc-4.0
vit_gigantic_patch14_clip_378.metaclip2_worldwide        cc-by-nc-4.0
vit_base_patch32_siglip_256.v2_webli                     apache-2.0
vit_base_patch16_siglip_224.v2_webli                     apache-2.0
vit_base_patch16_siglip_224.webli                        apache-2.0
vit_base_patch16_siglip_256.v2_webli                     apache-2.0
vit_base_patch16_siglip_256.webli                        apache-2.0
vit_base_patch16_siglip_256.webli_i18n                   apache-2.0
vit_base_patch16_siglip_384.v2_webli                     apache-2.0
vit_base_patch16_siglip_384.webli                        apache-2.0
vit_base_patch16_siglip_512.v2_webli                     apache-2.0
vit_base_patch16_siglip_512.webli                        apache-2.0
vit_large_patch16_siglip_256.v2_webli                    apache-2.0
vit_large_patch16_siglip_256.webli                       apache-2.0
vit_large_patch16_siglip_384.v2_webli                    apache-2.0
vit_large_patch16_siglip_384.webli                       apache-2.0
vit_large_patch16_siglip_512.v2_webli                    apache-2.0
vit_so400m_patch14_siglip_224.v2_webli                   apache-2.0
vit_so400m_patch14_siglip_224.webli                      apache-2.0
vit_so400m_patch14_siglip_378.v2_webli                   apache-2.0
vit_so400m_patch14_siglip_378.webli                      apache-2.0
vit_so400m_patch14_siglip_378.webli_ft_in1k              apache-2.0
vit_so400m_patch14_siglip_384.webli                      apache-2.0
vit_so400m_patch16_siglip_256.v2_webli                   apache-2.0
vit_so400m_patch16_siglip_256.webli_i18n                 apache-2.0
vit_so400m_patch16_siglip_384.v2_webli                   apache-2.0
vit_so400m_patch16_siglip_512.v2_webli                   apache-2.0
vit_giantopt_patch16_siglip_256.v2_webli                 apache-2.0
vit_giantopt_patch16_siglip_384.v2_webli                 apache-2.0
vit_xsmall_patch16_clip_224.tinyclip_yfcc15m             mit
vit_medium_patch32_clip_224.tinyclip_laion400m           mit
vit_medium_patch16_clip_224.tinyclip_yfcc15m             mit
vit_betwixt_patch32_clip_224.tinyclip_laion400m          mit
deit_tiny_patch16_224.fb_in1k                            apache-2.0
deit_small_patch16_224.fb_in1k                           apache-2.0
deit_base_patch16_224.fb_in1k                            apache-2.0
deit_base_patch16_384.fb_in1k                            apache-2.0
deit_tiny_distilled_patch16_224.fb_in1k                  apache-2.0
deit_small_distilled_patch16_224.fb_in1k                 apache-2.0
deit_base_distilled_patch16_224.fb_in1k                  apache-2.0
deit_base_distilled_patch16_384.fb_in1k                  apache-2.0
deit3_small_patch16_224.fb_in1k                          apache-2.0
deit3_small_patch16_224.fb_in22k_ft_in1k                 apache-2.0
deit3_small_patch16_384.fb_in1k                          apache-2.0
deit3_small_patch16_384.fb_in22k_ft_in1k                 apache-2.0
deit3_medium_patch16_224.fb_in1k                         apache-2.0
deit3_medium_patch16_224.fb_in22k_ft_in1k                apache-2.0
deit3_base_patch16_224.fb_in1k                           apache-2.0
deit3_base_patch16_224.fb_in22k_ft_in1k                  apache-2.0
deit3_base_patch16_384.fb_in1k                           apache-2.0
deit3_base_patch16_384.fb_in22k_ft_in1k                  apache-2.0
deit3_large_patch16_224.fb_in1k                          apache-2.0
deit3_large_patch16_224.fb_in22k_ft_in1k                 apache-2.0
deit3_large_patch16_384.fb_in1k                          apache-2.0
deit3_large_patch16_384.fb_in22k_ft_in1k                 apache-2.0
deit3_huge_patch14_224.fb_in1k                           apache-2.0
deit3_huge_patch14_224.fb_in22k_ft_in1k                  apache-2.0
vit_small_r26_s32_224.augreg_in21k_ft_in1k               apache-2.0
vit_small_r26_s32_224.augreg_in21k                       apache-2.0
vit_small_r26_s32_384.augreg_in21k_ft_in1k               apache-2.0
vit_base_r50_s16_384.orig_in21k_ft_in1k                  apache-2.0
vit_large_r50_s32_224.augreg_in21k_ft_in1k               apache-2.0
vit_large_r50_s32_224.augreg_in21k                       apache-2.0
vit_large_r50_s32_384.augreg_in21k_ft_in1k               apache-2.0
vit_base_r50_s16_224.orig_in21k                          apache-2.0
vit_base_patch32_clip_quickgelu_224.laion400m_e32        mit           timm/vit_base_patch32_clip_224.laion400m_e32
vit_base_patch32_clip_quickgelu_224.metaclip_2pt5b       cc-by-nc-4.0  timm/vit_base_patch32_clip_224.metaclip_2pt5b
vit_base_patch32_clip_quickgelu_224.metaclip_400m        cc-by-nc-4.0  timm/vit_base_patch32_clip_224.metaclip_400m
vit_base_patch32_clip_quickgelu_224.openai               apache-2.0    timm/vit_base_patch32_clip_224.openai
vit_large_patch14_clip_quickgelu_224.dfn2b               apple-ascl    timm/vit_large_patch14_clip_224.dfn2b
vit_large_patch14_clip_quickgelu_224.metaclip_2pt5b      cc-by-nc-4.0  timm/vit_large_patch14_clip_224.metaclip_2pt5b
vit_large_patch14_clip_quickgelu_224.metaclip_400m       cc-by-nc-4.0  timm/vit_large_patch14_clip_224.metaclip_400m
vit_large_patch14_clip_quickgelu_224.openai              apache-2.0    timm/vit_large_patch14_clip_224.openai
vit_huge_patch14_clip_quickgelu_224.dfn5b                apple-ascl    timm/vit_huge_patch14_clip_224.dfn5b
vit_huge_patch14_clip_quickgelu_224.metaclip2_worldwide  cc-by-nc-4.0  timm/vit_huge_patch14_clip_224.metaclip2_worldwide
vit_huge_patch14_clip_quickgelu_224.metaclip_2pt5b       cc-by-nc-4.0  timm/vit_huge_patch14_clip_224.metaclip_2pt5b
vit_huge_patch14_clip_quickgelu_378.dfn5b                apple-ascl    timm/vit_huge_patch14_clip_378.dfn5b
vit_base_patch16_clip_quickgelu_224.metaclip_2pt5b       cc-by-nc-4.0  timm/vit_base_patch16_clip_224.metaclip_2pt5b
vit_base_patch16_clip_quickgelu_224.metaclip_400m        cc-by-nc-4.0  timm/vit_base_patch16_clip_224.metaclip_400m
vit_base_patch16_clip_quickgelu_224.openai               apache-2.0    timm/vit_base_patch16_clip_224.openai
vit_gigantic_patch14_clip_quickgelu_224.metaclip_2pt5b   cc-by-nc-4.0  timm/vit_gigantic_patch14_clip_224.metaclip_2pt5b
vit_large_patch14_clip_quickgelu_336.openai              apache-2.0    timm/vit_large_patch14_clip_336.openai
vit_large_patch14_224.untrained                          -             -
vit_base_r26_s32_224.untrained                           -             -
"""


class Pretrained(NamedTuple):
    """One tag of a name: `hf_hub_id` is None where timm lists the tag without weights."""

    name: str
    tag: str
    hf_hub_id: str | None
    license: str | None


def _rows() -> dict[str, list[Pretrained]]:
    rows: dict[str, list[Pretrained]] = {}
    for line in TABLE.strip().splitlines():
        key, lic, *repo = line.split()
        name, tag = key.split(".", 1)
        hub = None if repo == ["-"] else (repo[0] if repo else f"timm/{key}")
        rows.setdefault(name, []).append(Pretrained(name, tag, hub, None if lic == "-" else lic))
    return rows


PRETRAINED = _rows()


def list_pretrained(pattern: str = "*") -> list[str]:
    """The `name.tag` pairs with weights whose spelling matches a shell-style pattern (`"*dinov2*"`), in the table's
    order."""
    return [f"{p.name}.{p.tag}" for rows in PRETRAINED.values() for p in rows
            if p.hf_hub_id and fnmatch.fnmatch(f"{p.name}.{p.tag}", pattern.lower())]


def pretrained_tag(name: str) -> Pretrained:
    """The entry of `name` ("name.tag", or "name" for its default tag), or a ValueError naming what is known."""
    base, _, tag = name.strip().lower().partition(".")
    rows = PRETRAINED.get(base)
    if rows is None:
        raise ValueError(f"create_model({name!r}, pretrained=True): no pretrained tags are listed for {base!r}; "
                         "pretrained=True takes timm's names of the models vitkit builds (vitkit.list_pretrained()), "
                         "a local checkpoint loads with vitkit.load_pretrained(path)")
    with_weights = [p.tag for p in rows if p.hf_hub_id]
    pick = next((p for p in rows if p.tag == tag), None) if tag else rows[0]
    if pick is None:
        raise ValueError(f"create_model({name!r}, pretrained=True): {base} has no tag {tag!r}; its tags: "
                         f"{', '.join(with_weights)}")
    if pick.hf_hub_id is None:
        raise ValueError(f"create_model({name!r}, pretrained=True): timm lists {base}.{pick.tag} without weights"
                         f"{' (its default tag)' if not tag else ''}; tags with weights: "
                         f"{', '.join(with_weights) or 'none'}")
    return pick
