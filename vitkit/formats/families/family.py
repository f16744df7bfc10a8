"""What a checkpoint family is to vitkit (`Family`), and the transformers key names the families share.

A family (DINOv2, CLIP, SigLIP, ...) is a ViT variant published with its own checkpoints, in up to three layouts:
timm's state dicts (read from the tensor shapes by formats/timm.py), transformers' classes (formats/hf_families.py)
and its own repository's. Each family is one subclass of `Family` in this folder that holds everything particular
to it: the `ViTConfig` options that mark it, what timm's builders set in code for it, its key maps, its
preprocessing defaults and its writers. The loaders and writers of formats/ ask the registry (families/__init__.py)
and call these hooks; a hook a family does not override says "this family has no such layout".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from vitkit.formats.common import HF_ACTS, Choices, KeyTable, config_count
from vitkit.models.timm_families import BY_FAMILY
from vitkit.models.vit import VisionTransformer, ViTConfig

ACTS = {**HF_ACTS, "quick_gelu": "quick"}  # a family's hidden_act -> vitkit's GELU (CLIP's QuickGELU too)

# What a plain ViT (transformers' ViTModel) has; each family's transformers class changes some of it (`hf_shapes`).
PLAIN = {"pooling": "token", "class_token": True, "posemb": "learn1d", "posemb_placement": "input", "block": "global",
         "num_registers": 0, "distill_token": False, "fc_norm": False, "layer_scale": None, "pre_norm": False,
         "patch_bias": True, "representation_size": None, "resnet_layers": None}

# transformers' per-block module names (relative to the block prefix) -> vitkit's, by layout
VIT_BLOCK = {"layernorm_before": "norm1", "attention.attention.query": "q", "attention.attention.key": "k",
             "attention.attention.value": "v", "attention.output.dense": "attn.proj", "layernorm_after": "norm2",
             "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
VIT_BLOCK_CURRENT = {"layernorm_before": "norm1", "attention.q_proj": "q", "attention.k_proj": "k",
                     "attention.v_proj": "v", "attention.o_proj": "attn.proj", "layernorm_after": "norm2",
                     "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
CLIP_BLOCK = {"layer_norm1": "norm1", "self_attn.q_proj": "q", "self_attn.k_proj": "k", "self_attn.v_proj": "v",
              "self_attn.out_proj": "attn.proj", "layer_norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}


@dataclass
class HFRead:
    """What a family's transformers reader found: the config, where its modules are (`base`), whether the blocks
    are in transformers 5's layout (`current`), and file tensors the model does not use (`ignore`)."""

    cfg: ViTConfig
    base: str
    current: bool = False
    ignore: set[str] = field(default_factory=set)


