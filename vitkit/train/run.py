"""One entry point for pre-training and fine-tuning runs described by a run config (vitkit.train.config).

`run_experiment(cfg, out)` builds the data splits, the model (from the registry, or a pretrained
checkpoint with a new zero-initialised head and resampled position embeddings), the loader and the
Trainer; trains (resuming exactly with `resume=True`); evaluates the final (EMA) weights on the test
split; saves the model in vitkit's format with its preprocessing; writes curves.png.
`run_sweep` trains one run per learning rate and picks on the dev split, never on test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from vitkit import distributed as dist
from vitkit.data.base import match_channels, require_classes
from vitkit.data.config import DataConfig
from vitkit.data.datasets import Dataset, open_splits, synthetic
from vitkit.data.loader import StepLoader
from vitkit.inference.evaluate import eval_loader, evaluate_loader
from vitkit.models.lora import apply_lora, merge_lora
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.registry import create_model
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.train.config import ModelSpec, RunConfig, TrainConfig, flatten
from vitkit.train.distill import Teacher
from vitkit.train.engine import Trainer
from vitkit.train.metrics import plot_curves
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import FolderLock
from vitkit.utils.hardware import manual_seed
from vitkit.utils.memory import mmap_large_blocks


def _per_channel(v: Any, channels: int, what: str) -> tuple[float, ...]:
    v = [float(x) for x in (v if isinstance(v, list) else [v])]
    if len(v) == 1:
        v = v * channels
    if len(v) != channels:
        raise ValueError(f"data.{what} has {len(v)} values for {channels}-channel images")
    return tuple(v)


def _new_model(spec: ModelSpec, k: int, channels: int) -> nn.Module:
    """A model from the registry (training from scratch), with the [model] architecture keys as overrides."""
    return create_model(spec.name, **{"num_classes": k, "img_size": spec.size, "in_chans": channels, **spec.arch})


def check_config(cfg: RunConfig) -> None:
    """What a RunConfig's own validation cannot know, checked before any data is read or anything is written:
    the checkpoints it names exist, and the architecture it names builds (on the meta device, no weights)."""
    if not isinstance(cfg, RunConfig):
        raise TypeError(f"a run takes a RunConfig (vitkit.train.config.load_config), got {type(cfg).__name__}")
    from vitkit.formats.hub import is_hub_id  # a hub id is fetched when the run loads it (formats/hub.py)

    if cfg.teacher and not Path(cfg.teacher).exists() and not is_hub_id(cfg.teacher):
        raise FileNotFoundError(f"train.teacher: no checkpoint at {cfg.teacher}")
    spec = cfg.model
    if spec.pretrained:
        if not Path(spec.pretrained).exists() and not is_hub_id(spec.pretrained):
            raise FileNotFoundError(f"model.pretrained: no checkpoint at {spec.pretrained}")
        if spec.revision and Path(spec.pretrained).exists():
            raise ValueError(f"model.revision = {spec.revision!r} names a version of a hub repo, and model.pretrained "
                             f"{spec.pretrained} is a local path (it wins over a hub id of the same spelling)")
        return
    try:
        with torch.device("meta"):  # builds the architecture without allocating its weights
            meta = _new_model(spec, spec.num_classes or 1, spec.in_chans or cfg.data.channels)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"[model] {e}") from e
    n = sum(p.numel() for p in meta.parameters())
    need, have = TRAIN_BYTES_PER_PARAMETER * n, _memory_bytes()
    if have and need > have:
        raise ValueError(f"[model] {n:,} parameters need ~{need / 2**30:,.1f} GiB to train (fp32 weights, gradients "
                         f"and AdamW's two moments), more than this machine's {have / 2**30:,.1f} GiB of memory: "
                         "lower model.width, model.mlp_dim or model.depth")


TRAIN_BYTES_PER_PARAMETER = 16  # fp32 weight + gradient + AdamW's m and v, before any activation


def _memory_bytes() -> int:
    """This machine's physical memory in bytes (0 where the OS does not say)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def build_model(spec: ModelSpec, classes: list[str], channels: int, dcfg: DataConfig,
                notes: list[str] | None = None, source: nn.Module | None = None) -> nn.Module:
    """The model of a run, with `model.preprocess` set for its training resolution and classes.

    `notes` receives a line for each thing changed in a pretrained model (head, position embeddings). `source` is
    the checkpoint of model.pretrained when the caller has loaded it already (it is read once)."""
    from vitkit.formats import adapt, load_pretrained

    k = spec.num_classes or len(classes)
    if k < len(classes):  # a label beyond the head would fail mid-run
        raise ValueError(f"model.num_classes = {k}, but the data has {len(classes)} classes; leave it 0 to take the "
                         "data's count")
    size = spec.size
    if spec.pretrained:
        revision = {"revision": spec.revision} if spec.revision else {}
        model = source if source is not None else load_pretrained(spec.pretrained, **spec.hints, **revision)
        vit = isinstance(model, VisionTransformer)
        grid, classes_before = model.config.grid_size if vit else None, model.config.num_classes
        model = adapt(model, num_classes=k, img_size=size).train()
        if size is None and notes is not None:
            h, w = model.config.img_size
            notes.append(f"img_size: the checkpoint's own {h}x{w} (model.img_size not set)")
        if notes is not None:
            if vit and grid != model.config.grid_size:
                (gh, gw), (nh, nw) = grid, model.config.grid_size
                notes.append(f"resampled: E_pos {gh}x{gw} -> {nh}x{nw} (paper §3.2)")
            notes.append(f"replaced: the {classes_before}-way head by a new zero-initialised {k}-way head"
                         if classes_before else f"added: a new zero-initialised {k}-way head (the checkpoint has "
                         "none: a backbone)")
        mean, std = model.preprocess.mean, model.preprocess.std  # the checkpoint's own normalisation
        geometry = _checkpoint_geometry(model, dcfg, notes)
    else:
        model = _new_model(spec, k, channels)
        mean, std = None, None
        if spec.size_note() and notes is not None:
            notes.append(spec.size_note())
        geometry = {"crop_pct": float(dcfg.crop_pct) or None}
    if model.config.in_chans != channels and not (channels == 1 and model.config.in_chans == 3):  # grey: as RGB
        raise ValueError(f"the model takes {model.config.in_chans}-channel images, the data has {channels} channels")
    mean = mean or _per_channel(dcfg.mean, channels, "mean")
    std = std or _per_channel(dcfg.std, channels, "std")
    labels = list(classes) + [f"unused_{i}" for i in range(len(classes), k)]  # a larger head keeps the names
    if k > len(classes) and notes is not None:
        notes.append(f"note: model.num_classes = {k} > the data's {len(classes)} classes: outputs "
                     f"{len(classes)}..{k - 1} have no data (named unused_{len(classes)}, ...)")
    model.preprocess = PreprocessConfig(img_size=model.config.img_size, mean=mean, std=std, labels=labels, **geometry)
    if spec.grad_checkpointing:
        model.set_grad_checkpointing(True)
    return model


