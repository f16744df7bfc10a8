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
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from vitkit import distributed as dist
from vitkit.data.datasets import Dataset, open_splits, synthetic
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import TrainTransform
from vitkit.evaluate import eval_loader, evaluate_loader
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.registry import create_model
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.train.config import DEFAULTS, check_sections, merge, train_config
from vitkit.train.distill import Teacher
from vitkit.train.engine import TrainConfig, Trainer, plot_curves
from vitkit.utils import check_int, to_pair
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.files import FolderLock

_MODEL_CONTROL = set(DEFAULTS["model"])


def _per_channel(v: Any, channels: int, what: str) -> tuple[float, ...]:
    v = [float(x) for x in (v if isinstance(v, list) else [v])]
    if len(v) == 1:
        v = v * channels
    if len(v) != channels:
        raise ValueError(f"data.{what} has {len(v)} values for {channels}-channel images")
    return tuple(v)


def _new_model(mcfg: dict[str, Any], k: int, channels: int) -> nn.Module:
    """A model from the registry (training from scratch), with the [model] keys as overrides."""
    size = to_pair(mcfg["img_size"], "model.img_size")
    arch = {key: v for key, v in mcfg.items() if key not in _MODEL_CONTROL}
    return create_model(mcfg["name"], **{"num_classes": k, "img_size": size, "in_chans": channels, **arch})


def check_config(cfg: dict[str, Any]) -> None:
    """Every value of a run config, checked before any data is read or anything is written: a bad one
    is a ValueError naming its key (an unknown schedule fails here, not 10k steps into a run)."""
    check_sections(cfg)
    train_config(cfg)
    mcfg = cfg["model"]
    check_int("model.num_classes", mcfg["num_classes"], low=0)
    if mcfg["pretrained"]:
        if not Path(mcfg["pretrained"]).exists():
            raise FileNotFoundError(f"model.pretrained: no checkpoint at {mcfg['pretrained']}")
        return
    channels = int(mcfg.get("in_chans", cfg["data"]["channels"]))
    try:
        with torch.device("meta"):  # builds the architecture without allocating its weights
            _new_model(mcfg, int(mcfg["num_classes"]) or 1, channels)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"[model] {e}") from e


def build_model(mcfg: dict[str, Any], classes: list[str], channels: int, dcfg: dict[str, Any],
                notes: list[str] | None = None) -> nn.Module:
    """The model of a run, with `model.preprocess` set for its training resolution and classes.

    `notes` receives a line for each thing changed in a pretrained model (head, position embeddings)."""
    from vitkit.formats import adapt, load_pretrained

    k = int(mcfg["num_classes"]) or len(classes)
    if k < len(classes):  # a label beyond the head would fail mid-run
        raise ValueError(f"model.num_classes = {k}, but the data has {len(classes)} classes; leave it 0 to take the "
                         "data's count")
    size = to_pair(mcfg["img_size"], "model.img_size")
    if mcfg["pretrained"]:
        hints = {k: mcfg[k] for k in ("num_heads", "gelu", "ln_eps") if k in mcfg}  # what the file may not record
        model = load_pretrained(mcfg["pretrained"], **hints)
        vit = isinstance(model, VisionTransformer)
        grid, classes_before = model.config.grid_size if vit else None, model.config.num_classes
        model = adapt(model, num_classes=k, img_size=size).train()
        if notes is not None:
            if vit and grid != model.config.grid_size:
                (gh, gw), (nh, nw) = grid, model.config.grid_size
                notes.append(f"resampled: E_pos {gh}x{gw} -> {nh}x{nw} (paper §3.2)")
            notes.append(f"replaced: the {classes_before}-way head by a new zero-initialised {k}-way head")
        mean, std = model.preprocess.mean, model.preprocess.std  # the checkpoint's own normalisation
    else:
        model = _new_model(mcfg, k, channels)
        mean, std = None, None
    if model.config.in_chans != channels:
        raise ValueError(f"the model takes {model.config.in_chans}-channel images, the data has {channels} channels")
    mean = mean or _per_channel(dcfg["mean"], channels, "mean")
    std = std or _per_channel(dcfg["std"], channels, "std")
    labels = list(classes) + [f"unused_{i}" for i in range(len(classes), k)]  # a larger head keeps the names
    if k > len(classes) and notes is not None:
        notes.append(f"note: model.num_classes = {k} > the data's {len(classes)} classes: outputs "
                     f"{len(classes)}..{k - 1} have no data (named unused_{len(classes)}, ...)")
    model.preprocess = PreprocessConfig(
        img_size=model.config.img_size, mean=mean, std=std, crop_pct=float(dcfg["crop_pct"]) or None, labels=labels
    )
    if mcfg["grad_checkpointing"]:
        model.set_grad_checkpointing(True)
    return model