class Family:
    """One checkpoint family: its README row (the class attributes) and a hook per layout it ships in."""

    name: ClassVar[str]  # as people say it ("DINOv2")
    paper: ClassVar[str]  # the work that defines it
    marks: ClassVar[str]  # the ViTConfig options that make a vitkit ViT one of this family
    timm_names: ClassVar[str] = ""  # timm's architecture names of its checkpoints ("" : none)
    own_layout: ClassVar[str] = ""  # its own repository's checkpoint layout, read by `from_own_layout` ("": none)
    hf_model_types: ClassVar[tuple[str, ...]] = ()  # transformers' config.json model_types read by `hf_read`
    # what timm's builders of the family set in code (a hub config's model_args does not repeat it), by a substring
    # of the architecture name
    timm_builder_args: ClassVar[tuple[tuple[str, dict[str, Any]], ...]] = ()
    # model_type -> the option values transformers' class holds beside PLAIN's (None: any value)
    hf_shapes: ClassVar[dict[str, dict[str, Any]]] = {}
    hf_square_only: ClassVar[bool] = True  # whether the class's config.json holds a square image_size only
    # where its transformers classes keep the image model: a task class's backbone (DeiTForImageClassification-
    # WithTeacher's `deit.`), a dual encoder's image tower (CLIPModel's `vision_model.`); a bare model's is the top
    hf_bases: ClassVar[tuple[str, ...]] = ()
    # whether the family's own code resamples E_pos from the checkpoint's table for every input size (transformers'
    # Dinov2Model and DINOv2's repository on each forward): a vitkit model of it then keeps the table as it came
    # (`ViTConfig.posemb_grid`), resamples from it once per input size and saves it back unchanged
    keeps_table: ClassVar[bool] = False

    def option_parts(self, cfg: ViTConfig) -> list[str]:
        """The family's options `cfg` has, as a writer that cannot hold them names them (empty: none)."""
        return []

    @property
    def key(self) -> str:
        """The family's name in code: its file's ("dinov2"), which keys its timm names in the model layer."""
        return type(self).__module__.rsplit(".", 1)[1]

    @property
    def timm_specs(self) -> dict[str, Any]:
        """timm's names of the family's checkpoints that vitkit builds: {name: (ViTConfig fields, pretrained
        config)}, the family's section of models/timm_families.py."""
        return BY_FAMILY.get(self.key, {})

    def pooled_feature(self, cfg: Any) -> tuple[str, str] | None:
        """The feature (vitkit.inference.features.FEATURES) the family's own library calls a model's pooled output,
        with a note on how the file decided it, where that is not the head's input (None: it is)."""
        return None

    @property
    def file(self) -> str:
        """The family's file, relative to the repository root (the family table of docs/checkpoints.md names it)."""
        return type(self).__module__.replace(".", "/") + ".py"

    # --- timm's layout ----------------------------------------------------------------------------------------
    def timm_architecture(self, cfg: ViTConfig) -> str | None:
        """The timm builder a hub folder of `cfg` names when it is of this family (None: not this family's)."""
        return None

    def timm_ln_eps(self, arch: str, args: dict[str, Any], pre_norm: bool) -> float | None:
        """The LayerNorm eps the family's builder sets in code, for a file of timm architecture `arch` with
        `model_args` `args` (None: not this family's file, or timm's default)."""
        return None

    def timm_fields(self, state: dict[str, torch.Tensor], args: dict[str, Any], path: Path, choices: Choices
                    ) -> dict[str, Any]:
        """The ViTConfig fields the family's parts in a timm state dict determine (`args`: the builder's model_args,
        the file's own first), refused by name where they do not fit; {}: the file has none of its parts."""
        return {}

    def timm_defaults(self, parts: dict[str, Any]) -> dict[str, tuple[Any, str]]:
        """{hint: (value, why)} the family's timm builders take in code for a model with `parts` (ViTConfig fields
        read from the tensors), where a file does not say; {}: not the family's model."""
        return {}

    def timm_write_problems(self, cfg: ViTConfig) -> list[str]:
        """What of the family's options timm's VisionTransformer cannot hold in a model of `cfg` (empty: nothing)."""
        return []

    # --- the family's own repository's layout (a state dict read through timm's loader) ---------------------------
    def is_own_layout(self, state: dict[str, torch.Tensor]) -> bool:
        return False

    def from_own_layout(self, state: dict[str, torch.Tensor], meta: dict[str, Any], path: Path, choices: Choices
                        ) -> tuple[dict[str, torch.Tensor], dict[str, Any], str | None]:
        """(timm's state dict, timm hub metadata, E_pos resampling or None) of a file in the family's own layout."""
        raise NotImplementedError(f"{self.name} has no layout of its own")

    # --- transformers' layout ---------------------------------------------------------------------------------
    def hf_vision_config(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The config of the image model within config.json `doc` (a dual encoder's `vision_config`)."""
        return doc

    def hf_read(self, kind: str, vc: dict[str, Any], src: dict[str, torch.Tensor], common: dict[str, Any],
                choices: Choices, wpath: Path) -> HFRead:
        """The ViTConfig of a transformers `kind` folder (vision config `vc`, tensors `src`, which the reader may
        reshape in place to vitkit's shapes); `common`: the ViTConfig fields every family reads alike."""
        raise NotImplementedError(f"{self.name} has no transformers class")

    def hf_table(self, kind: str, cfg: ViTConfig, base: str = "", current: bool = False) -> KeyTable:
        """(vitkit key, transformers key, kind) of every tensor of a `kind` model shaped as `cfg`, its modules under
        `base`; `current`: transformers 5's block names. Where transformers' tensor has another shape, the table
        names it as vitkit holds it: the reader and `hf_tensors` convert."""
        raise NotImplementedError(f"{self.name} has no transformers class")

    def hf_kind(self, cfg: ViTConfig) -> str | None:
        """The model_type a vitkit ViT of `cfg` is written as, when the family's transformers class is its class."""
        return None

    def hf_class_name(self, kind: str, cfg: ViTConfig) -> str:
        raise NotImplementedError(f"{self.name} has no transformers class")

    def hf_write_base(self, kind: str, cfg: ViTConfig) -> str:
        """Where the written folder keeps the modules ("vision_model.", "deit." ...)."""
        return ""

    def hf_problems(self, kind: str, model: VisionTransformer) -> list[str]:
        """What keeps `model` from being the class, beyond `hf_shapes` (empty: nothing)."""
        return []

    def hf_config(self, kind: str, model: VisionTransformer) -> dict[str, Any]:
        """config.json's family fields (beside the sizes every class shares)."""
        return {}

    def hf_tensors(self, kind: str, cfg: ViTConfig, base: str, out: dict[str, torch.Tensor]) -> None:
        """Bring the written tensors `out` (transformers' keys, vitkit's shapes) to transformers' shapes, in place."""

    def hf_resample(self, kind: str) -> str:
        """How transformers' class resamples E_pos to other input sizes (a `posemb_resample` value)."""
        return "bicubic"

    # --- peft's LoRA adapters on the family's transformers class (formats/adapters.py) --------------------------
    def peft_modules(self, kind: str, layout: str) -> tuple[str, dict[str, str]] | None:
        """(module prefix of block i, {vitkit block module: transformers module}) of the Linears peft's LoRA names
        on transformers' class `kind`, in `layout` ("classic": transformers 4's names, "current": 5's); None:
        vitkit writes and reads no peft adapters for it."""
        return None


# ----------------------------------------------------------------------------- shared by the families' readers
def block_table(cfg: ViTConfig, prefix: str, names: dict[str, str]) -> KeyTable:
    """(vitkit key, HF key, kind) of every block tensor; q/k/v are chunks of vitkit's fused qkv."""
    table: KeyTable = []
    for i in range(cfg.depth):
        for hf, ours in names.items():
            key = f"{prefix}{i}.{hf}"
            if ours in ("q", "k", "v"):
                params = ("weight", "bias") if cfg.qkv_bias else ("weight",)
                table += [(f"blocks.{i}.attn.qkv.{p}#{'qkv'.index(ours)}", f"{key}.{p}", "same") for p in params]
            elif ours.startswith("ls"):
                table.append((f"blocks.{i}.{ours}.gamma", f"{key}.lambda1", "same"))
            else:
                table += [(f"blocks.{i}.{ours}.{p}", f"{key}.{p}", "same") for p in ("weight", "bias")]
    return table


def find_base(state: dict[str, torch.Tensor], candidates: tuple[str, ...]) -> str:
    """The first of `candidates` under which the state has its embeddings ("" among them: none)."""
    return next((b for b in candidates if any(k.startswith(b + "embeddings.") for k in state)), "")


def count_layers(state: dict[str, torch.Tensor], prefix: str) -> int:
    return len({k[len(prefix):].split(".", 1)[0] for k in state if k.startswith(prefix)})


def intermediate_size(vc: dict[str, Any], wpath: Path) -> int:
    return config_count(vc, "intermediate_size", 3072, wpath)


def vit_style_embeddings(cfg: ViTConfig, base: str) -> list[tuple[str, str]]:
    """(vitkit key, HF key) of the embeddings and final LayerNorm of the ViT-style classes (ViT, DeiT, DINOv2)."""
    e = f"{base}embeddings."
    return [("cls_token", f"{e}cls_token"), ("pos_embed", f"{e}position_embeddings"),
            ("patch_embed.proj.weight", f"{e}patch_embeddings.projection.weight"),
            ("patch_embed.proj.bias", f"{e}patch_embeddings.projection.bias"),
            ("norm.weight", f"{base}layernorm.weight"), ("norm.bias", f"{base}layernorm.bias")]


def vit_style_read(src: dict[str, torch.Tensor], bases: tuple[str, ...], classic_only: bool = False
                   ) -> tuple[str, bool, int]:
    """(base, current layout?, depth) of a ViT-style folder whose modules are under one of `bases` (the family's
    `hf_bases`) or at the top; `classic_only`: a class transformers 5 did not rename."""
    base = find_base(src, (*bases, ""))
    current = not classic_only and not any(k.startswith(f"{base}encoder.layer.") for k in src)
    return base, current, count_layers(src, f"{base}layers." if current else f"{base}encoder.layer.")


def vit_style_table(cfg: ViTConfig, base: str, current: bool, pairs: list[tuple[str, str]]) -> KeyTable:
    """The table of a ViT-style class: its embeddings, `pairs` of its own, ViT's block names."""
    names, prefix = (VIT_BLOCK_CURRENT, f"{base}layers.") if current else (VIT_BLOCK, f"{base}encoder.layer.")
    return [(o, t, "same") for o, t in vit_style_embeddings(cfg, base) + pairs] + block_table(cfg, prefix, names)


def vision_tower_config(doc: dict[str, Any], dual: str) -> dict[str, Any]:
    """The vision tower's config: the document itself, or the dual encoder's (model_type `dual`) `vision_config`."""
    if doc["model_type"] == dual:
        vc = doc.get("vision_config")
        if not isinstance(vc, dict):
            raise ValueError(f"a {doc['model_type']} config.json without a vision_config")
        return vc
    return doc


def tower_read(src: dict[str, torch.Tensor], bases: tuple[str, ...], text: tuple[str, ...]
               ) -> tuple[str, int, set[str]]:
    """(base, depth, text-tower keys to ignore) of a CLIP-style vision tower, its E_pos given vitkit's batch axis."""
    base = find_base(src, (*bases, ""))
    src[f"{base}embeddings.position_embedding.weight"] = src[f"{base}embeddings.position_embedding.weight"][None]
    return base, count_layers(src, f"{base}encoder.layers."), {k for k in src if k.startswith(text)}


def tower_table(cfg: ViTConfig, base: str, pairs: list[tuple[str, str]]) -> KeyTable:
    """The table of a CLIP-style vision tower (CLIP, SigLIP): its embeddings, `pairs` of its own, CLIP's blocks."""
    e = f"{base}embeddings."
    pairs = [("pos_embed", f"{e}position_embedding.weight"), ("patch_embed.proj.weight", f"{e}patch_embedding.weight"),
             ("norm.weight", f"{base}post_layernorm.weight"), ("norm.bias", f"{base}post_layernorm.bias"), *pairs]
    return [(o, t, "same") for o, t in pairs] + block_table(cfg, f"{base}encoder.layers.", CLIP_BLOCK)