def add_lora(model: nn.Module, cfg: RunConfig, notes: list[str] | None = None) -> nn.Module:
    """Put the run's [lora] adapters on `model` (all else frozen but lora.train), noting what trains."""
    lc = cfg.lora.config()
    apply_lora(model, lc)
    n, total = (sum(p.numel() for p in model.parameters() if p.requires_grad or not only) for only in (True, False))
    if notes is not None:
        notes.append(f"LoRA: rank {lc.rank}, alpha {lc.alpha:g} on {', '.join(lc.targets)}; training "
                     f"{n / 1e6:.3f}M of {total / 1e6:.2f}M parameters ({100 * n / total:.2f}%: the adapters"
                     + "".join(f", {t}" for t in lc.train) + ")")
    return model


def _checkpoint_geometry(model: nn.Module, dcfg: DataConfig, notes: list[str] | None) -> dict[str, Any]:
    """How a fine-tuned checkpoint's evaluation resizes: its own resize + centre crop geometry and interpolation
    (a hub DINOv2: shorter side 256, crop 224, bicubic), unless the recipe sets data.crop_pct. A note the loader
    kept of an assumed preprocessing is dropped: the fine-tuned model's preprocessing is the one it was trained and
    evaluated with, not an assumption (the line in `notes` says where it came from)."""
    pre = model.preprocess
    if dcfg.crop_pct:
        geometry = {"crop_pct": float(dcfg.crop_pct), "interpolation": pre.interpolation}
        how = f"data.crop_pct {dcfg.crop_pct} (the recipe's)"
    else:
        geometry = {"crop_pct": pre.crop_pct, "crop_mode": pre.crop_mode, "crop_offset": pre.crop_offset,
                    "interpolation": pre.interpolation}
        how = "the checkpoint's"
    assumed = dict(model.config.extra.get("assumed", {}))
    was = assumed.pop("preprocess", None)
    if was is not None:
        extra = {k: v for k, v in model.config.extra.items() if k != "assumed"}
        model.config.extra = {**extra, **({"assumed": assumed} if assumed else {})}
    if notes is not None:
        crop = "no crop" if geometry["crop_pct"] is None else f"crop_pct {geometry['crop_pct']:.4g}"
        notes.append(f"preprocessing: {how} geometry ({crop}, {geometry['interpolation']}), the checkpoint's mean "
                     f"{list(pre.mean)} / std {list(pre.std)}" + (f" (assumed when it was read: {was})" if was else ""))
    return geometry