def _dry_run_config(cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    """A few steps of the recipe on synthetic data, batch 8 (micro-batches kept when accumulating)."""
    t = cfg["train"]
    accum = 2 if int(t["grad_accum"]) > 1 else 1
    return merge(cfg, {
        "schedule": {"steps": steps, "warmup_steps": min(int(cfg["schedule"]["warmup_steps"]), 1)},
        "train": {"batch_size": 8, "grad_accum": accum, "eval_every": 0, "ckpt_every": 0, "log_every": 1},
        "data": {"num_workers": 0},
    })


def _splits(cfg: dict[str, Any], dry_run: int) -> dict[str, Dataset]:
    if not dry_run:
        return open_splits(cfg["data"])
    m = cfg["model"]
    k = int(m["num_classes"]) or 10
    size = to_pair(m["img_size"], "model.img_size")
    ch = int(m.get("in_chans", cfg["data"]["channels"]))
    return {"train": synthetic(k, size, ch, n=16), "test": synthetic(k, size, ch, n=8, seed=1)}


def _eval_loader(ds: Dataset, preprocess: PreprocessConfig, dcfg: dict[str, Any]) -> StepLoader:
    return eval_loader(ds, preprocess, int(dcfg["eval_batch_size"]), int(dcfg["num_workers"]))


def objective_model(model: nn.Module, cfg: dict[str, Any]) -> nn.Module:
    """What the engine trains: the classifier itself, or (train.objective = "mpp") the ViT wrapped for
    masked patch prediction (§4.6); either way `model` is the ViT that gets saved and fine-tuned."""
    objective = cfg["train"]["objective"]
    if objective == "classify":
        return model
    if objective == "mpp":
        from vitkit.models.mpp import MaskedPatchPrediction

        m = cfg["mpp"]
        return MaskedPatchPrediction(model, model.preprocess.mean, model.preprocess.std, float(m["corrupt"]),
                                     float(m["replace_mask"]), float(m["replace_random"]), int(m["bits"]))
    raise ValueError(f"train.objective must be classify or mpp, got {objective!r}")


# Files a run writes in its folder; `overwrite=True` removes exactly these (nothing else of the user's).
RUN_FILES = ("metrics.jsonl", "train_state.pt", "run_config.json", "train_config.json", "result.json",
             "curves.png", "model", "tb")
# Keys that may differ when a run is resumed without changing what it computes: the engine's own (as recipe
# keys) and the data loading's.
RESUME_FREE = {"description", "data.num_workers", "data.eval_batch_size", "data.max_pixels"} | {
    ".".join(key) for name, key in TrainConfig.recipe_fields().items() if name in Trainer.RESUME_FREE}


def _flat(cfg: dict[str, Any]) -> dict[str, Any]:
    return {f"{sec}.{k}" if isinstance(body, dict) else sec: v
            for sec, body in cfg.items() for k, v in (body.items() if isinstance(body, dict) else [("", body)])}


def prepare_run_folder(out: Path, cfg: dict[str, Any], resume: bool, force: bool, overwrite: bool) -> None:
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
                saved = _flat(json.loads(saved_path.read_text()))
            except ValueError as e:
                raise ValueError(f"{saved_path}: not readable JSON ({e}); resume with --force to skip the check") from e
            now = _flat(cfg)
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
                 "tb": ("events.out.tfevents.*",)}


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


