"""Run configs: TOML recipe files with `extends`, command-line overrides, validation.

A recipe has the sections below; every key is optional (DEFAULTS fills the rest). `extends =
"name"` at the top starts from another recipe. `--set section.key=value` overrides one key (the
value is read as TOML, so `0.003`, `true`, `[0.9, 0.999]` and `"text"` all work; a bare word is a
string). Keys of [model] that are not listed here are fields of the model's config (ViTConfig: width,
depth, ...; BiTConfig for `bit` models: layers, width_factor, numerics).
"""

from __future__ import annotations

import copy
import math
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib

from vitkit.data.datasets import DATA_NAMES
from vitkit.data.transforms import AUGMENTS
from vitkit.models.resnet import BiTConfig
from vitkit.models.vit import ViTConfig
from vitkit.train.engine import TrainConfig
from vitkit.utils import check_choice, check_int, check_range

DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {
        "name": "vit_b16",  # registry name used when training from scratch
        "pretrained": "",  # checkpoint to fine-tune (any format vitkit reads)
        "img_size": 224,
        "num_classes": 0,  # 0: the number of classes of the data
        "grad_checkpointing": False,
        "require_pretrained": False,  # fine-tuning recipes: refuse to start without model.pretrained
    },
    "data": {
        "name": "auto",  # digits | lfw | glyphs | shards | hf | cifar10 | cifar100 | folder | list | auto (from path)
        "path": "",
        "test_path": "",  # list files: a separate test list; shards: the test shards' pattern; hf: test Parquet
        "split": "",  # hf: the training split of a saved DatasetDict ("" = train)
        "test_split": "",  # hf: its test split ("" = test, else validation, else a holdout)
        "image_column": "",  # hf: the image column ("" = the one Image feature)
        "label_column": "",  # hf: the label column ("" = the one ClassLabel feature, else "label")
        "hf_cache": "",  # hf: where Parquet is converted to Arrow ("" = the datasets cache)
        "holdout": 0.1,  # test fraction for sources without a test split
        "dev_fraction": 0.0,  # hold-out dev split carved from train (evaluation during training, sweeps)
        "eval_split": "dev",  # split evaluated every train.eval_every steps: dev | test
        "augment": "inception",  # inception | affine | none
        "area": [0.05, 1.0],
        "ratio": [0.75, 1.3333333333333333],
        "flip": True,
        "crop_pct": 0.0,  # evaluation: 0 = resize to the final size without a crop (the original)
        "mean": [0.5],  # one value per channel, or one value for all; [-1, 1] scaling by default
        "std": [0.5],
        "channels": 3,
        "num_workers": 2,
        "eval_batch_size": 256,
        "max_pixels": 0,  # images with more pixels are skipped as unreadable; 0 = Pillow's limit (179M)
        "randaugment": [0, 0],  # RandAugment [num_ops, magnitude] (AugReg: [2, 10] .. [2, 20]); 0 ops = off
        "random_erasing": 0.0,  # probability of erasing one random rectangle (DeiT: 0.25)
        "augreg": "",  # an AugReg preset (none, light1, light2, medium1, medium2, strong1, strong2): sets
        # data.randaugment and train.mixup as "How to train your ViT" (Steiner et al. 2022) does
        "subset": 0,  # train on a random subset of this many training images (0 = all; Fig. 4's subsets)
        "subset_seed": 0,  # which subset (the subsets of one seed nest: the smaller inside the larger)
        "glyph_images": 100000,  # data.name = "glyphs": procedurally drawn training images (data/glyphs.py)
        "glyph_classes": 1000,
        "glyph_size": 16,  # pixels per side
        "glyph_seed": 0,
    },
    **TrainConfig.recipe_defaults(),  # [optim], [schedule], [train]: the engine's own fields and defaults
    "mpp": {  # §4.6 / appendix B.1.2, used when train.objective = "mpp"
        "corrupt": 0.5,  # fraction of patch embeddings corrupted
        "replace_mask": 0.8,  # of those: replaced by the learned [mask] embedding
        "replace_random": 0.1,  # ... by another patch's embedding (the rest are kept)
        "bits": 3,  # mean colour quantised to 3 bits per channel: 512 classes for RGB
    },
    "sweep": {"lrs": [0.001, 0.003, 0.01, 0.03]},
}
# [train] keys of the runner rather than of the engine
DEFAULTS["train"]["objective"] = "classify"  # classify (labels) | mpp (masked patch prediction, §4.6)
DEFAULTS["train"]["teacher"] = ""  # checkpoint of the distillation teacher (train.distill = soft | hard; DeiT)
TOP_LEVEL = {"description", "extends"}
RECIPE_DIR = "recipes"


def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("vitkit").joinpath(RECIPE_DIR).iterdir() if p.name.endswith(".toml"))