def _dry_run_config(cfg: RunConfig, steps: int) -> RunConfig:
    """A few steps of the recipe on synthetic data, batch 8 (micro-batches kept when accumulating)."""
    return cfg.updated({
        "schedule.steps": steps, "schedule.warmup_steps": min(cfg.train.warmup_steps, 1), "train.batch_size": 8,
        "train.grad_accum": 2 if cfg.train.grad_accum > 1 else 1, "train.eval_every": 0, "train.ckpt_every": 0,
        "train.log_every": 1, "data.num_workers": 0})


def _splits(cfg: RunConfig, dry_run: int) -> dict[str, Dataset]:
    if not dry_run:
        splits = open_splits(cfg.data)
        if cfg.objective == "classify":
            require_classes(splits["train"], cfg.data.path or cfg.data.name)
        return splits
    k = cfg.model.num_classes or 10
    ch = cfg.model.in_chans or cfg.data.channels
    size = cfg.model.size or (32, 32)  # a checkpoint's own size: the images are resized to it anyway
    return {"train": synthetic(k, size, ch, n=16), "test": synthetic(k, size, ch, n=8, seed=1)}


def fit_batch(cfg: RunConfig, n: int, world: int = 1) -> RunConfig:
    """`cfg` with train.batch_size shrunk to the training data when the batch is larger than the `n` examples
    (a small folder under a paper recipe's batch 512), to the largest multiple of grad_accum and the world size
    that fits; logged, and recorded in the run config (run_config.json), so a resume sees the same value."""
    t = cfg.train
    unit = math.lcm(t.grad_accum, world)
    fitted = n - n % unit
    if t.batch_size <= n or fitted < 1:
        return cfg
    logging.getLogger("vitkit").warning(
        "batch size %d is larger than the %d training examples: using batch %d (recorded in run_config.json; "
        "set it with --set train.batch_size=N, recipe key train.batch_size)", t.batch_size, n, fitted)
    return cfg.updated({"train.batch_size": fitted})


def _eval_loader(ds: Dataset, preprocess: PreprocessConfig, dcfg: DataConfig, patch: int = 0) -> StepLoader:
    """The evaluation loader of the [data] section: the model's square input, or with data.max_patches each image at
    its own aspect ratio, packed (NaViT; `patch`: the model's patch size)."""
    packer = dcfg.native_packer(preprocess, patch, train=False) if patch else None
    if packer is None:
        return eval_loader(ds, preprocess, dcfg.eval_batch_size, dcfg.num_workers)
    return StepLoader(ds, dcfg.eval_batch_size, packer, shuffle=False, num_workers=dcfg.num_workers)


def patch_of(model: nn.Module) -> int:
    """The model's patch size (a ViT's; 0 for a model without patches, which native resolution then refuses)."""
    return int(getattr(getattr(model, "config", None), "patch_size", 0) or 0)


def objective_model(model: nn.Module, cfg: RunConfig) -> nn.Module:
    """What the engine trains: the classifier itself, or (train.objective = "mpp") the ViT wrapped for
    masked patch prediction (§4.6); either way `model` is the ViT that gets saved and fine-tuned."""
    if cfg.objective == "classify":
        return model
    from vitkit.models.mpp import MaskedPatchPrediction

    m = cfg.mpp
    return MaskedPatchPrediction(model, model.preprocess.mean, model.preprocess.std, m.corrupt, m.replace_mask,
                                 m.replace_random, m.bits)