def default_run_dir(cfg_ref: str | None, kind: str = "train") -> Path:
    """runs/<recipe>-<date>-<time>: a new folder per run, named after what it ran."""
    stem = Path(cfg_ref).stem if cfg_ref else kind
    return Path("runs") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def describe_run(model: nn.Module, splits: dict[str, Dataset], cfg: dict[str, Any], notes: list[str],
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
    t, s = cfg["train"], cfg["schedule"]
    src = cfg["model"]["pretrained"] or "random init"
    lines = [f"model: {arch}, {n_params / 1e6:.2f}M parameters, from {src}",
             ("data: synthetic images (a dry run; the recipe's data is not read)" if dry_run else
              f"data: {cfg['data']['name']} {cfg['data']['path']}".rstrip()) + f" ({sizes} images, "
             f"{len(splits['train'].classes)} classes)",
             f"training: {s['steps']} steps of batch {t['batch_size']}, {cfg['optim']['name']} lr {cfg['optim']['lr']:g}"]
    named = {k: getattr(ds, "source", None) for k, ds in splits.items()}  # e.g. which splits of a DatasetDict
    if any(named.values()) and not dry_run:
        lines.insert(2, "splits: " + ", ".join(f"{k} = {v}" for k, v in named.items() if v))
    return "\n".join(lines + notes)


def run_experiment(
    cfg: dict[str, Any],
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
) -> dict[str, Any]:
    """Train as `cfg` says; returns {"steps", "train_s", "dev", "test", "model_dir", ...}.

    `out` must be a new (or empty) folder unless `resume` or `overwrite`; it is locked for the life of the run
    (a second run on it is refused with the holder's pid). A dry run saves no checkpoint
    and no model unless `save=True`. `header=True` prints what is trained on what before starting.
    `evaluators` ({name: fn(model) -> metrics}) run beside the eval split every `train.eval_every` steps,
    on the (EMA) weights of the model being trained; their metrics are logged as `eval_<name>_<key>`."""
    with contextlib.ExitStack() as held:
        return _run(cfg, Path(out), resume, dry_run, progress, final_test, force, overwrite, save, header,
                    evaluators, held)


def _run(cfg: dict[str, Any], out: Path, resume: bool, dry_run: int, progress: bool, final_test: bool, force: bool,
         overwrite: bool, save: bool | None, header: bool,
         evaluators: Mapping[str, Callable[[nn.Module], dict[str, float]]] | None,
         held: contextlib.ExitStack) -> dict[str, Any]:
    if dry_run:
        cfg = _dry_run_config(cfg, dry_run)
    save = (not dry_run) if save is None else save
    check_config(cfg)
    m = cfg["model"]
    if m["require_pretrained"] and not m["pretrained"] and not dry_run:
        raise ValueError(f"{cfg.get('description') or 'this recipe'}: a fine-tuning recipe needs model.pretrained "
                         "(vitkit finetune --model PATH, or --set model.pretrained=PATH); to train it from a random "
                         "init instead, say so with --from-scratch")
    device = dist.init_from_env(cfg["train"]["device"])
    cfg = merge(cfg, {"train": {"device": device}})
    if dist.rank() == 0:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "the run folder is a file", str(out))
        held.enter_context(FolderLock(out, "run folder"))
        prepare_run_folder(out, cfg, resume, force, overwrite)
    dist.barrier()
    splits = _splits(cfg, dry_run)
    torch.manual_seed(int(cfg["train"]["seed"]))  # the initial weights are a function of the seed
    train = splits["train"]
    notes: list[str] = []
    model = build_model(cfg["model"], train.classes, train.channels, cfg["data"], notes)
    trained = objective_model(model, cfg)  # the ViT itself, or the ViT inside its §4.6 MPP wrapper
    tcfg = train_config(cfg)
    d = cfg["data"]
    if header and dist.rank() == 0:
        print(describe_run(model, splits, cfg, notes, bool(dry_run)), flush=True)
    tf = TrainTransform(model.preprocess, d["augment"], tuple(d["area"]), tuple(d["ratio"]), bool(d["flip"]),
                        tuple(d["randaugment"]), float(d["random_erasing"]))
    loader = StepLoader(train, tcfg.batch_size, tf, tcfg.seed, rank=dist.rank(), world=dist.world_size(),
                        num_workers=int(d["num_workers"]), pin_memory=torch.device(tcfg.device).type == "cuda")
    eval_ds = splits.get(d["eval_split"])
    eval_fn = None
    trainer: Trainer
    if (eval_ds is not None or evaluators) and tcfg.eval_every:
        if evaluators and dist.world_size() > 1:
            raise ValueError("extra evaluators run on one process; train without torchrun to use them")
        ev_loader = _eval_loader(eval_ds, model.preprocess, d) if eval_ds is not None else None

        def eval_fn(m: nn.Module) -> dict[str, float]:
            res: dict[str, float] = {}
            if ev_loader is not None:
                skipped: list[str] = []
                res = evaluate_loader(m, ev_loader, tcfg.precision, tcfg.device, skipped=skipped)
                if skipped:  # named in the log, as the training split's are
                    trainer.log({"step": trainer.step, "split": d["eval_split"], "eval_skipped_images": skipped})
                    for msg in skipped:
                        tqdm.write(f"skipped unreadable {d['eval_split']} image: {msg}")
            for name, fn in (evaluators or {}).items():  # on the model itself (inside an MPP wrapper: the ViT)
                was_training = model.training
                model.eval()
                res.update({f"{name}_{k}": v for k, v in fn(model).items()})
                model.train(was_training)
            return res

    teacher = None
    if cfg["train"]["teacher"]:
        from vitkit.formats import load_pretrained

        teacher = Teacher(load_pretrained(cfg["train"]["teacher"]), model.preprocess, model.config.num_classes,
                          f"train.teacher {cfg['train']['teacher']}")
        if (header or teacher.matched_by != "name") and dist.rank() == 0:  # an assumption is always shown
            print(f"distillation: {tcfg.distill} (alpha {tcfg.distill_alpha:g}, tau {tcfg.distill_tau:g}) from "
                  f"{cfg['train']['teacher']}, classes matched by {teacher.matched_by}", flush=True)
    trainer = Trainer(trained, tcfg, loader, out, eval_fn=eval_fn, progress=progress, save_checkpoints=save,
                      teacher=teacher)
    if resume:
        trainer.load_state(force=force)
        done = out / "result.json"
        if trainer.step >= tcfg.steps and done.is_file():  # nothing left to do: say so, change nothing
            if dist.rank() == 0:
                print(f"{out}: this run already finished ({trainer.step} of {tcfg.steps} steps, result.json written);"
                      " nothing to resume", flush=True)
            dist.barrier()
            return json.loads(done.read_text())
    if trainer.is_main:
        atomic_write_text(out / "run_config.json", json.dumps(cfg, indent=2) + "\n")
    t0 = time.perf_counter()
    trainer.fit()
    if trainer.sharded:  # evaluate and save an unsharded copy of the final weights on rank 0
        weights = trainer.model_state()
        if trainer.is_main:  # the same architecture, built without weights (no second checkpoint read)
            with torch.device("meta"):
                fresh = type(model)(model.config)
            fresh.preprocess = model.preprocess
            trained = objective_model(fresh, cfg)
            trained.load_state_dict(weights, assign=True)
            model, trained = fresh, trained.to(tcfg.device)
    result: dict[str, Any] = {"steps": trainer.step, "train_s": time.perf_counter() - t0, "out": str(out),
                              "skipped_images": trainer.skipped_images}
    if trainer.is_main:
        model.eval()
        for name in ("dev", "test"):
            if splits.get(name) is None or (name == "test" and not final_test):
                continue
            trained.eval()
            skipped: list[str] = []
            res = evaluate_loader(trained, _eval_loader(splits[name], model.preprocess, d), tcfg.precision, tcfg.device,
                                  skipped=skipped)
            result[name] = res
            trainer.log({"step": trainer.step, "split": name, "final": True, **{f"eval_{k}": v for k, v in res.items()},
                         **({"eval_skipped_images": skipped} if skipped else {})})
        if save:
            from vitkit.formats import save_pretrained

            model_cpu = model.to("cpu")
            save_pretrained(model_cpu, out / "model")
            result["model_dir"] = str(out / "model")
        plot_curves(trainer.metrics_path, out / "curves.png", title=f"{cfg.get('description', '')}".strip())
        result["curves"] = str(out / "curves.png")
        atomic_write_text(out / "result.json", json.dumps(result, indent=2) + "\n")
    dist.barrier()
    return result


