"""Helpers shared by the foreign-format loaders: shape checks, grid inference, state unwrapping."""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from vitkit.models.base import no_random_init
from vitkit.models.posemb import square_side
from vitkit.models.registry import VARIANTS
from vitkit.utils.files import check_regular_file


def expect_shape(source: Path, key: str, found: tuple[int, ...], expected: tuple[int, ...]) -> None:
    """Raise a ValueError naming the file, the key and both shapes unless they agree."""
    if tuple(found) != tuple(expected):
        raise ValueError(f"{source}: tensor {key!r} has shape {tuple(found)}, expected {tuple(expected)}")


def require(state: dict[str, Any], key: str, source: Path, ndim: int | None = None, what: str = "tensor") -> Any:
    """`state[key]`, or a ValueError naming the file and the missing key (and a bad rank)."""
    if key not in state:
        raise ValueError(f"{source}: missing {what} {key!r}")
    value = state[key]
    if ndim is not None and value.ndim != ndim:
        raise ValueError(f"{source}: {what} {key!r} has shape {tuple(value.shape)}, expected a {ndim}-D array")
    return value


def square_grid(num_patches: int, source: Path, key: str) -> tuple[int, int]:
    """The (g, g) grid of a position embedding with g*g patch rows (files store no image size)."""
    side = square_side(num_patches)
    if side is None:
        raise ValueError(
            f"{source}: {key!r} holds {num_patches} patch positions, not a square grid; "
            "the image size cannot be recovered from the file"
        )
    return (side, side)


def appendix_parts(cfg: Any) -> list[str]:
    """The paper's appendix D variants of a ViT config that the foreign formats (npz, timm, HF) cannot hold; the
    families' options are theirs to name (`families.variant_parts`)."""
    parts = []
    if cfg.posemb_placement != "input":
        parts.append(f"posemb_placement={cfg.posemb_placement!r} (position embeddings added at every layer)")
    if cfg.block != "global":
        parts.append(f"block={cfg.block!r} (Axial-ViT's row and column blocks)")
    return parts


def resnet_width_factor(root_channels: int) -> float:
    """The ResNet width factor w of a root conv with 64 x w output channels (0.5, 1, 2, ...)."""
    w = root_channels / 64
    return int(w) if w == int(w) else w


def units_per_stage(keys: Iterable[str], stage_prefix: Callable[[int], str], unit_suffix: str) -> tuple[int, ...]:
    """ResNet units per stage, read from key names: stage s holds the keys that start with `stage_prefix(s)`
    (s = 0, 1, ... until a stage has none) and each of its units one key ending in `unit_suffix`."""
    keys = list(keys)
    counts: list[int] = []
    while True:
        prefix = stage_prefix(len(counts))
        n = sum(1 for k in keys if k.startswith(prefix) and k.endswith(unit_suffix))
        if n == 0:
            return tuple(counts)
        counts.append(n)


# transformers' hidden_act values -> vitkit's GELU flavour ("gelu_new"/"gelu_fast"/"gelu_pytorch_tanh" are the tanh
# formula); the families' transformers classes (formats/families/) also take CLIP's "quick_gelu"
HF_ACTS = {"gelu": "exact", "gelu_python": "exact", "gelu_new": "tanh", "gelu_fast": "tanh", "gelu_pytorch_tanh": "tanh",
           "gelu_python_tanh": "tanh"}
ACT_NAMES = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}  # vitkit's GELU -> hidden_act
# values a file's tensor shapes do not determine; the image size is one only where no E_pos table gives the grid
HINTS = ("num_heads", "gelu", "ln_eps", "pooling", "layer_scale", "posemb")
GRID_HINTS = ("img_size",)  # read by a loader that needs it; elsewhere it is load_pretrained's resampling

log = logging.getLogger("vitkit")