# Files a run writes in its folder; `overwrite=True` removes exactly these (nothing else of the user's).
RUN_FILES = ("metrics.jsonl", "train_state.pt", "run_config.json", "train_config.json", "result.json",
             "curves.png", "model", "tb", "adapter")
# Keys that may differ when a run is resumed without changing what it computes: the engine's own (as recipe
# keys) and the data loading's.
RESUME_FREE = {"description", "data.num_workers", "data.eval_batch_size", "data.max_pixels", "model.revision"} | {
    ".".join(key) for name, key in TrainConfig.recipe_fields().items() if name in Trainer.RESUME_FREE}


def _saved_flat(path: Path) -> dict[str, Any]:
    """The keys of a saved run_config.json, normalised as a RunConfig writes them (so a value spelled otherwise,
    e.g. clip_norm 0 for off, is not a difference); as written when it no longer reads as a RunConfig."""
    raw = json.loads(path.read_text())
    try:
        return RunConfig.from_sections(raw, str(path)).flat()
    except (ValueError, TypeError):
        return flatten(raw)


def prepare_run_folder(out: Path, cfg: RunConfig, resume: bool, force: bool, overwrite: bool) -> None:
    """Never overwrite a run silently: an existing run folder needs `resume` (checked against the saved
    recipe; `force` accepts differences) or `overwrite` (its run files are removed first)."""
    import shutil

    if out.exists() and not out.is_dir():
        raise NotADirectoryError(20, "the run folder is a file", str(out))
    present = [f for f in RUN_FILES if (out / f).exists()]
    if resume:
        if not (out / Trainer.STATE_NAME).is_file():
            raise FileNotFoundError(f"no training state to resume from at {out / Trainer.STATE_NAME}")
        saved_path = out / "run_config.json"
        if saved_path.is_file() and not force:
            try:
                saved = _saved_flat(saved_path)
            except ValueError as e:
                raise ValueError(f"{saved_path}: not readable JSON ({e}); resume with --force to skip the check") from e
            now = cfg.flat()
            diff = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
                    if k not in RESUME_FREE and saved.get(k) != now.get(k)]
            if diff:
                raise ValueError(f"{out} was trained with another recipe ({'; '.join(diff[:6])}"
                                 f"{'; ...' if len(diff) > 6 else ''}); resume with the same settings, or accept "
                                 "the new ones with --resume --force")
        return
    if present and not overwrite:
        raise FileExistsError(f"{out} already holds a run ({', '.join(present)}); continue it with --resume, "
                              "replace it with --overwrite, or choose another --out")
    doomed = _written_by_vitkit(out, present)
    for p in doomed:
        shutil.rmtree(p) if p.is_dir() else p.unlink()


# What vitkit writes inside the folders of a run: the model folder's files (save_pretrained) and TensorBoard's
# event files. `--overwrite` removes these and a folder left empty by that, never anything else of the user's.
_FOLDER_FILES = {"model": ("config.json", "model.safetensors", ".config.json.*.tmp", ".model.safetensors.*.tmp"),
                 "tb": ("events.out.tfevents.*",),
                 "adapter": ("adapter_config.json", "adapter_model.safetensors", ".adapter_config.json.*.tmp",
                             ".adapter_model.safetensors.*.tmp")}


def _written_by_vitkit(out: Path, present: list[str]) -> list[Path]:
    """The paths `--overwrite` removes from `out`, or a FileExistsError naming what vitkit did not write there
    (a user's own `model/` or `tb/` folder is never deleted, and nothing is removed when one is refused)."""
    doomed: list[Path] = []
    for name in present:
        p = out / name
        if name not in _FOLDER_FILES:
            if p.is_dir() and not p.is_symlink():
                raise FileExistsError(f"{p} is a folder, where a run keeps its file {name}; vitkit did not write "
                                      "it, so --overwrite leaves it: move it, or choose another --out")
            doomed.append(p)
            continue
        if p.is_symlink() or not p.is_dir():
            raise FileExistsError(f"{p} is not a folder vitkit wrote; --overwrite leaves it: move it, or choose "
                                  "another --out")
        ours = {f for pattern in _FOLDER_FILES[name] for f in p.glob(pattern) if f.is_file() and not f.is_symlink()}
        foreign = sorted(f.name for f in p.iterdir() if f not in ours)
        if foreign:
            raise FileExistsError(f"{p} holds files vitkit did not write ({', '.join(foreign[:5])}"
                                  f"{', ...' if len(foreign) > 5 else ''}); --overwrite removes only a run's own "
                                  "files: move them, or choose another --out")
        doomed.append(p)
    return doomed


