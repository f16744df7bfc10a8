"""Checkpoint formats: detect, load and save. `load_pretrained` / `save_pretrained` are the public API.

Each container format lives in its own file: native.py (vitkit's folder format), hf.py (Hugging Face
folders), timm.py (timm state dicts), npz.py (the original vit_jax / big_vision files), bit.py (the
BiT baseline's released .npz). docs/checkpoints.md says what each reads and what it assumes.
Loaders register in `LOADERS` as (name, detector, loader), tried in order; savers in `SAVERS`.
The checkpoint families beyond the plain ViT (DeiT, DINOv2, CLIP, SigLIP, ...) are one file each in
families/, whose `__init__.py` is their registry: a new family is added there, not here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from vitkit.formats.bit import is_bit_npz, load_bit_npz
from vitkit.formats.hf import HF_MODEL_TYPES, is_hf_dir, load_hf, save_hf
from vitkit.formats.hub import push_folder, resolve_checkpoint
from vitkit.formats.model_card import CARD_NAME, model_card, write_card
from vitkit.formats.native import is_native_dir, load_native, save_native
from vitkit.formats.npz import is_npz, load_npz, save_npz
from vitkit.formats.sharded import is_weights_file
from vitkit.formats.timm import is_timm, load_timm, save_timm
from vitkit.models.hub_api import set_checkpoint_io
from vitkit.models.resnet import ResNetV2
from vitkit.models.vit import VisionTransformer
from vitkit.utils.files import claim_lock, read_json, release_lock

Detector = Callable[[Path], bool]
Loader = Callable[[Path, dict[str, Any]], nn.Module]
Saver = Callable[..., Path]  # (model, out, **options: max_shard_size for the vitkit and hf formats)
Model = VisionTransformer | ResNetV2

LOADERS: list[tuple[str, Detector, Loader]] = [
    ("vitkit", is_native_dir, load_native),
    ("hf", is_hf_dir, load_hf),
    ("bit", is_bit_npz, load_bit_npz),  # before "npz": both are .npz files, told apart by their keys
    ("npz", is_npz, load_npz),
    ("timm", is_timm, load_timm),
]
SAVERS: dict[str, Saver] = {"vitkit": save_native, "hf": save_hf, "timm": save_timm, "npz": save_npz}
SHARDED_FORMATS = ("vitkit", "hf")  # their savers take max_shard_size


def detect_format(path: str | Path) -> str:
    """Name of the checkpoint format at `path`, or a ValueError that says what was found."""
    p = Path(path)
    if not p.exists():
        old = interrupted_copy(p)
        raise FileNotFoundError(f"no checkpoint at {p}" + (
            f" (a replace of it was interrupted: the old checkpoint is in {old}; the next write of {p.name} restores "
            "it, or rename it back)" if old else ""))
    doc: Any = None
    if p.is_dir() and ((p / "config.json").exists() or (p / "config.json").is_symlink()):  # a folder format: its
        # config must be readable JSON, from a regular file of bounded size (never a FIFO's wait, never /dev/zero)
        doc = read_json(p / "config.json", "checkpoint's config")  # bounded: size, depth, a regular file
        if not isinstance(doc, dict):
            raise ValueError(f"{p / 'config.json'}: expected a JSON object, found {type(doc).__name__}")
    for name, detect, _ in LOADERS:
        if detect(p):
            return name
    if isinstance(doc, dict) and doc.get("model_type") in HF_MODEL_TYPES:  # a family vitkit reads, without weights
        raise FileNotFoundError(f"{p}: a transformers {doc['model_type']!r} folder without weights (no "
                                "model.safetensors, pytorch_model.bin or a sharded save's index): only its config")
    if isinstance(doc, dict) and isinstance(doc.get("model_type"), str):  # a transformers folder of another model
        raise ValueError(f"{p}: a transformers {doc['model_type']!r} model, which vitkit does not build; it reads the "
                         f"ViT families {', '.join(HF_MODEL_TYPES)} (docs/checkpoints.md)")
    if p.is_dir() and (p / "model").is_dir() and any(detect(p / "model") for _, detect, _ in LOADERS):
        raise ValueError(f"{p}: a run folder, not a checkpoint: its model is {p / 'model'} (use OUT/model)")
    if p.is_dir() and (p / "adapter_config.json").is_file():
        raise ValueError(f"{p}: a LoRA adapter folder, not a checkpoint: put the adapters back on their base with "
                         f"vitkit.formats.adapters.load_adapters({str(p)!r}), or use the run's merged OUT/model")
    raise ValueError(f"{p}: not a checkpoint format vitkit can read (known: {[n for n, _, _ in LOADERS]})")


def load_pretrained(
    path: str | Path,
    *,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    pooling: str | None = None,
    num_heads: int | None = None,
    gelu: str | None = None,
    ln_eps: float | None = None,
    layer_scale: float | None = None,
    posemb: str | None = None,
    revision: str | None = None,
    allow_pickle: bool = False,
) -> Model:
    """Load any supported checkpoint, in eval mode: a local path, or a Hugging Face hub id ("facebook/dinov2-small",
    at `revision`) fetched through huggingface_hub's cache (formats/hub.py; `allow_pickle`: pytorch_model.bin too).

    `num_classes` swaps in a zero-initialised K-way head and drops pre_logits (paper §3.2);
    `img_size` resamples the position embeddings in 2D for a new resolution (§3.2).
    `num_heads`, `gelu`, `ln_eps`, `pooling`, `layer_scale` (LayerScale's initial value) and `posemb` give what a
    file's shapes do not determine (a bare timm state dict does not record its head count, nor whether a class token
    was pooled; a big_vision `.npz` with fixed sin-cos position embeddings stores neither them nor its image size:
    `posemb="sincos2d_big_vision", img_size=...`); a value the file does record must agree with it. What
    neither the file nor these give takes the format's documented default, logged and kept in
    `model.config.extra["assumed"]`, or is refused with a message naming it (docs/checkpoints.md).
    """
    p = resolve_checkpoint(path, revision, allow_pickle)
    fmt = detect_format(p)
    loader = next(load for name, _, load in LOADERS if name == fmt)
    hints = {"num_heads": num_heads, "gelu": gelu, "ln_eps": ln_eps, "pooling": pooling, "layer_scale": layer_scale,
             "posemb": posemb, "img_size": img_size}
    try:
        model = loader(p, hints)
    except (ValueError, TypeError, KeyError) as e:  # every message names the file it is about
        msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise ValueError(msg if str(p) in msg else f"{p}: {msg}") from e
    labels, k = model.preprocess.labels, getattr(model.config, "num_classes", 0)
    if k and labels and len(labels) != k:  # else predict would print names for some outputs and indices for others
        raise ValueError(f"{p}: {len(labels)} class names (labels) for a {k}-way head; give one per output")
    if pooling is not None and pooling != model.config.pooling:
        raise ValueError(f"{p}: the checkpoint uses {model.config.pooling!r} pooling, {pooling!r} was asked for")
    if p != Path(path) and isinstance(getattr(model.config, "extra", None), dict):  # from the hub: its repo, commit
        model.config.extra["pretrained"] = {"hf_hub_id": str(path), "revision": p.name}  # (not a saved record's)
    return adapt(model, num_classes, img_size).eval()


def adapt(model: Model, num_classes: int | None = None, img_size: int | tuple[int, int] | None = None) -> Model:
    """Prepare a loaded model for transfer (§3.2): a new zero-initialised `num_classes`-way head (pre_logits
    dropped, stored labels cleared) and position embeddings resampled in 2D for `img_size`."""
    if num_classes is not None:
        model.reset_head(num_classes, drop_pre_logits=True)
        model.preprocess.labels = []
    if img_size is not None:
        model.set_img_size(img_size)  # the preprocessing follows: its size is the model's own
    return model


def save_pretrained(model: nn.Module, out: str | Path, format: str = "vitkit",
                    max_shard_size: int | str | None = None) -> Path:
    """Write `model` in `format` at `out` and return the path written.

    "vitkit" and "hf" write a folder, its weights sharded above `max_shard_size` as transformers does (default
    transformers' 50GB; formats/sharded.py); "npz" writes `out` if it ends in .npz, else `out/model.npz`
    (released key names); "timm" writes `out` if it ends in .safetensors, else a timm hub folder.
    Every format: a model with unmerged LoRA adapters is written merged (a merged copy; logged, and recorded in the
    written config as "merged_lora"), and a tensor of the model's state dict that the format's key table does not
    write is refused by name, nothing written (formats/writable.py).
    """
    if format not in SAVERS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose one of {sorted(SAVERS)}")
    if isinstance(model, ResNetV2) and format != "vitkit":
        raise ValueError(f"a BiT ResNet is saved in vitkit's format (the {format} format holds ViTs only)")
    if not isinstance(model, (VisionTransformer, ResNetV2)):
        raise ValueError(f"save_pretrained writes vitkit's ViTs and BiT ResNets, got {type(model).__name__}")
    out = Path(out)
    if max_shard_size is not None and format not in SHARDED_FORMATS:
        raise ValueError(f"max_shard_size: the {format} format is not written sharded (the vitkit and hf formats are)")
    if (format == "npz" and out.suffix == ".npz") or (format == "timm" and out.suffix == ".safetensors"):
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = out.parent / f".{out.name}.lock"
        fd = claim_lock(lock, f"checkpoint file {out}")  # one writer per file: a killed one's temporaries go
        try:
            for name in (out, out.with_suffix(".vitkit.json")):  # (the .npz's sidecar)
                remove_killed_writes(name)
            return SAVERS[format](model, out)  # one file (and the .npz's sidecar), each written atomically
        finally:
            release_lock(lock, fd)
    sizes = {"max_shard_size": max_shard_size} if max_shard_size is not None else {}

    def write(tmp: Path) -> Path:
        written = SAVERS[format](model, tmp, **sizes)
        if format in ("hf", "timm"):  # the formats published on the hub: a model card beside (formats/model_card.py)
            write_card(model, tmp, format, keep=out)
        return written

    return replace_folder(out, write)


# The folder formats a hub id loads back (formats/hub.py fetches config.json, preprocessor_config.json, the weights)
PUSHED_FORMATS = ("vitkit", "hf", "timm")


def push_to_hub(model: nn.Module | str | Path, repo_id: str, *, format: str = "vitkit", revision: str | None = None,
                private: bool = False, commit_message: str | None = None) -> str:
    """Publish a model, or a checkpoint folder saved in the vitkit, hf or timm format, to the Hugging Face hub repo
    `repo_id` ("org/name"; created when missing, `private` then), on branch `revision` (default main), with a model
    card (formats/model_card.py) unless the folder keeps a README.md; returns the commit id. A folder is loaded
    first, by the same checks as any checkpoint, so broken weights are never published; a model is saved in
    `format` into a temporary folder and that is pushed. `load_pretrained(repo_id, revision=...)` reads it back."""
    if isinstance(model, (str, Path)):
        folder = Path(model)
        if not folder.is_dir():
            raise NotADirectoryError(20, "push takes a checkpoint folder (save_pretrained's, in the vitkit, hf or "
                                     "timm format)", str(folder))
        fmt = detect_format(folder)
        if fmt not in PUSHED_FORMATS:
            raise ValueError(f"{folder}: a {fmt} checkpoint; push takes a folder in the {', '.join(PUSHED_FORMATS)} "
                             "format (a hub id loads those back): convert it first (vitkit convert --to hf)")
        loaded = load_pretrained(folder)
        card = None if (folder / CARD_NAME).exists() else model_card(loaded, fmt)
        return push_folder(folder, repo_id, card=card, revision=revision, private=private,
                           commit_message=commit_message)
    if format not in PUSHED_FORMATS:
        raise ValueError(f"push_to_hub: format {format!r}; a hub id loads back the {', '.join(PUSHED_FORMATS)} formats")
    with tempfile.TemporaryDirectory(prefix="vitkit-push-") as tmp:
        out = save_pretrained(model, Path(tmp) / repo_id.rsplit("/", 1)[-1], format=format)
        return push_folder(out, repo_id, card=model_card(model, format), revision=revision, private=private,
                           commit_message=commit_message)


# The files a checkpoint folder of any format holds: the only ones `replace_folder` may replace.
CHECKPOINT_FILES = {"config.json", "model.safetensors", "preprocessor_config.json", "pytorch_model.bin", "model.npz",
                    "model.vitkit.json"}


def interrupted_copy(out: Path) -> Path | None:
    """The old checkpoint a replace of `out` killed between its two renames left (`.out.*.old.tmp`), when `out`
    itself is missing."""
    import glob

    if out.exists() or out.is_symlink():
        return None
    olds = [p for p in out.parent.glob(f".{glob.escape(out.name)}.*.old.tmp") if p.is_dir() and not p.is_symlink()]
    return max(olds, key=lambda p: p.stat().st_mtime) if olds else None


def restore_interrupted(out: Path) -> None:
    """Put back the old checkpoint of an interrupted replace (see `interrupted_copy`), saying so."""
    import logging
    import os

    old = interrupted_copy(out)
    if old is not None:
        os.rename(old, out)
        logging.getLogger("vitkit").warning("%s: restored the checkpoint an interrupted replace left in %s", out,
                                            old.name)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system or file system lacks it."""
    import ctypes
    import os

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def remove_killed_writes(out: Path) -> list[Path]:
    """Remove the hidden temporaries (`.NAME.XXXX.tmp`, files or folders, never through a link) a killed write of
    `out` left beside it. Call it only while holding `out`'s lock (`claim_lock`): every live writer holds it, so
    what is left is a dead one's."""
    import glob
    import shutil

    removed = []
    for stale in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        if stale.is_symlink():
            continue
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


def replace_folder(out: Path, write: Callable[[Path], Path]) -> Path:
    """Write a checkpoint folder as a whole: `write(tmp)` fills a new temporary folder beside `out`, which then
    takes `out`'s place, so a kill at any point leaves the old checkpoint or the new one, never a mix of the two
    (C's weights with D's old config.json). Other files of the user's in `out` are kept: hard-linked (else copied)
    into the new folder before it takes the old one's place, so they exist at every moment; a sub-folder of the
    user's is refused, not replaced. Returns `write`'s path, moved to `out`."""
    import os

    given = out
    if out.is_symlink() and out.is_dir():  # a link to a folder: the folder it names is replaced, the link kept
        out = Path(os.path.realpath(out))
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(20, "a checkpoint folder was to be written where a file is", str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    # one writer per folder: a second save_pretrained / convert into it is refused naming the first one's pid (it
    # would otherwise take the first one's temporary folder for a killed write's and delete it)
    lock = out.parent / f".{out.name}.lock"
    fd = claim_lock(lock, f"checkpoint folder {given}")
    try:
        return _replace_folder(given, out, write)
    finally:
        release_lock(lock, fd)


def _replace_folder(given: Path, out: Path, write: Callable[[Path], Path]) -> Path:
    """`replace_folder` once the folder's lock is held (`out`: `given` with a link to a folder resolved)."""
    import os
    import shutil
    import tempfile

    foreign = [f for f in out.iterdir() if f.name not in CHECKPOINT_FILES and not is_weights_file(f.name) and not (
        f.name.startswith(".") and f.name.endswith(".tmp"))] if out.is_dir() else []
    dirs = sorted(f.name for f in foreign if f.is_dir() and not f.is_symlink())
    if dirs:
        raise FileExistsError(f"{out} holds folders that are not a checkpoint's ({', '.join(dirs[:5])}); a "
                              "checkpoint folder is replaced as a whole: move them, or choose another folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    restore_interrupted(out)
    remove_killed_writes(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old.tmp")
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)
        written = write(tmp)
        for f in foreign:  # the user's own files come along
            if not (tmp / f.name).exists():
                try:
                    os.link(f, tmp / f.name, follow_symlinks=False)
                except OSError:
                    shutil.copy2(f, tmp / f.name, follow_symlinks=False)
        if not (out.exists() and _exchange(tmp, out)):  # one atomic swap where the system has it (Linux)
            if out.exists():
                os.rename(out, old)  # (a kill before the next rename: the next write restores `old`)
            os.rename(tmp, out)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    return given / written.relative_to(tmp) if written != tmp else given


set_checkpoint_io(load_pretrained, save_pretrained, push_to_hub)  # Model.from_pretrained / model.save_pretrained call these