def _read_toml(ref: str) -> tuple[dict[str, Any], str]:
    p = Path(ref)
    if p.is_file():
        text, where = p.read_text(), str(p)
    else:
        name = p.name[:-5] if p.name.endswith(".toml") else p.name
        res = resources.files("vitkit").joinpath(RECIPE_DIR, f"{name}.toml")
        if not res.is_file():
            raise FileNotFoundError(f"no config file or recipe {ref!r}; recipes: {', '.join(recipe_names())}")
        text, where = res.read_text(), f"recipe {name}"
    try:
        return tomllib.loads(text), where
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not valid TOML: {e}") from e
    except RecursionError:
        raise ValueError(f"{where}: nested too deep to be a recipe") from None


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_config(ref: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """DEFAULTS <- the recipe chain of `ref` (a path or a recipe name) <- `section.key=value` overrides."""
    layers, seen = [], []
    while ref:
        raw, where = _read_toml(ref)
        if where in seen:
            raise ValueError(f"{where}: `extends` loops back to itself")
        seen.append(where)
        _check(raw, where)
        layers.append(raw)
        ref = raw.get("extends")
    cfg = copy.deepcopy(DEFAULTS)
    for raw in reversed(layers):
        cfg = merge(cfg, {k: v for k, v in raw.items() if k != "extends"})
    for item in overrides:
        cfg = merge(cfg, parse_override(item))
    _check(cfg, "--set")
    return apply_augreg(cfg)


# AugReg's augmentation presets (Steiner et al. 2022, as big_vision's vit_i1k config): RandAugment and Mixup alpha
AUGREG: dict[str, dict[str, Any]] = {
    "none": {"randaugment": [0, 0], "mixup": 0.0},
    "light1": {"randaugment": [2, 0], "mixup": 0.0},
    "light2": {"randaugment": [2, 10], "mixup": 0.2},
    "medium1": {"randaugment": [2, 15], "mixup": 0.2},
    "medium2": {"randaugment": [2, 15], "mixup": 0.5},
    "strong1": {"randaugment": [2, 20], "mixup": 0.5},
    "strong2": {"randaugment": [2, 20], "mixup": 0.8},
}


def apply_augreg(cfg: dict[str, Any]) -> dict[str, Any]:
    """`data.augreg = "medium2"` written out as data.randaugment and train.mixup (so run_config.json shows
    the values used); a value set beside the preset that disagrees with it is an error naming both."""
    name = cfg["data"].get("augreg", "")
    if not name:
        return cfg
    if name not in AUGREG:
        raise ValueError(f"data.augreg must be one of {', '.join(AUGREG)} (or empty), got {name!r}")
    preset = AUGREG[name]
    out = merge(cfg, {"data": {"randaugment": preset["randaugment"]}, "train": {"mixup": preset["mixup"]}})
    for sec, key in (("data", "randaugment"), ("train", "mixup")):
        have = cfg[sec][key]
        if have not in (DEFAULTS[sec][key], preset[key]):
            raise ValueError(f"{sec}.{key} = {have!r} disagrees with data.augreg = {name!r} ({preset[key]!r}); "
                             "set one or the other")
    return out


def config_from_dict(raw: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """DEFAULTS <- `raw` (sections of a run config written as Python data), unknown keys refused."""
    _check(raw, where)
    cfg = merge(DEFAULTS, {k: v for k, v in raw.items() if k != "extends"})
    _check(cfg, where)
    return apply_augreg(cfg)


def parse_override(item: str) -> dict[str, Any]:
    """`optim.lr=0.003` -> {"optim": {"lr": 0.003}}."""
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) != 2 or not all(parts):
        raise ValueError(f"--set {item!r}: expected section.key=value, e.g. optim.lr=0.003")
    try:
        v = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        v = value.strip()
    except RecursionError:
        raise ValueError(f"--set {key.strip()}: the value is nested too deep") from None
    return {parts[0]: {parts[1]: v}}


def _check(cfg: dict[str, Any], where: str) -> None:
    arch_fields = set(ViTConfig.__dataclass_fields__) | set(BiTConfig.__dataclass_fields__)  # [model] overrides
    for section, body in cfg.items():
        if section in TOP_LEVEL:
            continue
        if section not in DEFAULTS or not isinstance(body, dict):
            raise ValueError(f"{where}: unknown section [{section}]; sections: {sorted(DEFAULTS)}")
        allowed = set(DEFAULTS[section]) | (arch_fields if section == "model" else set())
        bad = sorted(set(body) - allowed)
        if bad:
            raise ValueError(f"{where}: unknown key(s) {bad} in [{section}]; known: {sorted(allowed)}")


def train_config(cfg: dict[str, Any]) -> TrainConfig:
    """The engine's TrainConfig for a run config; a bad value is a ValueError naming its recipe key."""
    fields = TrainConfig.recipe_fields()
    try:
        return TrainConfig(**{name: cfg[section][key] for name, (section, key) in fields.items()})
    except ValueError as e:
        msg = str(e)
        name = msg.split(" ", 1)[0].split("[", 1)[0]
        raise ValueError(".".join(fields[name]) + msg[len(name):] if name in fields else msg) from e


GLYPH_MEMORY = 4 << 30  # bytes of glyph images a run may draw and hold


def check_sections(cfg: dict[str, Any]) -> None:
    """The [data], [mpp] and [train] values that TrainConfig and ViTConfig do not cover; a ValueError
    names the first bad key. Called before any data is read."""
    d, m, t = cfg["data"], cfg["mpp"], cfg["train"]
    check_choice("data.name", d["name"], DATA_NAMES)
    check_range("data.holdout", d["holdout"], 0.0, 1.0, low_open=True)
    check_range("data.dev_fraction", d["dev_fraction"], 0.0, 1.0)
    check_choice("data.eval_split", d["eval_split"], ("dev", "test"))
    check_choice("data.augment", d["augment"], AUGMENTS)
    for key, lo, hi in (("area", 0.0, 1.0), ("ratio", 0.0, math.inf)):
        pair = d[key]
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"data.{key} must be two numbers [low, high], got {pair!r}")
        a = check_range(f"data.{key}[0]", pair[0], lo, hi, high_open=False, low_open=True)
        b = check_range(f"data.{key}[1]", pair[1], lo, hi, high_open=False, low_open=True)
        if a > b:
            raise ValueError(f"data.{key} must be [low, high] with low <= high, got {pair!r}")
    check_range("data.crop_pct", d["crop_pct"], 0.0, 1.0, high_open=False)
    if 0 < d["crop_pct"] < 0.05:
        raise ValueError(f"data.crop_pct must be 0 (no crop) or in [0.05, 1], got {d['crop_pct']!r}")
    for key in ("mean", "std"):
        vals = d[key] if isinstance(d[key], list) else [d[key]]
        for v in vals:
            check_range(f"data.{key}[]", v, -math.inf if key == "mean" else 0.0, math.inf, low_open=key == "std")
    check_choice("data.channels", d["channels"], (1, 3))
    check_int("data.num_workers", d["num_workers"], low=0)
    check_int("data.eval_batch_size", d["eval_batch_size"])
    check_int("data.max_pixels", d["max_pixels"], low=0)
    check_int("data.subset", d["subset"], low=0)
    check_int("data.subset_seed", d["subset_seed"], low=0)
    check_int("data.glyph_images", d["glyph_images"])
    check_int("data.glyph_classes", d["glyph_classes"], low=2, high=1 << 20)
    check_int("data.glyph_size", d["glyph_size"], low=4, high=1024)
    if d["glyph_images"] * d["glyph_size"] ** 2 > GLYPH_MEMORY:  # drawn up front and held in memory
        raise ValueError(f"data.glyph_images = {d['glyph_images']:,} images of {d['glyph_size']}x{d['glyph_size']} "
                         f"px need {d['glyph_images'] * d['glyph_size'] ** 2:,} bytes in memory, over the "
                         f"{GLYPH_MEMORY:,} allowed (at most {GLYPH_MEMORY // d['glyph_size'] ** 2:,} images)")
    check_int("data.glyph_seed", d["glyph_seed"], low=0)
    ra = d["randaugment"]
    if not isinstance(ra, list) or len(ra) != 2:
        raise ValueError(f"data.randaugment must be [num_ops, magnitude], got {ra!r}")
    check_int("data.randaugment[0]", ra[0], low=0, high=16)  # RandAugment applies 1-3 operations
    check_range("data.randaugment[1]", ra[1], 0.0, 30.0, high_open=False)
    check_range("data.random_erasing", d["random_erasing"], 0.0, 1.0, high_open=False)
    if d["augreg"] and d["augreg"] not in AUGREG:
        raise ValueError(f"data.augreg must be one of {', '.join(AUGREG)} (or empty), got {d['augreg']!r}")
    check_choice("train.objective", t["objective"], ("classify", "mpp"))
    if bool(t["teacher"]) != (t["distill"] != "none"):
        raise ValueError("distillation needs both train.distill (soft | hard) and train.teacher (a checkpoint); got "
                         f"train.distill = {t['distill']!r}, train.teacher = {t['teacher']!r}")
    if t["teacher"] and not Path(t["teacher"]).exists():
        raise FileNotFoundError(f"train.teacher: no checkpoint at {t['teacher']}")
    if t["objective"] == "mpp" and t["teacher"]:
        raise ValueError("masked patch prediction (train.objective = mpp) has no classes to distil: unset train.teacher")
    if t["objective"] == "mpp" and (t["mixup"] or t["cutmix"]):
        raise ValueError("train.mixup / train.cutmix mix labels; masked patch prediction (train.objective = mpp) "
                         "has none: turn them off")
    check_range("mpp.corrupt", m["corrupt"], 0.0, 1.0, high_open=False, low_open=True)
    check_range("mpp.replace_mask", m["replace_mask"], 0.0, 1.0, high_open=False)
    check_range("mpp.replace_random", m["replace_random"], 0.0, 1.0 - float(m["replace_mask"]), high_open=False)
    check_int("mpp.bits", m["bits"])
    if not isinstance(cfg["sweep"]["lrs"], list):
        raise ValueError(f"sweep.lrs must be a list of learning rates, got {cfg['sweep']['lrs']!r}")