def hub_commit(model: nn.Module, spec: ModelSpec) -> str | None:
    """The commit of model.pretrained's hub repo that `model` was loaded at (load_pretrained records it), or None
    when model.pretrained is not a hub id the model came from."""
    known = (getattr(model.config, "extra", None) or {}).get("pretrained") or {}
    return known.get("revision") if spec.pretrained and known.get("hf_hub_id") == spec.pretrained else None


def default_run_dir(cfg_ref: str | None, kind: str = "train") -> Path:
    """runs/<recipe>-<date>-<time>: a new folder per run, named after what it ran."""
    stem = Path(cfg_ref).stem if cfg_ref else kind
    return Path("runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def describe_run(model: nn.Module, splits: dict[str, Dataset], cfg: RunConfig, notes: list[str],
                 dry_run: bool = False) -> str:
    """The header printed before training: model, parameters, data sizes, what was resampled/replaced."""
    c = model.config
    n_params = sum(p.numel() for p in model.parameters())
    size = f"{c.img_size[0]}x{c.img_size[1]} px, {c.in_chans} ch"
    if isinstance(c, ViTConfig):
        arch = f"{c.name or 'ViT'} (width {c.width}, depth {c.depth}, heads {c.num_heads}, patch {c.patch_size}, {size})"
    else:
        arch = f"{c.name or 'BiT'} (ResNet-v2, units {list(c.layers)}, width x{c.width_factor:g}, {size})"
    sizes = ", ".join(f"{len(ds)} {name}" for name, ds in splits.items())
    t = cfg.train
    src = cfg.model.pretrained or "random init"
    if cfg.model.revision:
        src += f" (Hugging Face hub, commit {cfg.model.revision})"
    lines = [f"model: {arch}, {n_params / 1e6:.2f}M parameters, from {src}",
             ("data: synthetic images (a dry run; the recipe's data is not read)" if dry_run else
              f"data: {cfg.data.name} {cfg.data.path}".rstrip()) + f" ({sizes} images, "
             f"{len(splits['train'].classes)} classes)",
             f"training: {t.steps} steps of batch {t.batch_size}, {t.optimizer} lr {t.lr:g}"]
    named = {k: getattr(ds, "source", None) for k, ds in splits.items()}  # e.g. which splits of a DatasetDict
    if any(named.values()) and not dry_run:
        lines.insert(2, "splits: " + ", ".join(f"{k} = {v}" for k, v in named.items() if v))
    return "\n".join(lines + notes)


def run_experiment(
    cfg: RunConfig,
    out: str | Path,
    resume: bool = False,
    dry_run: int = 0,
    progress: bool = True,
    final_test: bool = True,
    *,
    force: bool = False,
    overwrite: bool = False,
    save: bool | None = None,
    header: bool = False,
    evaluators: Mapping[str, Callable[[nn.Module], dict[str, float]]] | None = None,
    source: nn.Module | None = None,
    curves: bool = True,
) -> dict[str, Any]:
    """Train as `cfg` says; returns {"steps", "train_s", "dev", "test", "model_dir", ...}: `build_run`, then
    `Trainer.fit`, then `finish_run`.

    `out` must be a new (or empty) folder unless `resume` or `overwrite`; it is locked for the life of the run
    (a second run on it is refused with the holder's pid). A dry run saves no checkpoint
    and no model unless `save=True`. `header=True` prints what is trained on what before starting.
    `evaluators` ({name: fn(model) -> metrics}) run beside the eval split every `train.eval_every` steps,
    on the (EMA) weights of the model being trained; their metrics are logged as `eval_<name>_<key>`.
    `source`: model.pretrained already loaded by the caller (it is not read again). `curves=False`: no
    curves.png (a caller that runs many small runs and plots their metrics.jsonl itself)."""
    with contextlib.ExitStack() as held:
        run = build_run(cfg, Path(out), resume, dry_run, progress, force=force, overwrite=overwrite, save=save,
                        header=header, evaluators=evaluators, held=held, source=source)
        if run.finished is not None:
            return run.finished
        if run.trainer.is_main:
            atomic_write_text(run.out / "run_config.json", json.dumps(run.cfg.sections(), indent=2) + "\n")
        run.trainer.fit()
        return finish_run(run, final_test, curves)


