"""The original `.npz` checkpoints of vit_jax / big_vision, read and written.

Keys are flat, '/'-separated Flax paths. One table (`key_table`) maps each vitkit tensor to its
npz key and a layout conversion; loading and saving both walk it. Both module-naming generations
are read: the released files' `LayerNorm_0 / MultiHeadDotProductAttention_1 / LayerNorm_2 /
MlpBlock_3` and newer Flax's per-type numbering `LayerNorm_0 / MultiHeadDotProductAttention_0 /
LayerNorm_1 / MlpBlock_0`; optional `opt/target/`, `params/` (or big_vision `params/img/`) prefixes;
big_vision's stacked `Transformer/encoderblock/` (scan) layout; hybrid R50 keys. Files are written
with the released key names. The architecture is recovered from the array shapes alone, and the
numerics are the original's (tanh GELU, LayerNorm eps 1e-6, as the original code). `numpy.load` never unpickles.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.formats.common import (
    Choices,
    KeyTable,
    built_to_load,
    checkpoint_limit,
    expect_shape,
    file_sha256,
    gather_state,
    load_state_checked,
    require,
    resnet_width_factor,
    run_at_input_size,
    split_chunks,
    square_grid,
    units_per_stage,
)
from vitkit.formats.families import variant_parts
from vitkit.formats.writable import MERGED_KEY, check_consumed, table_keys, writable
from vitkit.models.posemb import square_side
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.resnet import hybrid_stride
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils.atomic import atomic_write_text, atomic_write_with
from vitkit.utils.files import check_regular_file, read_json

NPZ_NAME = "model.npz"
POSEMB_KEYS = ("Transformer/posembed_input/pos_embedding", "pos_embedding")  # vit_jax, big_vision
# Module names inside `Transformer/encoderblock_{i}/`, per Flax naming generation.
RELEASED = {"ln1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_1", "ln2": "LayerNorm_2", "mlp": "MlpBlock_3"}
NEWER_FLAX = {"ln1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_0", "ln2": "LayerNorm_1", "mlp": "MlpBlock_0"}

# Layout conversions, npz -> torch. `heads_*` are the attention's (D, h, d) / (h, d) / (h, d, D) arrays.
NPZ_TO_TORCH = {
    "same": lambda a: a,
    "gn": lambda a: a.reshape(-1),  # old hybrid files store GroupNorm params as (1, 1, 1, C)
    "conv": lambda a: a.transpose(3, 2, 0, 1),  # (kh, kw, cin, cout) -> (cout, cin, kh, kw)
    "dense": lambda a: a.T,  # (in, out) -> (out, in)
    "heads_in": lambda a: a.reshape(a.shape[0], -1).T,  # (D, h, d) -> (h*d, D)
    "heads_bias": lambda a: a.reshape(-1),  # (h, d) -> (h*d,)
    "heads_out": lambda a: a.reshape(-1, a.shape[-1]).T,  # (h, d, D) -> (D, h*d)
    # big_vision adds E_pos to the patches before prepending the class token: a zero row for it in vitkit's table
    "pad_cls": lambda a: np.concatenate([np.zeros_like(a[:, :1]), a], axis=1),
}


def _to_npz(kind: str, t: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of `NPZ_TO_TORCH[kind]` (needs the head count for the attention arrays)."""
    if kind == "conv":
        return t.transpose(2, 3, 1, 0)
    if kind == "dense":
        return t.T
    if kind == "heads_in":
        return t.T.reshape(t.shape[1], heads, -1)
    if kind == "heads_bias":
        return t.reshape(heads, -1)
    if kind == "heads_out":
        return t.T.reshape(heads, -1, t.shape[0])
    if kind == "pad_cls":
        return t[:, 1:]
    return t