class Choices:
    """The values a loader needs that tensor shapes do not determine (`HINTS`), and where each came from.

    `pick` takes the file's own value (metadata) when it has one, else the caller's hint (`load_pretrained(...,
    num_heads=...)`, `--num-heads`), else the documented default of the format, which is logged and kept in
    `model.config.extra["assumed"]`; with no default it refuses with a message naming the file and the key."""

    def __init__(self, source: Path, hints: dict[str, Any] | None = None) -> None:
        self.source = source
        self.hints = {k: v for k, v in (hints or {}).items() if v is not None}
        unknown = sorted(set(self.hints) - set(HINTS) - set(GRID_HINTS))
        if unknown:
            raise ValueError(f"unknown loading hint(s) {unknown}; known: {list(HINTS)}")
        self.assumed: dict[str, str] = {}

    def pick(self, key: str, from_file: Any = None, default: Any = None, rule: str = "") -> Any:
        hint = self.hints.get(key)
        if from_file is not None:
            if hint is not None and hint != from_file:
                raise ValueError(f"{self.source}: the file says {key}={from_file!r}, but {key}={hint!r} was given")
            return from_file
        if hint is not None:
            return hint
        if default is None:
            raise ValueError(f"{self.source}: {key} cannot be read from this file ({rule}); give it: "
                             f"load_pretrained(..., {key}=...) or --{key.replace('_', '-')}")
        self.assumed[key] = f"{default!r}: {rule}"
        return default

    def agree(self, cfg: Any, what: str = "model") -> None:
        """For a file that records its whole config: every hint must agree with it, and a hint for a value
        this kind of model does not have is an error."""
        for key in HINTS:
            if hasattr(cfg, key) and getattr(cfg, key) is None:  # the model has none (e.g. no LayerScale)
                if key in self.hints:
                    raise ValueError(f"{self.source}: {key}={self.hints[key]!r} was given, but the model has none")
            elif hasattr(cfg, key):
                self.pick(key, getattr(cfg, key))
            elif key in self.hints:
                raise ValueError(f"{self.source}: {key} was given, but a {what} model has no {key}")

    def record(self, cfg: Any) -> Any:
        """Keep the assumed values in the config (saved with the model) and log each one."""
        for key, why in self.assumed.items():
            log.warning("%s: %s is not in the file; assumed %s", self.source, key, why)
        if self.assumed:
            cfg.extra = {**cfg.extra, "assumed": dict(self.assumed)}
        return cfg


def config_count(vc: dict[str, Any], key: str, default: int, where: Path, kind: type = int) -> Any:
    """A transformers config.json's `key`: a whole number (`kind` float: any positive number), or an error naming it."""
    v = vc.get(key, default)
    ok = isinstance(v, int) if kind is int else isinstance(v, (int, float)) and v > 0
    if isinstance(v, bool) or not ok:
        raise ValueError(f"{where}: config.json {key} is {v!r}, expected a {'whole' if kind is int else 'positive'} "
                         "number")
    return v


# config.json numbers a ViT reads: (key, whole number?, may be 0); a string, a bool or a value out of range is
# refused naming the file and the key (never Python's "could not convert string to float")
CONFIG_NUMBERS = (("hidden_size", True, False), ("num_hidden_layers", True, False), ("num_attention_heads", True, False),
                  ("intermediate_size", True, False), ("num_channels", True, False), ("num_register_tokens", True, True),
                  ("layer_norm_eps", False, False), ("layerscale_value", False, True), ("mlp_ratio", False, False))


def check_config_numbers(vc: dict[str, Any], where: Path) -> None:
    """Every number of `CONFIG_NUMBERS` that config.json holds is one, of the right kind and range."""
    for key, whole, zero in CONFIG_NUMBERS:
        if key not in vc or vc[key] is None:
            continue
        v = vc[key]
        ok = not isinstance(v, bool) and (isinstance(v, int) if whole else isinstance(v, (int, float)) and
                                          math.isfinite(v)) and (v > 0 or (zero and v == 0))
        if not ok:
            want = f"whole number {'>= 0' if zero else '> 0'}" if whole else f"positive{' (or 0)' if zero else ''} number"
            raise ValueError(f"{where}: config.json {key} is {v!r}, expected a {want}")