def run_sweep(cfg: dict[str, Any], out: str | Path, lrs: list[float] | None = None, progress: bool = True,
              overwrite: bool = False) -> dict[str, Any]:
    """One run per learning rate; the pick is the best dev top-1 (the paper's hold-out dev split)."""
    lrs = [float(x) for x in (lrs or cfg["sweep"]["lrs"])]
    if not lrs:
        raise ValueError("no learning rates to sweep (sweep.lrs is empty)")
    if not float(cfg["data"]["dev_fraction"]):
        raise ValueError("a sweep picks on a dev split: set data.dev_fraction (e.g. 0.02 for CIFAR, 0.1 for Pets)")
    out = Path(out)
    runs = []
    for lr in lrs:
        res = run_experiment(merge(cfg, {"optim": {"lr": lr}}), out / f"lr_{lr:g}", progress=progress, final_test=False,
                             overwrite=overwrite)
        runs.append({"lr": lr, "dev_top1": res["dev"]["top1"], "dev_loss": res["dev"]["loss"], "out": res["out"]})
    best = max(runs, key=lambda r: (r["dev_top1"], -r["dev_loss"]))
    summary = {"runs": runs, "best_lr": best["lr"], "best_dev_top1": best["dev_top1"], "best_out": best["out"]}
    if dist.rank() == 0:
        atomic_write_text(out / "sweep.json", json.dumps(summary, indent=2) + "\n")
    return summary

