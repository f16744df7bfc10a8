"""timm `VisionTransformer` state dicts, read and written.

vitkit's module names are timm's (`patch_embed.proj`, `blocks.i.attn.qkv`, `norm`, `head`, and
for hybrids `patch_embed.backbone.stem.conv`, `...stages.s.blocks.u.conv1`), so the key map is
short. Inputs: a `.pth`/`.pt`/`.bin` (read with `torch.load(weights_only=True)`; training
wrappers `{'model': ...}` / `{'state_dict': ...}` and `module.` prefixes are unwrapped), a
`.safetensors` file, or a timm hub folder (`config.json` with "architecture" + `model.safetensors`).

The architecture is inferred from shapes. Fused qkv weights do not record the head count: it comes
from vitkit's metadata when present (safetensors metadata / config.json "vitkit"), else from the
paper's Table 1 sizes (64-wide heads otherwise). timm files use exact GELU and LayerNorm eps 1e-6.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import uuid
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from vitkit.formats import families
from vitkit.formats.common import (
    Choices,
    KeyTable,
    appendix_parts,
    built_to_load,
    check_fits_weights,
    gather_state,
    load_state_checked,
    read_tensors,
    require,
    resample_warning,
    resnet_width_factor,
    run_at_input_size,
    square_grid,
    table1_heads,
    tensor_header,
    units_per_stage,
)
from vitkit.formats.sharded import FINGERPRINT_KEY, SAVE_ID_KEY, WEIGHTS_NAME, check_fingerprint, fingerprint
from vitkit.formats.writable import check_architecture, writable
from vitkit.models.posemb import square_side
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.resnet import hybrid_stride
from vitkit.models.timm_api import GELU_ACTS, POOL_FROM_TIMM, TIMM_ACTS, TIMM_POOL
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils import to_pair
from vitkit.utils.atomic import atomic_write_text, atomic_write_with
from vitkit.utils.files import parse_json, read_json

log = logging.getLogger("vitkit")
CONFIG_NAME = "config.json"
TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
META_KEY = "vitkit_config"
PRE_KEY = "vitkit_preprocess"  # a bare file's preprocessing and labels (timm reads them from a hub folder only)
# The only names that differ: timm's (pre-0.9) representation layer `pre_logits.fc`, and its attention pooling
# (`attn_pool`, SigLIP's MAP head) which is vitkit's `map_head` with the latent query as `probe`.
RENAMES = (("pre_logits.fc.", "pre_logits.0."), ("attn_pool.latent", "map_head.probe"), ("attn_pool.", "map_head."))
# timm parts vitkit's ViT has no equivalent for, with what they are (for the error message).
UNSUPPORTED = {
    "blocks.0.attn.q_norm.weight": "qk-norm",
    "blocks.0.attn.q_bias": "EVA's attention (separate q and v biases; EVA also rotates q and k with rotary position "
                            "embeddings, and EVA-02 has a SwiGLU MLP)",
    "blocks.0.mlp.fc1_g.weight": "a gated MLP (SwiGLU)",
    "blocks.0.mlp.w12.weight": "a gated MLP (SwiGLU)",
    "blocks.0.attn.norm.weight": "a LayerNorm inside the attention (scale-norm)",
    "blocks.0.mlp.norm.weight": "a LayerNorm inside the MLP (scale-norm)",
    "attn_pool.q_norm.weight": "qk-norm in the attention pooling",
    "attn_pool.pos_embed": "position embeddings in the attention pooling",
}
# what timm's ViT builder takes in code where a file does not say; a family's builders may differ
# (`Family.timm_defaults`: CLIP's pre-norm models)
TIMM_DEFAULTS = {"ln_eps": (1e-6, "timm's ViT LayerNorm eps"), "gelu": ("exact", "timm's ViT uses nn.GELU, the exact erf "
                                                                          "form")}


def key_table(state_keys: list[str]) -> KeyTable:
    """(vitkit key, timm key, "same") for each timm key."""
    table = []
    for k in state_keys:
        v = k
        for old, new in RENAMES:
            v = v.replace(old, new) if v.startswith(old) else v
        table.append((v, k, "same"))
    return table


# ----------------------------------------------------------------------------- reading
def _timm_folder(path: Path) -> bool:
    if not (path.is_dir() and (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file()):
        return False
    try:
        doc = read_json(path / CONFIG_NAME, "model config")
        return isinstance(doc, dict) and "architecture" in doc
    except (OSError, ValueError):
        return False


def is_timm(path: Path) -> bool:
    if path.is_file():
        return path.suffix in TORCH_SUFFIXES or path.suffix == ".safetensors"
    return _timm_folder(path)


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path]:
    """(state dict, side metadata, weights file) from a file or a timm hub folder."""
    meta: dict[str, Any] = {}
    if path.is_dir():
        meta = read_json(path / CONFIG_NAME, "model config")
        path = path / WEIGHTS_NAME
    if path.suffix == ".safetensors":
        state = read_tensors(path)
        md = tensor_header(path)[1]
        if META_KEY in md:
            meta.setdefault("vitkit", parse_json(md[META_KEY], f"{path} metadata {META_KEY}", "model config"))
        if PRE_KEY in md:
            meta.setdefault(PRE_KEY, parse_json(md[PRE_KEY], f"{path} metadata {PRE_KEY}", "preprocessing"))
        return state, meta, path
    return read_tensors(path), meta, path


def infer_config(state: dict[str, torch.Tensor], meta: dict[str, Any], path: Path, choices: Choices) -> ViTConfig:
    """Recover a ViTConfig from timm tensor shapes, metadata (vitkit's own, or a hub folder's model_args)
    and `choices` for what neither determines: the head count of fused qkv weights (given, or Table 1's for
    its widths, else refused), GELU (timm's exact), LayerNorm eps (timm's 1e-6), pooling without a class
    token (timm's average)."""
    found = [(key, what) for key, what in UNSUPPORTED.items() if key in state]
    if found:
        names = ", ".join(f"{k!r} ({w})" for k, w in found)
        raise ValueError(f"{path}: unrecognised tensor(s) {names}: vitkit's ViT has no such parts")
    if "vitkit" in meta:  # written by vitkit: the exact config (heads, GELU flavour, eps, grid)
        cfg = ViTConfig.from_dict(meta["vitkit"])
        choices.agree(cfg)  # a hint that contradicts the file is an error
        return cfg
    proj = require(state, "patch_embed.proj.weight", path, 4)
    D, C, P, _ = proj.shape
    depth = 0
    while f"blocks.{depth}.attn.qkv.weight" in state:
        depth += 1
    if depth == 0:
        raise ValueError(f"{path}: missing tensor 'blocks.0.attn.qkv.weight'; not a timm VisionTransformer")
    arch = str(meta.get("architecture", ""))
    # what timm's builders of the families set in code (a hub config's model_args does not repeat it), by a
    # substring of the architecture name (each family's `timm_builder_args`: LayerScale's init, CLIP's GELU)
    args = {k: v for fam in families.FAMILIES for part, defaults in fam.timm_builder_args if part in arch
            for k, v in defaults.items()}
    args.update(meta.get("model_args") or {})  # the file's own model_args first
    if args.get("pool_include_prefix") or args.get("final_norm") is False:
        raise ValueError(f"{path}: model_args pool_include_prefix / final_norm=False are not a model vitkit builds")
    table = table1_heads(D)
    heads = choices.pick("num_heads", args.get("num_heads"), table,
                         f"fused qkv weights do not record it; Table 1's width-{D} model has {table} heads" if table
                         else f"fused qkv weights do not record it, and width {D} is none of Table 1's")
    token = "cls_token" in state
    args_act = args.get("act_layer")
    if args_act is not None and args_act not in TIMM_ACTS:
        raise ValueError(f"{path}: act_layer {args_act!r} is not a GELU vitkit builds ({', '.join(TIMM_ACTS)})")
    # what each family's parts in the file determine (DeiT's distillation token, registers, LayerScale's init, ...)
    fields = {k: v for fam in families.FAMILIES for k, v in fam.timm_fields(state, args, path, choices).items()}
    distilled, attn_pool = bool(fields.get("distill_token")), fields.get("pooling") == "map"
    registers = fields.get("num_registers", 0)
    fc_norm = "fc_norm.weight" in state
    pre_norm = "norm_pre.weight" in state
    layers: tuple[int, ...] | None = None
    width_factor, in_chans, stride = 1, C, P
    if "patch_embed.backbone.stem.conv.weight" in state:
        root = state["patch_embed.backbone.stem.conv.weight"]
        in_chans, width_factor = root.shape[1], resnet_width_factor(root.shape[0])  # (64 * w, C, 7, 7)
        layers = units_per_stage(state, lambda s: f"patch_embed.backbone.stages.{s}.blocks.", ".conv1.weight")
        stride = P * hybrid_stride(layers)
    pos = require(state, "pos_embed", path, 3)
    n = pos.shape[1] - (2 if distilled else int(token and not _no_embed_class(pos.shape[1], token)))
    img = args.get("img_size")
    if img is None:
        img = square_grid(n, path, "pos_embed")[0] * stride
    rep = state["pre_logits.fc.weight"].shape[0] if "pre_logits.fc.weight" in state else None
    # the LayerNorm eps a family's builder sets in code (CLIP's nn.LayerNorm 1e-5, DINOv2's own 1e-6)
    eps_file = next((e for fam in families.FAMILIES if (e := fam.timm_ln_eps(arch, args, pre_norm)) is not None),
                    None)
    defaults = timm_defaults({"pre_norm": pre_norm})
    return ViTConfig(
        img_size=img,
        patch_size=P,
        in_chans=in_chans,
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        width=D,
        depth=depth,
        num_heads=heads,
        mlp_dim=require(state, "blocks.0.mlp.fc1.weight", path, 2).shape[0],
        pooling=_pooling(meta, token, attn_pool, fc_norm, choices),
        class_token=token,
        fc_norm=fc_norm,
        layer_scale=fields.get("layer_scale"),
        pre_norm=pre_norm,
        patch_bias="patch_embed.proj.bias" in state,
        num_registers=registers,
        representation_size=rep,
        distill_token=distilled,
        qkv_bias="blocks.0.attn.qkv.bias" in state,
        posemb_resample="bicubic_antialias",  # timm's resample_abs_pos_embed
        ln_eps=choices.pick("ln_eps", eps_file, *defaults["ln_eps"]),
        gelu=choices.pick("gelu", TIMM_ACTS.get(args_act) if args_act else None, *defaults["gelu"]),
        resnet_layers=layers,
        resnet_width=width_factor,
    )


def timm_defaults(parts: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """{hint: (value, why)} timm takes in code for a model with `parts` (ViTConfig fields read from the tensors):
    timm's ViT builder's `TIMM_DEFAULTS`, or its family's builder's (`Family.timm_defaults`)."""
    out = dict(TIMM_DEFAULTS)
    for fam in families.FAMILIES:
        out.update(fam.timm_defaults(parts))
    return out


def _pooling(meta: dict[str, Any], token: bool, attn_pool: bool, fc_norm: bool, choices: Choices) -> str:
    """vitkit's pooling from a hub folder's global_pool; a bare file's is assumed (and recorded) from its parts:
    attention pooling if it has attn_pool, else average pooling without a class token or with fc_norm (timm makes
    fc_norm for its average pools), else timm's default, the class token."""
    pool = meta.get("global_pool", (meta.get("model_args") or {}).get("global_pool"))
    if pool is not None:
        if pool not in POOL_FROM_TIMM:
            raise ValueError(f"{choices.source}: global_pool {pool!r} is not a pooling vitkit builds "
                             f"({', '.join(POOL_FROM_TIMM)})")
        return choices.pick("pooling", POOL_FROM_TIMM[pool])
    if attn_pool:
        return choices.pick("pooling", "map")
    if not token:
        return choices.pick("pooling", None, "gap", "no class token: timm's default global average pooling")
    if fc_norm:
        return choices.pick("pooling", None, "gap", "a class token with fc_norm: timm builds fc_norm for its average "
                            "pooling (global_pool='avg'); give pooling='token' if the file pooled the class token")
    return choices.pick("pooling", None, "token", "a class token and no global_pool in the file: timm's default "
                        "'token'; give pooling='gap' for a model trained with global_pool='avg'")


def _without_register_posemb(state: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """timm without no_embed_class gives every prefix token an E_pos row, registers too (after the class token);
    vitkit's registers take none. Zero register rows (as vitkit writes a class-token E_pos beside registers) are
    dropped, exactly; learned ones are refused by name."""
    pos, reg = state.get("pos_embed"), state.get("reg_token")
    if pos is None or reg is None or pos.ndim != 3 or reg.ndim != 3 or square_side(pos.shape[1]) is not None:
        return state
    c, r = int("cls_token" in state) + int("dist_token" in state), reg.shape[1]
    if square_side(pos.shape[1] - c) is not None:  # E_pos for the class token(s) and the patches only
        return state
    if pos.shape[1] <= c + r or square_side(pos.shape[1] - c - r) is None:
        return state
    if pos[:, c:c + r].any():
        raise ValueError(f"{path}: register tokens with learned position embeddings (timm without no_embed_class, "
                         f"pos_embed rows {c}..{c + r - 1} not zero) are not a model vitkit builds: its registers "
                         "take none")
    return dict(state, pos_embed=torch.cat([pos[:, :c], pos[:, c + r:]], dim=1))


def _no_embed_class(tokens: int, token: bool) -> bool:
    """timm's `no_embed_class` (DeiT-3 style): a class token but position embeddings for patches only."""
    return token and square_side(tokens) is not None


def _say_bare_table_rule(meta: dict[str, Any], cfg: ViTConfig, choices: Choices) -> None:
    """A file that names no family (no architecture, no vitkit config: a bare state dict) loaded at another size
    than its learned table's: the table is resampled once at load (timm's rule), which is lossy for a family that
    keeps its table and resamples from it at every size (DINOv2: its 37x37 table serves 224 and 518 px). Which rule
    the file wants cannot be read from it: the one applied is said and kept in `config.extra["assumed"]`."""
    size = choices.hints.get("img_size")
    if meta.get("architecture") or "vitkit" in meta or size is None or cfg.posemb != "learn1d" or cfg.posemb_grid:
        return
    s = cfg.total_stride
    asked = to_pair(size, "img_size")
    if (asked[0] // s, asked[1] // s) == cfg.grid_size:
        return
    g = cfg.grid_size
    choices.assumed["posemb_grid"] = (
        f"None: a bare timm file names no model family, so its {g[0]}x{g[1]} position table is resampled once to "
        f"img_size={list(asked)} at load (timm's rule) and any later size from that; a DINOv2 file (whose table "
        "serves every size, resampled from its own grid: transformers' Dinov2Model) should be loaded from a folder "
        "or hub id that names it, or without img_size (exact at the table's own size)")


def load_timm(path: str | Path, hints: dict[str, Any] | None = None) -> VisionTransformer:
    """Load a timm ViT state dict / hub folder, eval mode (`hints`: see `Choices`)."""
    src = Path(path)
    state, meta, wpath = _read(src)
    if src.is_dir():
        check_fingerprint(src, meta)  # after the read: a folder replaced meanwhile is noticed
    choices = Choices(wpath, hints)
    how = None
    family = next((fam for fam in families.FAMILIES if fam.is_own_layout(state)), None)
    if family is not None:  # a family's own repository's layout (OpenAI's CLIP, facebookresearch/dinov2)
        state, meta, how = family.from_own_layout(state, meta, wpath, choices)
    state = _without_register_posemb(state, wpath)
    cfg = infer_config(state, meta, wpath, choices)
    if how is not None:
        cfg = cfg.replace(posemb_resample=how)
    if families.keeps_table(meta.get("architecture")) and cfg.posemb == "learn1d" and cfg.posemb_grid is None:
        cfg = cfg.replace(posemb_grid=cfg.grid_size)  # its table as it came, whatever size the model runs at
    _say_bare_table_rule(meta, cfg, choices)
    if not meta.get("pretrained_cfg") and PRE_KEY not in meta:
        choices.assumed["preprocess"] = ("mean = std = 0.5, bilinear resize without crop: vitkit's default; a bare "
                                         "timm state dict stores no preprocessing (a hub folder's pretrained_cfg does)")
    cfg = choices.record(cfg)
    if cfg.class_token and "pos_embed" in state and state["pos_embed"].shape[1] == math.prod(cfg.table_grid):
        # no_embed_class: patches get E_pos, the class token none == a zero class-token row in our table.
        pe = state["pos_embed"]
        state = dict(state, pos_embed=torch.cat([pe.new_zeros(1, 1, pe.shape[2]), pe], dim=1))
    check_fits_weights(cfg, sum(t.numel() for t in state.values()), wpath)  # a metadata config too
    model = built_to_load(VisionTransformer, cfg)
    own = model.state_dict()
    state = gather_state(state, key_table(list(state)), own, wpath, lambda _k, t: t, lambda _k, s: s)
    load_state_checked(model, state, wpath)
    size = (meta.get("pretrained_cfg") or {}).get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3 and all(isinstance(v, int) and v > 0 for v in size):
        run_at_input_size(model, size[1:], wpath, "pretrained_cfg input_size")  # timm resamples E_pos at load
    model.preprocess = _preprocess(meta, model.preprocess, model.config)
    if PRE_KEY in meta:  # written by vitkit into a bare file: exact
        run = model.config
        stored = PreprocessConfig.from_dict({**meta[PRE_KEY], "img_size": run.img_size})
        model.preprocess = dataclasses.replace(stored, labels=stored.labels if len(stored.labels) == run.num_classes
                                               else [])
    return model.eval()


def _preprocess(meta: dict[str, Any], pre: PreprocessConfig, cfg: ViTConfig) -> PreprocessConfig:
    """The model's default preprocessing `pre`, updated from timm's pretrained_cfg where the file has one."""
    pc = meta.get("pretrained_cfg") or {}
    size = pc.get("input_size")
    if size is not None and tuple(size)[-2:] != tuple(cfg.img_size):
        raise ValueError(f"pretrained_cfg input_size {list(size)} differs from the model's {list(cfg.img_size)} px")
    labels = pc.get("label_names") or []
    return PreprocessConfig.from_timm(pc, pre, labels if len(labels) == cfg.num_classes else [])


# ----------------------------------------------------------------------------- writing


def _timm_state(model: VisionTransformer, bare: bool) -> dict[str, torch.Tensor]:
    """The timm state dict of `model`; warns where timm, building the model from what is written (a hub folder's
    model_args, or for a `bare` file its own defaults), would compute something slightly different."""
    cfg = model.config
    # timm's VisionTransformer also builds every family's options (families/), but some together (`timm_write_problems`)
    parts = appendix_parts(cfg)
    if cfg.posemb != "learn1d":
        parts.insert(0, f"posemb={cfg.posemb!r}")
    parts += [p for fam in families.FAMILIES for p in fam.timm_write_problems(cfg)]
    if parts:
        raise ValueError("timm's ViT has learned 1D position embeddings at the input and global attention; this "
                         f"model has {'; '.join(parts)}: save it in vitkit's format")
    timm_eps = timm_defaults({"pre_norm": cfg.pre_norm})["ln_eps"][0]  # timm's ViT's, or a family builder's
    if cfg.ln_eps != timm_eps or (bare and cfg.gelu != "exact"):
        warnings.warn(
            f"this model uses {cfg.gelu} GELU and LayerNorm eps {cfg.ln_eps:g}; timm's VisionTransformer runs "
            f"{'exact' if bare else cfg.gelu} GELU and eps {timm_eps:g}"
            + (" (a bare file has no model_args to say otherwise)" if bare else "")
            + ", so timm's outputs will differ slightly (vitkit itself reloads the file exactly: its config is "
            "stored alongside)", UserWarning, stacklevel=3)
    out = {}
    for k, v in model.state_dict().items():
        for new, old in RENAMES:  # vitkit -> timm
            k = k.replace(old, new) if k.startswith(old) else k
        out[k] = v.detach().cpu().contiguous()
    if cfg.num_registers and cfg.class_token:  # timm gives registers E_pos rows unless no_embed_class
        pe, c = out["pos_embed"], cfg.num_class_tokens
        if _no_embed_class_out(model):  # the class token's row is zero: the patches' rows only (DINOv2's layout)
            out["pos_embed"] = pe[:, c:].contiguous()
        else:  # zero rows for the registers after the class token's (exact: vitkit's registers take none)
            out["pos_embed"] = torch.cat([pe[:, :c], pe.new_zeros(1, cfg.num_registers, cfg.width), pe[:, c:]], 1)
    return out


def _no_embed_class_out(model: VisionTransformer) -> bool:
    """Whether the timm file is written with no_embed_class: registers (which take no E_pos) beside no class token,
    or beside one whose E_pos row is zero (DINOv2 with registers, read from timm)."""
    cfg = model.config
    if not cfg.num_registers:
        return False
    return not cfg.class_token or not bool(model.pos_embed[:, :cfg.num_class_tokens].any())


def _architecture(cfg: ViTConfig) -> str:
    """The timm builder whose defaults the model_args complete (its norm layer and eps come from the builder)."""
    return next((a for fam in families.FAMILIES if (a := fam.timm_architecture(cfg)) is not None),
                "vit_base_patch16_224")


def save_timm(model: VisionTransformer, out: Path) -> Path:
    """Write `out` (a `.safetensors` file) or a timm hub folder `out/{config.json, model.safetensors}`.

    vitkit's full config rides along (safetensors metadata, config.json "vitkit") so a reload is exact. Unmerged
    LoRA adapters are written merged (said in the log and kept in that config's "extra"); a tensor the model its
    config describes does not have is refused by name (formats/writable.py).
    """
    model = writable(model, "timm")
    check_architecture(model, VisionTransformer, "timm")
    cfg = model.config
    file = out if out.suffix == ".safetensors" else out / WEIGHTS_NAME
    tensors = _timm_state(model, bare=file == out)
    resample_warning(cfg, "bicubic_antialias", "timm")
    meta = {"format": "pt", META_KEY: cfg.to_json(), SAVE_ID_KEY: uuid.uuid4().hex}
    if file == out:  # a bare file: no config.json for timm to read the preprocessing and labels from
        meta[PRE_KEY] = json.dumps(model.preprocess.to_dict())
        log.warning("%s: a bare .safetensors file has no place timm reads preprocessing or labels from (timm takes "
                    "them from a hub folder's config.json): they are kept in the file's metadata for vitkit; write a "
                    "folder (a path without .safetensors) to give timm them too", out)
    atomic_write_with(file, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    if file != out:
        pre = model.preprocess
        if pre.crop_pct is not None and pre.crop_offset != "round":
            warnings.warn(f"{out}: this model's centre crop is placed as transformers does (margin // 2); timm's "
                          "pretrained_cfg has no field for it, and timm rounds: an odd margin moves the crop by one "
                          "pixel in timm (vitkit reloads it as timm's)", UserWarning, stacklevel=2)
        doc = {
            # timm builder; model_args below set every size
            "architecture": _architecture(cfg),
            "num_classes": cfg.num_classes,
            "num_features": cfg.representation_size or cfg.width,
            "global_pool": TIMM_POOL[cfg.pooling],
            "model_args": {
                "img_size": list(cfg.table_img_size),  # the table's own; timm resamples it for the input size
                "patch_size": cfg.patch_size,
                "in_chans": cfg.in_chans,
                "embed_dim": cfg.width,
                "depth": cfg.depth,
                "num_heads": cfg.num_heads,
                "mlp_ratio": cfg.mlp_dim / cfg.width,
                "qkv_bias": cfg.qkv_bias,
                "class_token": cfg.class_token,
                "global_pool": TIMM_POOL[cfg.pooling],
                "fc_norm": cfg.fc_norm,
                "init_values": cfg.layer_scale,
                "pre_norm": cfg.pre_norm,
                "act_layer": GELU_ACTS[cfg.gelu],
                "reg_tokens": cfg.num_registers,
                "no_embed_class": _no_embed_class_out(model),
                **({"dynamic_img_size": True} if cfg.table_grid != cfg.grid_size else {}),
            },
            "pretrained_cfg": {
                **pre.to_timm(),  # no crop: crop_pct 1.0 with "squash"
                "num_classes": cfg.num_classes,
                "label_names": list(pre.labels),
            },
            "vitkit": cfg.to_dict(),
            FINGERPRINT_KEY: fingerprint([file]),
        }
        atomic_write_text(out / CONFIG_NAME, json.dumps(doc, indent=2) + "\n")
    return file if file == out else out