def label_fields(model: Any) -> dict[str, Any]:
    """A transformers config.json's id2label / label2id of a classifier: its class names, or transformers' LABEL_i."""
    k = model.config.num_classes
    if not k:
        return {}
    labels = list(model.preprocess.labels)
    labels = labels if len(labels) == k else [f"LABEL_{i}" for i in range(k)]
    return {"id2label": {str(i): lab for i, lab in enumerate(labels)}, "label2id": {lab: i for i, lab in enumerate(labels)}}


def table1_heads(width: int) -> int | None:
    """The heads of the paper's Table 1 model of this width (Ti 3, S 6, B 12, L 16, H 16), else None."""
    return next((v["num_heads"] for v in VARIANTS.values() if v["width"] == width), None)


def checkpoint_limit() -> int:
    """The most bytes a weights file may hold (8 GiB, $VITKIT_MAX_CHECKPOINT_BYTES)."""
    env = os.environ.get("VITKIT_MAX_CHECKPOINT_BYTES", "").strip()
    return int(env) if env.isdigit() else 8 << 30


def read_tensors(path: Path, what: str = "weights", *, all_weights: bool = False) -> dict[str, torch.Tensor]:
    """The one door every tensor file passes (safetensors, or a weights-only PyTorch pickle: `.pth`, `.bin`, `.pt`):
    a regular file (never a FIFO, a device or a `/dev/zero` link: checked without blocking, before the reader opens
    it) of at most `checkpoint_limit()` bytes, read without unpickling code, and every tensor's values checked
    (`check_tensor_values`: no complex, no NaN or Inf). `all_weights`: every tensor is a weight of its own (an
    adapter's), so it must also be floating point; elsewhere the loader compares dtypes with the model's tensors."""
    path = Path(path)
    check_regular_file(path, checkpoint_limit(), what)
    state = _load_safetensors(path) if path.suffix == ".safetensors" else _torch_load(path)
    for key, t in state.items():
        check_tensor_values(key, t, None if all_weights else t, path)
    return state


def tensor_header(path: Path, what: str = "weights") -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """(tensor shapes, metadata) of a safetensors file from its header alone (nothing allocated), behind the same
    file checks as `read_tensors` (a regular file, bounded): what a loader compares a config with before it builds
    a model."""
    path = Path(path)
    check_regular_file(path, checkpoint_limit(), what)
    try:
        with safe_open(str(path), "pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ValueError(f"{path}: not a readable safetensors file (truncated or corrupt?): {e}") from e


def check_fits_weights(cfg: Any, held: int, where: Path | str) -> None:
    """Before a model is built: the ViT a config describes (config.json, a file's metadata, a transformers
    config's intermediate_size) must be about the size of the weights it comes with (`held` values); a config
    asking for 16M classes, 100 layers or a 262144-wide MLP beside a small file would allocate gigabytes first."""
    d = cfg.width
    asked = (cfg.depth * (4 * d * d + 2 * d * cfg.mlp_dim) + cfg.num_classes * (cfg.representation_size or d)
             + cfg.num_patches * d)
    if asked > 2 * held + (1 << 20):
        raise ValueError(f"{where}: describes a model of ~{asked:,} parameters (depth {cfg.depth}, width {d}, MLP "
                         f"{cfg.mlp_dim:,}, {cfg.num_classes:,} classes), but its weights hold {held:,} values")


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    """`torch.load(weights_only=True)`: never runs pickled code; a non-weights pickle is a clear error."""
    check_zip_sizes(path)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, IndexError,
            KeyError, TypeError, AttributeError, UnicodeDecodeError, RecursionError, MemoryError) as e:
        raise ValueError(f"{path}: {pickle_refusal(e)}") from e
    return unwrap_state(obj, path)