def key_table(cfg: ViTConfig, names: dict[str, str] = RELEASED, posemb_key: str = POSEMB_KEYS[0],
              patches_only: bool = False) -> KeyTable:
    """(vitkit key, npz key, layout) for every tensor of `cfg`; `qkv.weight#0..2` are q, k, v. `patches_only`: the
    file's E_pos covers the patches alone (big_vision adds it before prepending the class token)."""
    t = [("patch_embed.proj.weight", "embedding/kernel", "conv"), ("patch_embed.proj.bias", "embedding/bias", "same")]
    if cfg.pooling == "token":
        t.append(("cls_token", "cls", "same"))
    if cfg.posemb == "learn1d":  # fixed sin-cos embeddings are computed, not stored
        t.append(("pos_embed", posemb_key, "pad_cls" if patches_only else "same"))
    for i in range(cfg.depth):
        b, n = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        attn, mlp = f"{n}{names['attn']}/", f"{n}{names['mlp']}/"
        t += [(f"{b}norm1.{p}", f"{n}{names['ln1']}/{q}", "same") for p, q in (("weight", "scale"), ("bias", "bias"))]
        for c, qkv in enumerate(("query", "key", "value")):
            t += [(f"{b}attn.qkv.weight#{c}", f"{attn}{qkv}/kernel", "heads_in")]
            t += [(f"{b}attn.qkv.bias#{c}", f"{attn}{qkv}/bias", "heads_bias")]
        t += [
            (f"{b}attn.proj.weight", f"{attn}out/kernel", "heads_out"),
            (f"{b}attn.proj.bias", f"{attn}out/bias", "same"),
        ]
        t += [(f"{b}norm2.{p}", f"{n}{names['ln2']}/{q}", "same") for p, q in (("weight", "scale"), ("bias", "bias"))]
        for fc, dense in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            t += [
                (f"{b}mlp.{fc}.weight", f"{mlp}{dense}/kernel", "dense"),
                (f"{b}mlp.{fc}.bias", f"{mlp}{dense}/bias", "same"),
            ]
    t += [
        ("norm.weight", "Transformer/encoder_norm/scale", "same"),
        ("norm.bias", "Transformer/encoder_norm/bias", "same"),
    ]
    if cfg.pooling == "map":  # big_vision's MAPHead: a probe, one attention (k and v as vitkit's kv), LN, MLP
        m, a = "MAPHead_0/", "MAPHead_0/MultiHeadDotProductAttention_0/"
        t += [("map_head.probe", f"{m}probe", "same"), ("map_head.q.weight", f"{a}query/kernel", "heads_in"),
              ("map_head.q.bias", f"{a}query/bias", "heads_bias")]
        for c, kv in enumerate(("key", "value")):
            t += [(f"map_head.kv.weight#{c}", f"{a}{kv}/kernel", "heads_in"),
                  (f"map_head.kv.bias#{c}", f"{a}{kv}/bias", "heads_bias")]
        t += [("map_head.proj.weight", f"{a}out/kernel", "heads_out"), ("map_head.proj.bias", f"{a}out/bias", "same"),
              ("map_head.norm.weight", f"{m}LayerNorm_0/scale", "same"), ("map_head.norm.bias", f"{m}LayerNorm_0/bias", "same")]
        for fc, dense in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            t += [(f"map_head.mlp.{fc}.weight", f"{m}MlpBlock_0/{dense}/kernel", "dense"),
                  (f"map_head.mlp.{fc}.bias", f"{m}MlpBlock_0/{dense}/bias", "same")]
    if cfg.representation_size:
        t += [("pre_logits.0.weight", "pre_logits/kernel", "dense"), ("pre_logits.0.bias", "pre_logits/bias", "same")]
    if cfg.num_classes > 0:
        t += [("head.weight", "head/kernel", "dense"), ("head.bias", "head/bias", "same")]
    if cfg.resnet_layers is not None:
        t += _hybrid_table(cfg.resnet_layers)
    return t


def _hybrid_table(layers: tuple[int, ...]) -> KeyTable:
    """vit_jax's R50 keys: conv_root, gn_root, block{s}/unit{u}/{conv,gn}{1,2,3,_proj}."""
    t = [("patch_embed.backbone.stem.conv.weight", "conv_root/kernel", "conv")]
    t += [
        ("patch_embed.backbone.stem.norm.weight", "gn_root/scale", "gn"),
        ("patch_embed.backbone.stem.norm.bias", "gn_root/bias", "gn"),
    ]
    for s, units in enumerate(layers):
        for u in range(units):
            tp, jp = f"patch_embed.backbone.stages.{s}.blocks.{u}.", f"block{s + 1}/unit{u + 1}/"
            parts = [(f"conv{r}", f"norm{r}", f"conv{r}", f"gn{r}") for r in (1, 2, 3)]
            if u == 0:  # the first unit of every stage changes width or stride: projection shortcut
                parts.append(("downsample.conv", "downsample.norm", "conv_proj", "gn_proj"))
            for conv, norm, jconv, jgn in parts:
                t += [(f"{tp}{conv}.weight", f"{jp}{jconv}/kernel", "conv")]
                t += [(f"{tp}{norm}.weight", f"{jp}{jgn}/scale", "gn"), (f"{tp}{norm}.bias", f"{jp}{jgn}/bias", "gn")]
    return t


