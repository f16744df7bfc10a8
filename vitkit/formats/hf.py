"""Hugging Face `ViTModel` / `ViTForImageClassification` folders, read and written, and `ViTMSN[Model|
ForImageClassification]` (a plain ViT: the same keys and head), read; the other ViT families HF has, DeiT, DINOv2,
CLIP, SigLIP and ViTMAE, are read and written by hf_families.py with their files in formats/families/.

A folder holds `config.json` (model_type "vit" or "vit_msn") and `model.safetensors` or `pytorch_model.bin`
(read with `weights_only=True`), optionally `preprocessor_config.json`. Two key layouts exist:
transformers 4.x's `encoder.layer.N.attention.attention.query` ("classic") and 5.x's
`layers.N.attention.q_proj` ("current"); both are read, and files are written in the classic
layout, which every transformers version loads. The config's `layer_norm_eps` (HF default 1e-12)
and `hidden_act` (exact "gelu" by default) are honoured, so logits match transformers'.
HF's `pooler` (Dense + tanh on the class token) is the original's `pre_logits` layer.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from vitkit.formats.common import (
    ACT_NAMES,
    HF_ACTS,
    Choices,
    KeyTable,
    built_to_load,
    check_config_numbers,
    check_fits_weights,
    config_count,
    gather_state,
    label_fields,
    load_state_checked,
    read_tensors,
    resample_warning,
    run_at_input_size,
    split_chunks,
)
from vitkit.formats.families import HF_FAMILY_TYPES, variant_parts
from vitkit.formats.families.family import VIT_BLOCK, VIT_BLOCK_CURRENT
from vitkit.formats.hf_families import hf_family, is_family, load_hf_family, write_family
from vitkit.formats.sharded import (
    FINGERPRINT_KEY,
    INDEX_NAME,
    WEIGHTS_NAME,
    check_fingerprint,
    fingerprint,
    read_sharded,
    write_weights,
)
from vitkit.formats.writable import MERGED_KEY, check_consumed, table_keys, writable
from vitkit.models.preprocess import PreprocessConfig, exact_crop_pct
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils import to_pair
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import read_json

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = WEIGHTS_NAME  # formats/sharded.py owns the name
BIN_NAME = "pytorch_model.bin"
PREPROCESSOR_NAME = "preprocessor_config.json"
HF_MODEL_TYPES = ("vit", "vit_msn", *HF_FAMILY_TYPES)  # config.json model_types read here (ViTMSN is a plain ViT)
# and by the families' classes (formats/families/)

# Per-block module paths, relative to the block's prefix, for both layouts: the inverse of the family tables'
# transformers -> vitkit block names (families/family.py), so the plain ViT's names are written once
BLOCK_KEYS: dict[str, dict[str, str]] = {
    layout: {"prefix": prefix, **{ours: theirs for theirs, ours in names.items()}}
    for layout, prefix, names in (("classic", "encoder.layer.{i}.", VIT_BLOCK), ("current", "layers.{i}.", VIT_BLOCK_CURRENT))
}

# PIL resample codes used by HF image processors.
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def key_table(cfg: ViTConfig, layout: str = "classic", base: str = "vit.") -> KeyTable:
    """(vitkit key, HF key, "same") for every tensor; HF Linear/Conv layouts equal PyTorch's."""
    e = f"{base}embeddings."
    t = [("cls_token", f"{e}cls_token"), ("pos_embed", f"{e}position_embeddings")]
    t += [(f"patch_embed.proj.{p}", f"{e}patch_embeddings.projection.{p}") for p in ("weight", "bias")]
    names = BLOCK_KEYS[layout]
    for i in range(cfg.depth):
        hb = base + names["prefix"].format(i=i)
        for p in ("weight", "bias"):
            for c, qkv in enumerate("qkv"):
                t.append((f"blocks.{i}.attn.qkv.{p}#{c}", f"{hb}{names[qkv]}.{p}"))
            for mod in ("norm1", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
                t.append((f"blocks.{i}.{mod}.{p}", f"{hb}{names[mod]}.{p}"))
    t += [(f"norm.{p}", f"{base}layernorm.{p}") for p in ("weight", "bias")]
    if cfg.representation_size:
        t += [(f"pre_logits.0.{p}", f"{base}pooler.dense.{p}") for p in ("weight", "bias")]
    if cfg.num_classes > 0:
        t += [(f"head.{p}", f"classifier.{p}") for p in ("weight", "bias")]
    return [(tk, hk, "same") for tk, hk in t]


# ----------------------------------------------------------------------------- reading
def _read_config(folder: Path) -> dict[str, Any] | None:
    try:
        doc = read_json(folder / CONFIG_NAME, "model config")
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def is_hf_dir(path: Path) -> bool:
    if not (path.is_dir() and any((path / n).is_file() for n in (SAFETENSORS_NAME, BIN_NAME, *INDEX_NAMES))):
        return False
    doc = _read_config(path)
    return doc is not None and doc.get("model_type") in HF_MODEL_TYPES


# transformers' sharded saves: an index {"weight_map": {tensor: shard file}} beside the shards
INDEX_NAMES = (INDEX_NAME, BIN_NAME + ".index.json")


def _weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    st = folder / SAFETENSORS_NAME
    if st.is_file():
        return read_tensors(st), st
    if (folder / BIN_NAME).is_file():
        return read_tensors(folder / BIN_NAME), folder / BIN_NAME
    for index in INDEX_NAMES:
        if (folder / index).is_file():
            return read_sharded(folder / index), folder / index
    raise FileNotFoundError(f"{folder}: a transformers folder without weights (no {SAFETENSORS_NAME}, {BIN_NAME} or "
                            f"a sharded save's {INDEX_NAMES[0]}): only config.json is there")


def hf_to_vit_config(doc: dict[str, Any], state: dict[str, torch.Tensor], base: str, path: Path,
                     choices: Choices | None = None) -> ViTConfig:
    """Our config from HF's config.json; the head (and pooler) sizes come from the tensors present. A key the
    config.json leaves out takes transformers' `ViTConfig` default, as transformers itself would (logged)."""
    choices = choices or Choices(path)
    check_config_numbers(doc, path)

    def value(key: str, default: Any, ours: str | None = None) -> Any:
        return choices.pick(ours, doc.get(key), default, f"transformers' ViTConfig default {key}") if ours else \
            doc.get(key, default)

    act = doc.get("hidden_act")
    if act is not None and act not in HF_ACTS:
        raise ValueError(f"{path}: hidden_act {act!r} is not a GELU vitkit supports ({sorted(HF_ACTS)})")
    gelu = choices.pick("gelu", HF_ACTS[act] if act is not None else None, "exact",
                        "transformers' ViTConfig default hidden_act 'gelu' (the exact erf form)")
    ph, pw = to_pair(doc.get("patch_size", 16), f"{path}: patch_size")
    if ph != pw:
        raise ValueError(f"{path}: non-square patches {ph}x{pw} are not supported")
    has_head = "classifier.weight" in state
    rep = None
    if f"{base}pooler.dense.weight" in state and not has_head:
        if doc.get("pooler_act", "tanh") != "tanh":
            raise ValueError(f"{path}: pooler_act {doc.get('pooler_act')!r}; the representation layer is tanh")
        rep = int(state[f"{base}pooler.dense.weight"].shape[0])
    choices.pick("pooling", "token")  # HF's ViT always pools its class token
    _check_sizes_against_tensors(doc, state, base, path)
    return ViTConfig(
        img_size=to_pair(doc.get("image_size", 224), f"{path}: image_size"),
        patch_size=ph,
        in_chans=config_count(doc, "num_channels", 3, path),
        num_classes=int(state["classifier.weight"].shape[0]) if has_head else 0,
        width=config_count(doc, "hidden_size", 768, path),
        depth=config_count(doc, "num_hidden_layers", 12, path),
        num_heads=int(value("num_attention_heads", 12, "num_heads")),
        mlp_dim=config_count(doc, "intermediate_size", 3072, path),
        pooling="token",
        representation_size=rep,
        qkv_bias=bool(doc.get("qkv_bias", True)),
        ln_eps=float(value("layer_norm_eps", 1e-12, "ln_eps")),
        gelu=gelu,
    )


def _check_sizes_against_tensors(doc: dict[str, Any], state: dict[str, torch.Tensor], base: str, path: Path) -> None:
    """config.json's depth and width must be the tensors' own, checked before a model is built from them (a
    `num_hidden_layers: 100000` would otherwise allocate gigabytes first)."""
    prefix = f"{base}encoder.layer."
    layers = {k[len(prefix):].split(".", 1)[0] for k in state if k.startswith(prefix)}
    depth = doc.get("num_hidden_layers", 12)
    if layers and (not isinstance(depth, int) or len(layers) != depth):
        raise ValueError(f"{path}: num_hidden_layers is {depth!r} but the weights hold {len(layers)} layers")
    cls = state.get(f"{base}embeddings.cls_token")
    width = doc.get("hidden_size", 768)
    if cls is not None and cls.shape[-1] != width:
        raise ValueError(f"{path}: hidden_size is {width!r} but the weights are {cls.shape[-1]} wide")


def _preprocess(folder: Path, cfg: ViTConfig, doc: dict[str, Any]) -> PreprocessConfig:
    """The folder's preprocessor_config.json as vitkit's preprocessing; its `img_size` is what the processor
    outputs (DINOv2's 224 crop for a 518 config), which may differ from the model's (see `run_at_input_size`)."""
    labels: list[str] = []
    id2label = doc.get("id2label") or {}
    if cfg.num_classes and id2label and len(id2label) != cfg.num_classes:
        raise ValueError(f"{folder / CONFIG_NAME}: id2label names {len(id2label)} classes, but the classifier in the "
                         f"weights has {cfg.num_classes} outputs")
    if cfg.num_classes and len(id2label) == cfg.num_classes:
        labels = [str(id2label.get(str(i), id2label.get(i, i))) for i in range(cfg.num_classes)]
    pre = PreprocessConfig(img_size=cfg.img_size, mean=(0.5,) * cfg.in_chans, std=(0.5,) * cfg.in_chans, labels=labels)
    if not (folder / PREPROCESSOR_NAME).exists():
        return pre
    proc = read_json(folder / PREPROCESSOR_NAME, "preprocessor config")
    if not isinstance(proc, dict):
        raise ValueError(f"{folder / PREPROCESSOR_NAME}: expected a JSON object")
    mean, std = pre.mean, pre.std
    for key, ok in (("do_resize", proc.get("do_resize", True) is True),
                    ("do_rescale", proc.get("do_rescale", True) is True and abs(float(
                        proc.get("rescale_factor", 1 / 255)) - 1 / 255) < 1e-9)):
        if not ok:  # a step vitkit's preprocessing does not take: refused by name, never run differently
            raise ValueError(f"{folder / PREPROCESSOR_NAME}: {key} = {proc.get(key)!r} (rescale_factor "
                             f"{proc.get('rescale_factor', 1 / 255)!r}) is a preprocessing step vitkit does not "
                             "reproduce yet; it resizes the whole image to the model's size and scales pixels by 1/255")
    crop_pct, crop_mode, out_size = _hf_crop(proc, cfg, folder / PREPROCESSOR_NAME)
    try:
        if proc.get("do_normalize", True):
            mean = tuple(float(m) for m in proc.get("image_mean", pre.mean))
            std = tuple(float(s) for s in proc.get("image_std", pre.std))
        else:
            mean, std = (0.0,) * cfg.in_chans, (1.0,) * cfg.in_chans
        return PreprocessConfig(img_size=out_size, mean=mean, std=std, labels=labels, crop_pct=crop_pct,
                                crop_mode=crop_mode, interpolation=_resample(proc, pre.interpolation, folder),
                                crop_offset="floor")  # transformers' center_crop: margin // 2
    except (ValueError, TypeError) as e:  # validated as a whole: NaN or zero std, wrong lengths
        raise ValueError(f"{folder / PREPROCESSOR_NAME}: {e}") from e


def _resample(proc: dict[str, Any], default: str, folder: Path) -> str:
    """The interpolation of an image processor's PIL `resample` code; a code vitkit does not reproduce (PIL's 1
    LANCZOS, 4 BOX, 5 HAMMING) or not a code at all is refused by name, never run as bilinear."""
    code = proc.get("resample")
    if code is None:
        return default
    if isinstance(code, bool) or code not in RESAMPLE:
        raise ValueError(f"{folder / PREPROCESSOR_NAME}: resample {code!r} is not an interpolation vitkit reproduces "
                         f"({', '.join(f'{k} {v}' for k, v in RESAMPLE.items())}; PIL's 1 LANCZOS, 4 BOX, 5 HAMMING "
                         "are not)")
    return RESAMPLE[code]


# Image processors whose bare-number `size` (the legacy feature-extractor files: `"size": 224`) is the shorter side
# (transformers' get_size_dict(default_to_square=False)); the others' (ViT, DeiT, SigLIP) is a square.
SHORTEST_EDGE_PROCESSORS = ("CLIPImageProcessor", "CLIPFeatureExtractor", "BitImageProcessor", "BitFeatureExtractor",
                            "ConvNextImageProcessor", "ConvNextFeatureExtractor")


def _hw(value: Any, where: Path, key: str) -> tuple[int, int] | None:
    """A processor's {"height", "width"} or bare-number size as (h, w); None when absent."""
    if value is None:
        return None
    if isinstance(value, dict) and {"height", "width"} <= set(value):
        value = (value["height"], value["width"])
    elif isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    elif isinstance(value, list) and len(value) == 2:  # transformers' get_size_dict: (height, width)
        value = (value[0], value[1])
    if not (isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ValueError(f"{where}: {key} is {value!r}, expected a number of pixels or {{'height', 'width'}}")
    return value


def _hf_crop(proc: dict[str, Any], cfg: ViTConfig, where: Path) -> tuple[float | None, str, tuple[int, int]]:
    """An HF image processor's resize (+ centre crop) as vitkit's (crop_pct, crop_mode, output size): `size`
    {"height", "width"} with no crop is a plain resize to it (no crop_pct); {"shortest_edge": S} then a square
    centre crop C is timm's "center" crop with crop_pct = C / S (CLIPImageProcessor, DINOv2's BitImageProcessor);
    {"height", "width"} then a smaller square centre crop is "squash" with crop_pct = crop / size (DeiT's 256 x 256,
    crop 224). A bare
    number (the legacy files) is read as the processor class reads it (`SHORTEST_EDGE_PROCESSORS`). The output size
    is the processor's, which need not be the config's `image_size` (DINOv2 ships 518 and crops 224). Other
    combinations are refused by name."""
    size, do_crop = proc.get("size"), bool(proc.get("do_center_crop", False))
    kind = proc.get("image_processor_type") or proc.get("feature_extractor_type") or ""
    if isinstance(size, int) and not isinstance(size, bool) and kind in SHORTEST_EDGE_PROCESSORS:
        size = {"shortest_edge": size}
    crop = _hw(proc.get("crop_size"), where, "crop_size") if do_crop else None
    if do_crop and crop is None:
        raise ValueError(f"{where}: do_center_crop without a crop_size")
    if isinstance(size, dict) and "shortest_edge" in size:
        if crop is None or crop[0] != crop[1]:
            raise ValueError(f"{where}: size {size} with do_center_crop = {do_crop} and crop_size "
                             f"{proc.get('crop_size')}: a shortest-edge resize keeps the aspect ratio, so vitkit "
                             "reproduces it followed by a square centre crop")
        edge = size["shortest_edge"]
        if not isinstance(edge, int) or isinstance(edge, bool) or edge < crop[0]:
            raise ValueError(f"{where}: shortest_edge {edge!r} must be a whole number of pixels >= the crop {crop}")
        return exact_crop_pct(crop[0], edge), "center", crop
    hw = _hw(size, where, "size") if size is not None else None
    if hw is None:
        if do_crop:
            raise ValueError(f"{where}: do_center_crop with size {size!r}: a preprocessing vitkit does not reproduce")
        return None, "center", tuple(cfg.img_size)
    if crop is None:
        return None, "center", hw
    if crop[0] > hw[0] or crop[1] > hw[1] or crop[0] != crop[1] or hw[0] != hw[1]:
        raise ValueError(f"{where}: a resize to {size} then a centre crop of {proc.get('crop_size')}: vitkit "
                         "reproduces a square crop of a square resize")
    return exact_crop_pct(crop[0], hw[0]), "squash", crop


def load_hf(path: str | Path, hints: dict[str, Any] | None = None) -> VisionTransformer:
    """Load a transformers ViT folder (ViT[MSN]Model, ViT[MSN]ForImageClassification, or a family's), eval mode."""
    folder = Path(path)
    doc = _read_config(folder)
    if doc is None:
        raise ValueError(f"{folder / CONFIG_NAME}: cannot read the model config")
    state, wpath = _weights(folder)
    check_fingerprint(folder, doc)  # after the read: a folder replaced meanwhile is noticed
    if is_family(doc):  # DeiT, DINOv2, CLIP, SigLIP, ViTMAE (vitkit.formats.families)
        assumed = {} if (folder / PREPROCESSOR_NAME).exists() else {
            "preprocess": f"mean = std = 0.5, resize without crop: vitkit's default ({PREPROCESSOR_NAME} absent)"}
        model = load_hf_family(doc, state, wpath, hints, assumed)
        pre = _preprocess(folder, model.config, doc)
        run_at_input_size(model, pre.img_size, folder / PREPROCESSOR_NAME, "processor output")
        model.preprocess = pre
        return model.eval()
    base = "vit." if any(k.startswith("vit.") for k in state) else ""
    if base and doc.get("model_type") == "vit_msn":  # transformers 5 writes ViTMSN's blocks outside `vit.`
        state = {(base + k if k.startswith(("encoder.layer.", "layers.")) else k): v for k, v in state.items()}
    layout = "classic" if any(k.startswith(f"{base}encoder.layer.") for k in state) else "current"
    choices = Choices(wpath, hints)
    cfg = hf_to_vit_config(doc, state, base, wpath, choices)
    if not (folder / PREPROCESSOR_NAME).exists():
        choices.assumed["preprocess"] = (f"mean = std = 0.5, resize to {cfg.img_size[0]}x{cfg.img_size[1]} without "
                                         f"crop: transformers' ViTImageProcessor defaults ({PREPROCESSOR_NAME} absent)")
    cfg = choices.record(cfg)
    check_fits_weights(cfg, sum(t.numel() for t in state.values()), folder / CONFIG_NAME)
    model = built_to_load(VisionTransformer, cfg)
    table = key_table(cfg, layout, base)
    # Unused by image classification: the MIM mask token, and a pooler transformers itself ignores there.
    ignore = {f"{base}embeddings.mask_token"} | ({f"{base}pooler.dense.{p}" for p in ("weight", "bias")})
    state = gather_state(state, table, model.state_dict(), wpath, lambda _k, t: t, lambda _k, s: s, ignore)
    load_state_checked(model, state, wpath)
    pre = _preprocess(folder, model.config, doc)
    run_at_input_size(model, pre.img_size, folder / PREPROCESSOR_NAME, "processor output")
    model.preprocess = pre
    return model.eval()


# ----------------------------------------------------------------------------- writing
def vit_to_hf_config(model: VisionTransformer) -> dict[str, Any]:
    """config.json for transformers; raises if the model has parts HF's ViT cannot express."""
    cfg = model.config
    problems = []
    if cfg.pooling != "token":
        problems.append("GAP pooling (HF's ViT classifies from the class token)")
    if cfg.posemb != "learn1d":
        problems.append(f"posemb={cfg.posemb!r} (HF has learned 1D position embeddings)")
    problems += variant_parts(cfg)
    if cfg.resnet_layers is not None:
        problems.append("a hybrid ResNet stem")
    if cfg.representation_size and cfg.num_classes > 0:
        problems.append("a pre_logits layer under the classifier (use num_classes=0 to save it as ViTModel's pooler)")
    if problems:
        raise ValueError("cannot save as a Hugging Face ViT: " + "; ".join(problems))
    h, w = cfg.table_img_size  # the position table's own (a kept checkpoint table: its grid, not the input's)
    doc: dict[str, Any] = {
        "architectures": ["ViTForImageClassification" if cfg.num_classes > 0 else "ViTModel"],
        "model_type": "vit",
        "hidden_size": cfg.width,
        "num_hidden_layers": cfg.depth,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.mlp_dim,
        "hidden_act": ACT_NAMES[cfg.gelu],
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "layer_norm_eps": cfg.ln_eps,
        "image_size": h if h == w else [h, w],
        "patch_size": cfg.patch_size,
        "num_channels": cfg.in_chans,
        "qkv_bias": cfg.qkv_bias,
        "encoder_stride": cfg.patch_size,
        "torch_dtype": "float32",
    }
    if cfg.representation_size:
        doc.update(pooler_output_size=cfg.representation_size, pooler_act="tanh")
    doc.update(label_fields(model))
    return doc


def save_hf(model: VisionTransformer, out: Path, max_shard_size: int | str | None = None) -> Path:
    """Write a folder `from_pretrained` loads: config.json, model.safetensors (sharded above `max_shard_size`,
    formats/sharded.py), preprocessor_config.json. A model
    of a family transformers has its own class for (LayerScale: Dinov2[WithRegisters]Model, a distillation token:
    DeiT, pre_norm: CLIP's vision tower, MAP pooling: SigLIP's) is written as that class (formats/families/), the
    others as `ViT[Model|ForImageClassification]`; a model neither holds is refused, naming what does not fit.
    Unmerged LoRA adapters are written merged (said in the log and in config.json's "vitkit_merged_lora"); a
    tensor the class's key table does not write is refused by name (formats/writable.py)."""
    model = writable(model, "hf")
    cfg = model.config
    if hf_family(cfg) is not None:
        doc, tensors = write_family(model)
    else:
        doc = vit_to_hf_config(model)
        own = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        base = "vit." if cfg.num_classes > 0 else ""
        table = key_table(cfg, "classic", base)
        check_consumed(model, table_keys(table), "hf")
        tensors = {k: v.contiguous() for k, v in split_chunks(own, table).items()}
        resample_warning(cfg, "bicubic", f"transformers' {doc['architectures'][0]}")
    if MERGED_KEY in cfg.extra:
        doc["vitkit_" + MERGED_KEY] = cfg.extra[MERGED_KEY]
    out.mkdir(parents=True, exist_ok=True)
    doc[FINGERPRINT_KEY] = fingerprint(write_weights(out, tensors, {"format": "pt"}, max_shard_size))
    atomic_write_text(out / CONFIG_NAME, json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / PREPROCESSOR_NAME, json.dumps(hf_processor(model.preprocess, out), indent=2) + "\n")
    return out


def hf_processor(pre: PreprocessConfig, out: Path) -> dict[str, Any]:
    """preprocessor_config.json for `pre`: ViTImageProcessor's plain resize, or, with a crop (timm's crop_pct),
    BitImageProcessor's resize (the shorter side, or both for "squash") then its centre crop -- what `_hf_crop`
    reads back. transformers places the crop at margin // 2; for a model whose crop is placed as torchvision does,
    the possible one-pixel move is named in a warning."""
    H, W = pre.img_size
    proc: dict[str, Any] = {"do_resize": True, "resample": {v: k for k, v in RESAMPLE.items()}.get(pre.interpolation, 2),
                            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                            "image_mean": list(pre.mean), "image_std": list(pre.std)}
    if pre.crop_pct is None:
        return {"image_processor_type": "ViTImageProcessor", **proc, "size": {"height": H, "width": W}}
    if H != W:
        raise ValueError(f"cannot write a Hugging Face image processor for a {H}x{W} model with crop_pct "
                         f"{pre.crop_pct}: transformers' centre crop follows a square resize here")
    side = pre.scale_size()[0]
    size = {"shortest_edge": side} if pre.crop_mode == "center" else {"height": side, "width": side}
    if pre.crop_offset == "round":
        warnings.warn(f"{out}: this model's centre crop is placed as torchvision does (an odd margin rounded half to "
                      "even); transformers floors it, so for some image sizes the crop moves by one pixel in "
                      "transformers", UserWarning, stacklevel=3)
    return {"image_processor_type": "BitImageProcessor", **proc, "size": size, "do_center_crop": True,
            "crop_size": {"height": H, "width": W}, "do_convert_rgb": True}