def check_zip_sizes(path: Path) -> None:
    """Before `torch.load`: a zip-format checkpoint's members may unpack to at most the checkpoint limit (8 GiB,
    $VITKIT_MAX_CHECKPOINT_BYTES) and none may be compressed far beyond what torch.save writes (it stores members
    uncompressed): a zip bomb is refused from its directory, before anything is inflated."""
    if not zipfile.is_zipfile(path):
        return
    limit = checkpoint_limit()
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # torch.load names the damage
    total = sum(i.file_size for i in infos)
    bomb = next((i for i in infos if i.compress_size and i.file_size > 1000 * i.compress_size), None)
    if total > limit or bomb is not None:
        why = (f"member {bomb.filename} unpacks {bomb.file_size:,} bytes from {bomb.compress_size:,}" if bomb else
               f"its members unpack to {total:,} bytes, over the limit of {limit:,}")
        raise ValueError(f"{path}: {why} (a zip bomb?); raise the limit with $VITKIT_MAX_CHECKPOINT_BYTES")


def pickle_refusal(e: BaseException) -> str:
    """Why `torch.load(weights_only=True)` refused a file, in vitkit's words: never torch's advice to
    unpickle it anyway (that could run code)."""
    text = str(e)
    if "Weights only load failed" in text or "GLOBAL" in text or "Unsupported operand" in text:
        m = re.search(r"(?:unsupported GLOBAL|Unsupported global: GLOBAL) ([\w.]+)", text, re.IGNORECASE)
        what = f" ({m.group(1)})" if m else ""
        return (f"not a weights-only PyTorch checkpoint: it holds pickled Python objects{what}, not only tensors, "
                "and vitkit never unpickles those (that could run code). Save the weights as a dict of tensors "
                "or as .safetensors")
    first = text.splitlines()[0] if text else type(e).__name__
    if re.search(r"weights_only|allow_pickle|unpickl", first, re.IGNORECASE):  # torch's advice to unpickle: never
        first = type(e).__name__
    return f"not a weights-only PyTorch checkpoint (truncated, or another format?): {first}"


def unwrap_state(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    """The tensor dict inside a training checkpoint ({'model': ...}, {'state_dict': ...}), `module.` stripped."""
    for wrapper in ("state_dict_ema", "model_ema", "state_dict", "model"):  # timm's load_checkpoint(use_ema=True)
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            others = [k for k in ("state_dict_ema", "model_ema", "state_dict", "model") if k != wrapper and
                      isinstance(obj.get(k), dict)]
            if wrapper.endswith("_ema"):  # two copies of the weights: say which one is read
                log.warning("%s: read the EMA copy of the weights (%r), as timm's load_checkpoint does by default"
                            "%s", path, wrapper, f"; the file also holds {', '.join(map(repr, others))}" if others
                            else "")
            obj = obj[wrapper]
            break
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"{path}: expected a dict of tensors, found {type(obj).__name__}")
    out: dict[str, torch.Tensor] = {}
    for k, v in obj.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{path}: entry {k!r} is a {type(v).__name__}, expected a tensor")
        if v.numel() and v.untyped_storage().nbytes() < v.numel() * v.element_size():  # stride 0 or overlapping
            raise ValueError(f"{path}: tensor {k!r} of shape {tuple(v.shape)} is a view of only "
                             f"{v.untyped_storage().nbytes():,} bytes (stride {tuple(v.stride())}): not saved weights, "
                             "and a model of that shape would be built for nothing")
        out[k[len("module.") :] if k.startswith("module.") else k] = v
    return out


def resample_warning(cfg: Any, how: str, target: str) -> None:
    """Log when `target` (a peer's model class) resamples E_pos to other input sizes otherwise (`how`, a
    `posemb_resample` value) than the model does; at the model's own size the outputs are equal."""
    if cfg.posemb_resample != how and cfg.posemb in ("learn1d", "learn2d", "factorized"):
        log.warning(
            "%s resamples the position embeddings to other input sizes by %r, this model by %r: outputs at other "
            "sizes differ slightly (the model's own size is exact)", target, how, cfg.posemb_resample)


