"""DeiT III (Touvron et al. 2022, "DeiT III: Revenge of the ViT"): LayerScale on a ViT with a class token.

Only timm ships it (`deit3_*`); its builder sets LayerScale's init to 1e-6 in code (the hub config does not say)
and gives the class token no E_pos (`no_embed_class`, read by formats/timm.py as a zero class-token row).
transformers has no DeiT III class: `--to hf` writes it as `Dinov2Model`, the transformers class with LayerScale
(dinov2.py).
"""

from __future__ import annotations

from vitkit.formats.families.family import Family


class DeiT3(Family):
    name = "DeiT III"
    paper = "Touvron et al. 2022"
    marks = "`layer_scale`"
    timm_names = "`deit3_*`"
    timm_builder_args = (("deit3_", {"init_values": 1e-6}),)


FAMILY = DeiT3()