# ----------------------------------------------------------------------------- reading
def is_npz(path: Path) -> bool:
    return _npz_file(path) is not None


def _npz_file(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".npz":
        return path
    if path.is_dir() and (path / NPZ_NAME).is_file():
        return path / NPZ_NAME
    return None


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an .npz file, without ever unpickling (object arrays or pickles are an error); a regular
    file of at most the checkpoint limit (the tensor door's file checks: never a FIFO or a device)."""
    check_regular_file(path, checkpoint_limit(), "weights")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(2)
        what = ("a Python pickle, which vitkit never unpickles (that could run code)" if head[:1] == b"\x80" else
                "a single .npy array" if head == b"\x93N" else "another file type")
        raise ValueError(f"{path}: not an .npz archive (a zip of .npy arrays) but {what}")
    check_npz_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            if not isinstance(f, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive of named arrays")
            return {k: f[k] for k in f.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, IndexError, TypeError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "pickle" in why.lower():  # NumPy's advice to unpickle: never
            why = "it holds pickled Python objects, which vitkit never unpickles (that could run code)"
        raise ValueError(f"{path}: not a readable .npz of plain arrays: {why}") from e


MAX_CHECKPOINT_BYTES_ENV = "VITKIT_MAX_CHECKPOINT_BYTES"
DEFAULT_MAX_CHECKPOINT_BYTES = 8 << 30  # ViT-H/14 in fp32 is 2.5 GB


def check_npz_sizes(path: Path, limit: int | None = None) -> None:
    """Before any array is read: every member's .npy header must describe exactly the bytes the member holds, and
    all of them together at most `limit` (default 8 GiB, or $VITKIT_MAX_CHECKPOINT_BYTES): a zip bomb or a header
    announcing a huge array is refused without allocating it."""
    if limit is None:
        env = os.environ.get(MAX_CHECKPOINT_BYTES_ENV, "").strip()
        try:
            limit = int(env) if env else DEFAULT_MAX_CHECKPOINT_BYTES
        except ValueError as e:
            raise ValueError(f"${MAX_CHECKPOINT_BYTES_ENV}={env!r} is not a whole number of bytes") from e
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            total = sum(i.file_size for i in infos)
            if total > limit:
                raise ValueError(f"{path}: its arrays unpack to {total:,} bytes, over the limit of {limit:,} (a zip "
                                 f"bomb?); raise it with ${MAX_CHECKPOINT_BYTES_ENV}")
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(f)
                    header = f.tell()
                if dtype.hasobject:
                    raise ValueError(f"{path}: array {info.filename} holds Python objects, which vitkit never "
                                     "unpickles (that could run code)")
                need = int(np.prod(shape, dtype=object)) * dtype.itemsize + header
                if need != info.file_size:
                    raise ValueError(f"{path}: array {info.filename} announces shape {tuple(shape)} {dtype} "
                                     f"({need:,} bytes) but holds {info.file_size:,} bytes")
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a readable .npz archive ({type(e).__name__}: {e})") from e


def _strip_prefix(arrays: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """Drop an `opt/target/`, `params/` or `params/img/` prefix, and everything outside it (optimizer state)."""
    roots = [k[: -len("embedding/kernel")] for k in arrays if k.endswith("embedding/kernel")]
    roots = [r for r in roots if r == "" or r.endswith("/")]
    if len(roots) != 1:
        raise ValueError(
            f"{path}: expected exactly one 'embedding/kernel' array (the patch embedding), found {len(roots)}"
        )
    p = roots[0]
    return {k[len(p) :]: v for k, v in arrays.items() if k.startswith(p)}


def _unstack_scan(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """big_vision's scanned encoder stores `Transformer/encoderblock/...` with a leading depth axis."""
    stacked = "Transformer/encoderblock/"
    out = {k: v for k, v in a.items() if not k.startswith(stacked)}
    for k, v in a.items():
        if k.startswith(stacked):
            for i in range(v.shape[0]):
                out[f"Transformer/encoderblock_{i}/{k[len(stacked) :]}"] = v[i]
    return out


def _has_prefix(a: dict[str, np.ndarray], prefix: str) -> bool:
    return any(k.startswith(prefix) for k in a)


def infer_config(
    a: dict[str, np.ndarray], path: Path, choices: Choices
) -> tuple[ViTConfig, dict[str, str], str, bool]:
    """Recover the whole architecture from array shapes (the heads too: q/k/v are stored (D, heads, d));
    also the naming generation, the posemb key and whether E_pos covers the patches only (big_vision). The numerics
    are not in the file: the original code's tanh GELU and LayerNorm eps 1e-6, unless `choices` has other values.
    big_vision's fixed sin-cos E_pos is not stored either: then `posemb` and `img_size` must be given."""
    emb = require(a, "embedding/kernel", path, 4, "array")
    P, P2, C, D = emb.shape
    if P != P2:
        raise ValueError(f"{path}: 'embedding/kernel' has shape {emb.shape}, expected square (P, P, C, D) patches")
    names = RELEASED if _has_prefix(a, f"Transformer/encoderblock_0/{RELEASED['attn']}/") else NEWER_FLAX
    depth = 0
    while _has_prefix(a, f"Transformer/encoderblock_{depth}/"):
        depth += 1
    if depth == 0:
        raise ValueError(f"{path}: no 'Transformer/encoderblock_0/...' arrays; not a ViT checkpoint")
    attn = f"Transformer/encoderblock_0/{names['attn']}/"
    q = require(a, f"{attn}query/kernel", path, 3, "array")
    expect_shape(path, f"{attn}query/kernel", q.shape, (D, q.shape[1], D // max(q.shape[1], 1)))
    mlp = require(a, f"Transformer/encoderblock_0/{names['mlp']}/Dense_0/kernel", path, 2, "array")
    posemb_key = next((k for k in POSEMB_KEYS if k in a), None)
    token = "cls" in a
    pooling = "token" if token else "map" if "MAPHead_0/probe" in a else "gap"
    layers: tuple[int, ...] | None = None
    width_factor, in_chans, stride = 1, C, P
    if "conv_root/kernel" in a:  # hybrid: ResNet stage depths from the unit keys, width from the root conv
        root = require(a, "conv_root/kernel", path, 4, "array")
        in_chans, width_factor = root.shape[2], resnet_width_factor(root.shape[3])  # (7, 7, C, 64 * w)
        expect_shape(path, "conv_root/kernel", root.shape, (7, 7, in_chans, root.shape[3]))
        layers = units_per_stage(a, lambda s: f"block{s + 1}/unit", "/conv1/kernel")
        stride = P * hybrid_stride(layers)
    patches_only = False
    if posemb_key is None:  # big_vision's posemb="sincos2d" (or "none"): computed, so the file has no grid
        posemb = choices.pick("posemb", None, None, "no position-embedding array: big_vision's fixed sin-cos ones "
                              "are computed, not stored (posemb='sincos2d_big_vision'; or 'none')")
        if posemb == "sincos2d":  # no .npz writer computes vitkit's own table: this hint is always another model
            raise ValueError(f"{path}: posemb='sincos2d' is vitkit's own sin-cos table (frequencies T^(-k/(D/4)), y "
                             "first); an .npz without a stored table is big_vision's, whose table differs "
                             "(T^(-k/(D/4-1)), x first): give posemb='sincos2d_big_vision' (or 'none')")
        if posemb not in ("sincos2d_big_vision", "none"):
            raise ValueError(f"{path}: posemb={posemb!r} was given, but the file stores no learned position embeddings")
        side = choices.pick("img_size", None, None, "the image size of a file without stored position embeddings")
        img_size = (side, side) if isinstance(side, int) else tuple(side)
    else:
        posemb = choices.pick("posemb", "learn1d")  # a table in the file: a posemb hint must agree with it
        pos = require(a, posemb_key, path, 3, "array")
        n = pos.shape[1]
        # big_vision adds E_pos to the patches, then prepends the class token: a square count beside a class token
        patches_only = token and posemb_key == "pos_embedding" and math.isqrt(n) ** 2 == n
        stored = _sidecar_img_size(path)
        if square_side(n - int(token and not patches_only)) is None and stored is not None:
            # a non-square grid: the file cannot say its shape, vitkit's sidecar does (the size it was saved at)
            grid = (stored[0] // stride, stored[1] // stride)
            patches_only = token and posemb_key == "pos_embedding" and n == grid[0] * grid[1]
            if n - int(token and not patches_only) != grid[0] * grid[1]:
                raise ValueError(f"{path}: {posemb_key!r} holds {n} positions; its sidecar's {stored[0]}x{stored[1]} px "
                                 f"is a {grid[0]}x{grid[1]} grid")
        else:
            grid = square_grid(n - int(token and not patches_only), path, posemb_key)
        img_size = (grid[0] * stride, grid[1] * stride)
    rep = a["pre_logits/kernel"].shape[-1] if "pre_logits/kernel" in a else None
    cfg = ViTConfig(
        img_size=img_size,
        patch_size=P,
        in_chans=in_chans,
        num_classes=a["head/kernel"].shape[-1] if "head/kernel" in a else 0,
        width=D,
        depth=depth,
        num_heads=choices.pick("num_heads", int(q.shape[1])),
        mlp_dim=mlp.shape[1],
        pooling=choices.pick("pooling", pooling),
        posemb=posemb,
        representation_size=rep,
        ln_eps=choices.pick("ln_eps", None, 1e-6, "the original code's LayerNorm eps"),
        gelu=choices.pick("gelu", None, "tanh", "the original code's GELU is the tanh approximation"),
        resnet_layers=layers,
        resnet_width=width_factor,
    )
    return cfg, names, posemb_key or POSEMB_KEYS[1], patches_only


def npz_to_state(
    a: dict[str, np.ndarray], table: KeyTable, own: dict[str, torch.Tensor], path: Path, heads: int
) -> dict[str, torch.Tensor]:
    """Convert the arrays named by `table` to a vitkit state dict; any array left over is an error."""
    return gather_state(
        a,
        table,
        own,
        path,
        lambda kind, arr: torch.from_numpy(np.ascontiguousarray(NPZ_TO_TORCH[kind](arr))),
        lambda kind, shape: _to_npz(kind, np.zeros(shape, dtype=np.float32), heads).shape,
    )


def load_npz(path: str | Path, hints: dict[str, Any] | None = None) -> VisionTransformer:
    """Load an original vit_jax / big_vision `.npz` (or a folder holding `model.npz`), eval mode."""
    file = _npz_file(Path(path)) or Path(path)
    arrays = _unstack_scan(_strip_prefix(read_npz(file), file))
    choices = Choices(file, hints)
    cfg, names, posemb_key, patches_only = infer_config(arrays, file, choices)
    pre = read_sidecar(file, cfg, choices)
    choices.record(cfg)
    model = built_to_load(VisionTransformer, cfg)
    own = model.state_dict()
    state = npz_to_state(arrays, key_table(cfg, names, posemb_key, patches_only), own, file, cfg.num_heads)
    load_state_checked(model, state, file)
    run_at_input_size(model, pre.img_size, sidecar_path(file), "sidecar's input size")  # a table kept at its own grid
    model.preprocess = pre
    return model.eval()


# ----------------------------------------------------------------------------- writing
def model_to_npz(model: VisionTransformer) -> dict[str, np.ndarray]:
    """The model's weights as released-style npz arrays (float32)."""
    cfg = model.config
    if cfg.posemb != "learn1d" or variant_parts(cfg):
        raise ValueError("the .npz format stores a plain ViT with learned 1D position embeddings at the input; this "
                         f"model has {'; '.join([f'posemb={cfg.posemb!r}'] + variant_parts(cfg))}: save it in vitkit's format")
    if cfg.gelu != "tanh" or cfg.ln_eps != 1e-6:
        raise ValueError(
            f"the .npz format implies the original numerics (tanh GELU, LayerNorm eps 1e-6); this model uses "
            f"gelu={cfg.gelu!r}, ln_eps={cfg.ln_eps:g}, so its outputs would change; save it as 'vitkit', 'hf' or 'timm'"
        )
    if not cfg.qkv_bias:
        raise ValueError("the .npz format has q/k/v biases; this model was built with qkv_bias=False")
    own = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    table = key_table(cfg)
    check_consumed(model, table_keys(table), "npz")
    kinds = {nkey: kind for _, nkey, kind in table}
    tensors = split_chunks(own, table)
    return {k: np.ascontiguousarray(_to_npz(kinds[k], t.numpy(), cfg.num_heads)) for k, t in tensors.items()}


def save_npz(model: VisionTransformer, out: Path) -> Path:
    """Write `out` (a `.npz` path) or `out/model.npz` with the released files' key names. Unmerged LoRA adapters
    are written merged (said in the log and in the sidecar's "merged_lora"); a tensor the key table does not write
    is refused by name (formats/writable.py)."""
    file = out if out.suffix == ".npz" else out / NPZ_NAME
    model = writable(model, "npz")
    arrays = model_to_npz(model)
    merged = {MERGED_KEY: model.config.extra[MERGED_KEY]} if MERGED_KEY in model.config.extra else {}

    digest = ""

    def write(tmp: Path) -> None:
        nonlocal digest
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        digest = file_sha256(tmp)

    atomic_write_with(file, write)
    # the sidecar names the .npz it belongs to: a kill between the two writes leaves a pair the reader refuses
    atomic_write_text(sidecar_path(file), json.dumps({"format": SIDECAR_FORMAT, "npz_sha256": digest,
                                                      "preprocess": model.preprocess.to_dict(), **merged}, indent=2) + "\n")
    return file


# The .npz holds arrays only: the model's preprocessing (size, mean/std, crop, interpolation, labels) travels in a
# JSON sidecar beside it, `<name>.vitkit.json`; an .npz without one gets the original code's [-1, 1] scaling.
SIDECAR_FORMAT = "vitkit-npz-sidecar"


def sidecar_path(file: Path) -> Path:
    return file.with_name(file.stem + ".vitkit.json")


def _sidecar_img_size(file: Path) -> tuple[int, int] | None:
    """The image size vitkit's sidecar records for `file` (None without one, or without a readable size); the
    sidecar itself is checked in full by `read_sidecar`."""
    side = sidecar_path(file)
    if not side.is_file():
        return None
    doc = read_json(side, "preprocessing sidecar")
    size = doc.get("preprocess", {}).get("img_size") if isinstance(doc, dict) and isinstance(doc.get("preprocess"),
                                                                                             dict) else None
    if isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size):
        return size[0], size[1]
    return None


def read_sidecar(file: Path, cfg: ViTConfig, choices: Choices) -> PreprocessConfig:
    """The preprocessing of an .npz: from its sidecar, else the default, logged as assumed."""
    side = sidecar_path(file)
    if not side.exists():
        choices.assumed["preprocess"] = ("mean = std = 0.5 (pixels scaled to [-1, 1]), resize without crop, no class "
                                         f"names: the original code's; an .npz stores no preprocessing ({side.name} "
                                         "absent)")
        return PreprocessConfig(img_size=cfg.img_size, mean=(0.5,) * cfg.in_chans, std=(0.5,) * cfg.in_chans)
    doc = read_json(side, "preprocessing sidecar")
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT or not isinstance(doc.get("preprocess"), dict):
        raise ValueError(f"{side}: not a vitkit .npz sidecar (format {SIDECAR_FORMAT!r} with a 'preprocess' object)")
    if "npz_sha256" in doc and doc["npz_sha256"] != file_sha256(file):
        raise ValueError(f"{side} belongs to another {file.name} (the SHA-256 it records differs): a write killed "
                         f"between the two files, or {file.name} replaced; delete {side.name} to load the weights with "
                         "the default preprocessing, or write the model again")
    try:
        pre = PreprocessConfig.from_dict(doc["preprocess"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{side}: {e}") from e
    kept = cfg.posemb == "learn1d"  # a table the model keeps, run at the preprocessing's size (run_at_input_size)
    if (pre.img_size != cfg.img_size and not kept) or pre.channels != cfg.in_chans:
        raise ValueError(f"{side}: preprocessing for {pre.img_size} px, {pre.channels} channels; the model in {file.name} "
                         f"takes {cfg.img_size} px, {cfg.in_chans} channels")
    if pre.labels and len(pre.labels) != cfg.num_classes:
        raise ValueError(f"{side}: {len(pre.labels)} labels for a {cfg.num_classes}-way head")
    return pre