# (vitkit key, file key, layout kind); a vitkit key `base#c` is chunk c of 3 of `base` (q, k, v of qkv).
KeyTable = list[tuple[str, str, str]]


def gather_state(
    src: dict[str, Any],
    table: KeyTable,
    own: dict[str, torch.Tensor],
    path: Path,
    to_torch: Callable[[str, Any], torch.Tensor],
    file_shape: Callable[[str, tuple[int, ...]], tuple[int, ...]],
    ignore: Iterable[str] = (),
) -> dict[str, torch.Tensor]:
    """Build a vitkit state dict from a file's tensors by walking `table`.

    Every error names the file and the file's own key: a missing tensor, a shape that does not fit
    (expected shape given in the file's layout), or a tensor no table entry accounts for.
    """
    state: dict[str, torch.Tensor] = {}
    pieces: dict[str, list[torch.Tensor]] = {}
    foreign = sorted(fkey for tkey, fkey, _ in table if tkey.partition("#")[0] not in own)
    if foreign:
        raise ValueError(f"{path}: unrecognised tensor(s) {', '.join(foreign[:6])}"
                         f"{f' (+{len(foreign) - 6} more)' if len(foreign) > 6 else ''}: a ViT of this shape has no such "
                         "parameters (another architecture or a variant vitkit does not build)")
    chunks = chunk_counts(table)
    for tkey, fkey, kind in table:
        base, _, chunk = tkey.partition("#")
        ref = own[base]
        expected = tuple(ref.shape) if not chunk else (ref.shape[0] // chunks[base], *ref.shape[1:])
        value = require(src, fkey, path)
        t = to_torch(kind, value)
        check_tensor_values(fkey, t, ref, path)  # before the cast: an int, bool or complex file tensor is refused
        t = t.to(ref.dtype)
        if tuple(t.shape) != expected:
            expect_shape(path, fkey, tuple(value.shape), file_shape(kind, expected))
        if chunk:
            pieces.setdefault(base, []).append(t)
        else:
            state[base] = t
    state.update({k: torch.cat(v, dim=0) for k, v in pieces.items()})
    left = sorted(set(src) - {f for _, f, _ in table} - set(ignore))
    if left:
        raise ValueError(f"{path}: unrecognised tensor {left[0]!r} ({len(left)} in all do not fit a ViT of this shape)")
    return state


def chunk_counts(table: KeyTable) -> dict[str, int]:
    """How many file tensors make each chunked vitkit tensor (`qkv.weight#0..2`: 3, a MAP head's `kv#0..1`: 2)."""
    counts: dict[str, int] = {}
    for tkey, _, _ in table:
        base, _, chunk = tkey.partition("#")
        if chunk:
            counts[base] = counts.get(base, 0) + 1
    return counts


def split_chunks(state: dict[str, torch.Tensor], table: KeyTable) -> dict[str, torch.Tensor]:
    """The inverse walk for writers: file key -> vitkit tensor (or its q/k/v chunk), layout unchanged."""
    out, chunks = {}, chunk_counts(table)
    for tkey, fkey, _ in table:
        base, _, chunk = tkey.partition("#")
        out[fkey] = state[base] if not chunk else state[base].chunk(chunks[base], dim=0)[int(chunk)]
    return out


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Load a safetensors file (through `read_tensors`), turning a truncated or corrupt file into an error that
    names it."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ValueError(f"{path}: not a readable safetensors file (truncated or corrupt?): {e}") from e


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (read in chunks): what a side file records of the weights it belongs to."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_tensor_values(key: str, t: torch.Tensor, ref: torch.Tensor | None, source: Path | str) -> None:
    """A saved tensor must have a dtype the model's tensor `ref` can have been saved with (no int, bool or complex
    weights cast silently; `ref` None: a weight, so floating point) and, for floats, only finite values (NaN or Inf
    weights make every prediction NaN)."""
    if t.is_complex():
        raise ValueError(f"{source}: tensor {key!r} is {t.dtype}; weights are real numbers, never complex (a damaged "
                         "or foreign file?)")
    if ref is None and not t.is_floating_point():
        raise ValueError(f"{source}: tensor {key!r} is {t.dtype}; weights are floating point (a damaged or foreign "
                         "file?)")
    if ref is not None and ref.is_floating_point() != t.is_floating_point():
        raise ValueError(f"{source}: tensor {key!r} is {t.dtype}; a model's {ref.dtype} tensor is never saved as "
                         "that (a damaged or foreign file?)")
    # a sum is finite only where every term is (NaN and Inf carry through a sum; finite values that overflow it
    # are then counted exactly): one reduction for the usual all-finite tensor, the count only for a suspect one
    if t.is_floating_point() and t.numel() and not math.isfinite(t.sum()):
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            raise ValueError(f"{source}: tensor {key!r} holds {bad:,} non-finite value(s) (NaN or Inf): a model "
                             "with such weights predicts nothing meaningful")


def built_to_load(cls: Callable[[Any], Any], cfg: Any) -> Any:
    """`cls(cfg)` without its random initial values (models.base.no_random_init: no draws, the global random
    generator left as it was), for a loader whose `load_state_checked` then overwrites every tensor."""
    with no_random_init():
        return cls(cfg)


def load_state_checked(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path) -> None:
    """`load_state_dict` that names the file and the first missing, unexpected or mis-shaped tensor."""
    own = model.state_dict()
    for key, ref in own.items():
        if key not in state:
            raise ValueError(f"{source}: missing tensor {key!r} (expected shape {tuple(ref.shape)})")
        if tuple(state[key].shape) != tuple(ref.shape):
            raise ValueError(
                f"{source}: tensor {key!r} has shape {tuple(state[key].shape)}, expected {tuple(ref.shape)}"
            )
        check_tensor_values(key, state[key], ref, source)
    extra = sorted(set(state) - set(own))
    if extra:
        raise ValueError(f"{source}: unexpected tensor {extra[0]!r} ({len(extra)} unexpected in all)")
    model.load_state_dict(state, strict=True)


def run_at_input_size(model: Any, size: tuple[int, int] | list[int], where: Path, what: str) -> None:
    """A checkpoint whose preprocessing outputs another size than its weights' grid (every DINOv2 hub folder:
    518 config, 224 crop; a timm folder whose pretrained_cfg input_size differs) runs, in its own library, with
    E_pos resampled from its own table to that grid (transformers' Dinov2Model on each forward, bicubic; with
    registers antialiased; timm antialiased bicubic). vitkit keeps the checkpoint's table as it came
    (`keep_position_table`: `config.posemb_grid`) and resamples from it once for each input size the model runs at
    (this one, a later `set_img_size`, a dynamic size) the family's way (`posemb_resample`); savers write the table
    back at its own grid. The input size is logged and kept in `config.extra`."""
    cfg = model.config
    size = (int(size[0]), int(size[1]))
    if size == tuple(cfg.img_size):
        return
    s = cfg.total_stride
    if size[0] % s or size[1] % s:
        raise ValueError(f"{where}: the {what} is {size[0]}x{size[1]}, not a multiple of the patch size {s}")
    old, how = tuple(cfg.img_size), cfg.posemb_resample
    if hasattr(model, "keep_position_table"):
        model.keep_position_table()
    model.set_img_size(size)
    kept = model.config.posemb_grid is not None if hasattr(model.config, "posemb_grid") else False
    note = (f"weights at {old[0]}x{old[1]}, {what} {size[0]}x{size[1]}: E_pos resampled to the "
            f"{model.config.grid_size[0]}x{model.config.grid_size[1]} grid ({how}, as the family's own library does "
            f"at that input){'; the table is kept at its own grid and saved so' if kept else ''}")
    model.config.extra = {**model.config.extra, "resampled_for_input": note}
    log.info("%s: %s", where, note)