@dataclass
class Run:
    """A run built and ready to fit: its config, folder, splits, the model that is saved, what the engine trains
    (the model, or its MPP wrapper) and the Trainer. `finished` holds the result of a run found already done."""

    cfg: RunConfig
    out: Path
    splits: dict[str, Dataset]
    model: nn.Module
    trained: nn.Module
    trainer: Trainer
    save: bool
    finished: dict[str, Any] | None = None


def build_run(cfg: RunConfig, out: Path, resume: bool = False, dry_run: int = 0, progress: bool = True, *,
              force: bool = False, overwrite: bool = False, save: bool | None = None, header: bool = False,
              evaluators: Mapping[str, Callable[[nn.Module], dict[str, float]]] | None = None,
              held: contextlib.ExitStack, source: nn.Module | None = None) -> Run:
    """Check the config, lock and prepare the run folder, open the data, build the model, the loader, the periodic
    evaluation and the Trainer (resumed from the folder's state with `resume`)."""
    if dry_run:
        cfg = _dry_run_config(cfg, dry_run)
    save = (not dry_run) if save is None else save
    check_config(cfg)
    if cfg.model.require_pretrained and not cfg.model.pretrained and not dry_run:
        raise ValueError(f"{cfg.description or 'this recipe'}: a fine-tuning recipe needs model.pretrained "
                         "(vitkit finetune --model PATH, or --set model.pretrained=PATH); to train it from a random "
                         "init instead, say so with --from-scratch")
    cfg = cfg.updated({"train.device": dist.init_from_env(cfg.train.device)})
    splits = _splits(cfg, dry_run)
    cfg = fit_batch(cfg, len(splits["train"]), dist.world_size())  # before the resume check: it sees the same value
    if dist.rank() == 0:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "the run folder is a file", str(out))
        held.enter_context(FolderLock(out, "run folder"))
        prepare_run_folder(out, cfg, resume, force, overwrite)
    dist.barrier()
    manual_seed(cfg.train.seed)  # the initial weights are a function of the seed
    train = splits["train"]
    notes: list[str] = []
    model = build_model(cfg.model, train.classes, train.channels, cfg.data, notes, source=source)
    commit = hub_commit(model, cfg.model)
    if commit and commit != cfg.model.revision:  # the run's record (run_config.json) names the weights it started
        cfg = cfg.updated({"model.revision": commit})  # from: the hub id and its commit, not a branch nor a cache path
    splits = {k: match_channels(v, model.config.in_chans, f"{k} data", notes.append if k == "train" else None)
              for k, v in splits.items()}  # grey data on an RGB checkpoint: converted as PIL's convert("RGB")
    train = splits["train"]
    if cfg.lora.rank:  # LoRA (Hu et al. 2022): adapters on the frozen encoder, saved alone and merged at the end
        add_lora(model, cfg, notes)
    if cfg.model.grad_checkpointing:  # freed activations back to the OS: 2.5-2.8x less memory, 1.1-1.4x time
        notes.append(mmap_large_blocks())
    trained = objective_model(model, cfg)  # the ViT itself, or the ViT inside its §4.6 MPP wrapper
    tcfg, d = cfg.train, cfg.data
    if header and dist.rank() == 0:
        print(describe_run(model, splits, cfg, notes, bool(dry_run)), flush=True)
    # native resolution (data.max_patches): images at their own aspect ratio, packed (NaViT; vitkit/data/collate.py)
    tf = d.native_packer(model.preprocess, patch_of(model)) or d.train_transform(model.preprocess)
    loader = StepLoader(train, tcfg.batch_size, tf, tcfg.seed, rank=dist.rank(), world=dist.world_size(),
                        num_workers=d.num_workers, pin_memory=torch.device(tcfg.device).type == "cuda")
    holder: list[Trainer] = []  # the periodic evaluation logs through the trainer built below
    eval_fn = _periodic_eval(model, splits.get(d.eval_split), cfg, evaluators, holder)
    teacher = _teacher(cfg, model, header)
    trainer = Trainer(trained, tcfg, loader, out, eval_fn=eval_fn, progress=progress, save_checkpoints=save,
                      teacher=teacher)
    holder.append(trainer)
    run = Run(cfg, out, splits, model, trained, trainer, save)
    if resume:
        trainer.load_state(force=force)
        done = out / "result.json"
        if trainer.step >= tcfg.steps and done.is_file():  # nothing left to do: say so, change nothing
            if dist.rank() == 0:
                print(f"{out}: this run already finished ({trainer.step} of {tcfg.steps} steps, result.json written);"
                      " nothing to resume", flush=True)
            dist.barrier()
            run.finished = json.loads(done.read_text())
    return run


def _periodic_eval(model: nn.Module, eval_ds: Dataset | None, cfg: RunConfig,
                   evaluators: Mapping[str, Callable[[nn.Module], dict[str, float]]] | None,
                   holder: list[Trainer]) -> Callable[[nn.Module], dict[str, float]] | None:
    """The evaluation run every train.eval_every steps: the eval split, and the extra `evaluators` on the model
    itself (inside an MPP wrapper: the ViT); None when there is nothing to evaluate."""
    tcfg, d = cfg.train, cfg.data
    if (eval_ds is None and not evaluators) or not tcfg.eval_every:
        return None
    if evaluators and dist.world_size() > 1:
        raise ValueError("extra evaluators run on one process; train without torchrun to use them")
    ev_loader = _eval_loader(eval_ds, model.preprocess, d, patch_of(model)) if eval_ds is not None else None

    def eval_fn(m: nn.Module) -> dict[str, float]:
        res: dict[str, float] = {}
        if ev_loader is not None:
            skipped: list[str] = []
            res = evaluate_loader(m, ev_loader, tcfg.precision, tcfg.device, skipped=skipped)
            if skipped:  # named in the log, as the training split's are
                trainer = holder[0]
                trainer.log({"step": trainer.step, "split": d.eval_split, "eval_skipped_images": skipped})
                for msg in skipped:
                    tqdm.write(f"skipped unreadable {d.eval_split} image: {msg}")
        for name, fn in (evaluators or {}).items():
            was_training = model.training
            model.eval()
            res.update({f"{name}_{k}": v for k, v in fn(model).items()})
            model.train(was_training)
        return res

    return eval_fn


def _teacher(cfg: RunConfig, model: nn.Module, header: bool) -> Teacher | None:
    """The distillation teacher of train.teacher (DeiT), its classes matched to the student's; None without one."""
    if not cfg.teacher:
        return None
    from vitkit.formats import load_pretrained

    tcfg = cfg.train
    teacher = Teacher(load_pretrained(cfg.teacher), model.preprocess, model.config.num_classes,
                      f"train.teacher {cfg.teacher}")
    if (header or teacher.matched_by != "name") and dist.rank() == 0:  # an assumption is always shown
        print(f"distillation: {tcfg.distill} (alpha {tcfg.distill_alpha:g}, tau {tcfg.distill_tau:g}) from "
              f"{cfg.teacher}, classes matched by {teacher.matched_by}", flush=True)
    return teacher


def finish_run(run: Run, final_test: bool = True, curves: bool = True) -> dict[str, Any]:
    """After fitting: evaluate the final (EMA) weights on dev and test (once, at the end), save the model with its
    preprocessing, draw curves.png and write result.json (rank 0). `train_s` is the fitting time of every process
    that trained the run; `train_s_from_step`, where present, says it counts only from that step (the run resumed a
    state that did not record the time before)."""
    trainer, model, trained, out, cfg = run.trainer, run.model, run.trained, run.out, run.cfg
    tcfg = cfg.train
    if trainer.sharded:  # evaluate and save an unsharded copy of the final weights on rank 0
        weights = trainer.model_state()
        if trainer.is_main:  # the same architecture, built without weights (no second checkpoint read)
            with torch.device("meta"):
                fresh = type(model)(model.config)
                if getattr(model, "lora_config", None) is not None:  # the same adapters, for the same keys
                    add_lora(fresh, cfg)
                    fresh.lora_base_hash = model.lora_base_hash
            fresh.preprocess = model.preprocess
            trained = objective_model(fresh, cfg)
            trained.load_state_dict(weights, assign=True)
            model, trained = fresh, trained.to(tcfg.device)
    result: dict[str, Any] = {"steps": trainer.step, "train_s": trainer.train_s, "out": str(out),
                              "skipped_images": trainer.skipped_images}
    if trainer.train_s_from:
        result["train_s_from_step"] = trainer.train_s_from
    if trainer.is_main:
        model.eval()
        for name in ("dev", "test"):
            if run.splits.get(name) is None or (name == "test" and not final_test):
                continue
            trained.eval()
            skipped: list[str] = []
            res = evaluate_loader(trained, _eval_loader(run.splits[name], model.preprocess, cfg.data, patch_of(model)),
                                  tcfg.precision, tcfg.device, skipped=skipped)
            result[name] = res
            trainer.log({"step": trainer.step, "split": name, "final": True, **{f"eval_{k}": v for k, v in res.items()},
                         **({"eval_skipped_images": skipped} if skipped else {})})
            if skipped:  # the run finished without them: counted for the exit code (1), named in metrics.jsonl
                result["eval_skipped_images"] = result.get("eval_skipped_images", 0) + len(skipped)
        if run.save:
            from vitkit.formats import save_pretrained

            if getattr(model, "lora_config", None) is not None:  # the adapters alone, then merged for every format
                from vitkit.formats.adapters import save_adapters

                save_adapters(model.to("cpu"), out / "adapter", base=cfg.model.pretrained, overwrite=True)
                result["adapter_dir"] = str(out / "adapter")
                merge_lora(model)
            save_pretrained(model.to("cpu"), out / "model")
            result["model_dir"] = str(out / "model")
        if curves:
            plot_curves(trainer.metrics_path, out / "curves.png", title=cfg.description.strip())
            result["curves"] = str(out / "curves.png")
        atomic_write_text(out / "result.json", json.dumps(result, indent=2) + "\n")
    dist.barrier()
    return result


def run_sweep(cfg: RunConfig, out: str | Path, lrs: list[float] | None = None, progress: bool = True,
              overwrite: bool = False) -> dict[str, Any]:
    """One run per learning rate; the pick is the best dev top-1 (the paper's hold-out dev split)."""
    lrs = [float(x) for x in (lrs or cfg.sweep.lrs)]
    if not lrs:
        raise ValueError("no learning rates to sweep (sweep.lrs is empty)")
    if not cfg.data.dev_fraction:
        raise ValueError("a sweep picks on a dev split: set data.dev_fraction (e.g. 0.02 for CIFAR, 0.1 for Pets)")
    out = Path(out)
    runs = []
    for lr in lrs:
        res = run_experiment(cfg.updated({"optim.lr": lr}), out / f"lr_{lr:g}", progress=progress, final_test=False,
                             overwrite=overwrite)
        runs.append({"lr": lr, "dev_top1": res["dev"]["top1"], "dev_loss": res["dev"]["loss"], "out": res["out"],
                     "skipped_images": skipped_images(res)})
    best = max(runs, key=lambda r: (r["dev_top1"], -r["dev_loss"]))
    summary = {"runs": runs, "best_lr": best["lr"], "best_dev_top1": best["dev_top1"], "best_out": best["out"],
               "skipped_images": max(r["skipped_images"] for r in runs)}  # each run reads the same files
    if dist.rank() == 0:
        atomic_write_text(out / "sweep.json", json.dumps(summary, indent=2) + "\n")
    return summary


def skipped_images(res: dict[str, Any]) -> int:
    """Unreadable images a finished run left out: of its training split and of its final dev / test evaluation."""
    return int(res.get("skipped_images", 0)) + int(res.get("eval_skipped_images", 0))


def test_accuracy(run_dir: str | Path, cfg: RunConfig, skipped: list[str] | None = None) -> dict[str, float]:
    """The test metrics of the model a run saved (`vitkit sweep --test` on the chosen run: once, after choosing);
    unreadable test images are left out and named in `skipped`."""
    from vitkit.formats import load_pretrained

    model = load_pretrained(Path(run_dir) / "model")
    test = match_channels(open_splits(cfg.data)["test"], model.config.in_chans, "test data")
    return evaluate_loader(model, _eval_loader(test, model.preprocess, cfg.data, patch_of(model)), skipped=skipped)
