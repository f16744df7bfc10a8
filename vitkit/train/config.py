"""Run configs, typed: a `RunConfig` of one dataclass per recipe section, from TOML recipes with `extends`,
`--set section.key=value` overrides and the commands' typed values.

| section                          | dataclass                          | what it holds                                   |
|----------------------------------|------------------------------------|-------------------------------------------------|
| [model]                          | ModelSpec                          | registry name or checkpoint, size, classes, and |
|                                  |                                    | the architecture's own fields (ViTConfig, ...)  |
| [data]                           | vitkit.data.config.DataConfig      | the source, augmentation, loading               |
| [optim], [schedule], [train]     | TrainConfig (+ RunConfig.objective,| the engine's run; the objective and the teacher |
|                                  | RunConfig.teacher)                 |                                                 |
| [mpp]                            | MppConfig                          | masked patch prediction (§4.6, appendix B.1.2)  |
| [lora]                           | LoraSpec                           | LoRA adapters (Hu et al. 2022) for fine-tuning  |
| [sweep]                          | SweepConfig                        | the learning rates of `vitkit sweep`            |

Every key is optional (its dataclass holds its one default). `extends = "name"` at the top of a recipe starts
from another recipe. `--set section.key=value` overrides one key (the value is read as TOML, so `0.003`, `true`,
`[0.9, 0.999]` and `"text"` all work; a bare word is a string); commands pass typed values (`values=`), never TOML
text. An unknown section or key is refused with the closest valid name. A bad value fails when the RunConfig is
built, naming its key, before any data is read.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from vitkit import distributed as dist
from vitkit.data.config import AUGREG, DataConfig
from vitkit.models.lora import DEFAULT_TARGETS, LoraConfig
from vitkit.models.registry import name_img_size, name_overrides
from vitkit.models.resnet import BiTConfig
from vitkit.models.vit import ViTConfig
from vitkit.train.distill import KINDS
from vitkit.train.optim import SCHEDULES
from vitkit.utils import check_choice, check_fields, check_int, check_range, to_pair
from vitkit.utils.files import read_text_file
from vitkit.utils.options import TRAIN_PRECISION, TRAIN_PRECISIONS, parse_img_size
from vitkit.utils.recipe import RecipeSection, closest, key

MAX_LR = 100.0  # no schedule in use comes near; above it a run only makes NaNs
COMPILE_BACKENDS = ("", "inductor", "aot_eager", "eager", "cudagraphs")
OBJECTIVES = ("classify", "mpp")  # labels, or masked patch prediction (§4.6)


def _bf16_precision(value: Any, where: str) -> str:
    """The train.precision that the deprecated `train.bf16 = value` stands for."""
    if not isinstance(value, bool):
        raise ValueError(f"{where}: train.bf16 must be true or false, got {value!r} (train.bf16 is deprecated: write "
                         "train.precision = \"fp32\" or \"bf16-autocast\")")
    return "bf16-autocast" if value else "fp32"


def upgrade_keys(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """A recipe layer (nested sections) with its deprecated keys written in their new names: train.bf16 -> train.precision,
    with a FutureWarning naming the new key; both given and disagreeing is an error naming both."""
    train = cfg.get("train")
    if not isinstance(train, dict) or "bf16" not in train:
        return cfg
    new = _bf16_precision(train["bf16"], where)
    if "precision" in train and train["precision"] != new:
        raise ValueError(f"{where}: train.bf16 = {str(train['bf16']).lower()} disagrees with train.precision = "
                         f"{train['precision']!r}; train.bf16 is deprecated: keep train.precision only")
    warnings.warn(f"{where}: train.bf16 is deprecated: write train.precision = \"{new}\"", FutureWarning, stacklevel=3)
    body = {k: v for k, v in train.items() if k != "bf16"}
    body["precision"] = new
    return {**cfg, "train": body}


def upgrade_train_dict(d: dict[str, Any]) -> dict[str, Any]:
    """A saved train_config.json / training state's options with the deprecated `bf16` as `precision` (quietly: a
    run saved before the rename is read back the same)."""
    d = dict(d)
    if "bf16" in d:
        d.setdefault("precision", _bf16_precision(d.pop("bf16"), "train_config"))
    return d


@dataclass
class TrainConfig(RecipeSection):
    """Plain data describing one training run (serialised into the run folder as train_config.json).

    The [optim], [schedule] and [train] sections of a recipe: each field declares the recipe key it is
    (`[optim] name` is `optimizer`, `[schedule] decay` is `schedule`, the others keep their names), so a key
    has one name and one default."""

    steps: int = key("schedule.steps", 1000)
    batch_size: int = key("train.batch_size", 512, "the global batch (all processes, all micro-batches)")
    grad_accum: int = key("train.grad_accum", 1, "micro-batches per step; the global batch stays batch_size")
    world_invariant: bool = key("train.world_invariant", False, "bitwise the same run under any number of "
                                 "processes that divides grad_accum (each micro-batch's gradient is computed whole "
                                 "on one rank, then the gradients are summed in micro-batch order); DDP only")
    optimizer: str = key("optim.name", "adamw", "adamw | adam | sgd")
    lr: float = key("optim.lr", 1e-3)
    betas: tuple[float, float] = key("optim.betas", (0.9, 0.999))
    momentum: float = key("optim.momentum", 0.9, "SGD momentum")
    weight_decay: float = key("optim.weight_decay", 0.0)
    warmup_steps: int = key("schedule.warmup_steps", 100)
    schedule: str = key("schedule.decay", "cosine", "cosine | linear | constant")
    min_lr: float = key("schedule.min_lr", 0.0)
    clip_norm: float | None = key("optim.clip_norm", 1.0, "global gradient-norm clipping; 0 or None = off")
    label_smoothing: float = key("optim.label_smoothing", 0.0)
    mixup: float = key("train.mixup", 0.0, "Mixup: Beta(alpha, alpha) of the blend; 0 = off")
    cutmix: float = key("train.cutmix", 0.0, "CutMix: Beta(alpha, alpha) of the kept area; 0 = off")
    mix_switch_prob: float = key("train.mix_switch_prob", 0.5, "with both on: the chance a batch gets CutMix")
    mix_prob: float = key("train.mix_prob", 1.0, "the chance a batch is mixed at all")
    distill: str = key("train.distill", "none", "knowledge distillation from train.teacher: none | soft | hard")
    distill_alpha: float = key("train.distill_alpha", 0.5, "weight of the distillation term (1 - it: the labels')")
    distill_tau: float = key("train.distill_tau", 1.0, "soft distillation temperature")
    layer_decay: float | None = key("optim.layer_decay", 0.0, "layer-wise lr decay (fine-tuning): block i of L at "
                                     "lr x decay^(L - i), embeddings lowest, head full; 0 or None = off")
    train_blocks: int = key("optim.train_blocks", -1, "fine-tuning: -1 trains all; 0 the head alone (linear probe); "
                             "k the last k blocks, the final norm and the head")
    ema_decay: float | None = key("train.ema_decay", 0.0, "Polyak averaging factor; 0 or None = off")
    precision: str = key("train.precision", TRAIN_PRECISION, "fp32 | bf16-autocast (bf16 matmuls under autocast, fp32 "
                         "master weights); replaces train.bf16")
    seed: int = key("train.seed", 0)
    log_every: int = key("train.log_every", 10)
    eval_every: int = key("train.eval_every", 0)
    ckpt_every: int = key("train.ckpt_every", 0)
    device: str = key("train.device", "cpu")
    tensorboard: bool = key("train.tensorboard", True, "also write TensorBoard event files (when installed)")
    compile: str | bool = key("train.compile", "", "torch.compile backend (true = inductor), with Adam(W)'s fused "
                               "update on the CPU too; '' = eager")
    parallel: str = key("train.parallel", "ddp", "under torchrun: ddp (replicated weights) | fsdp (sharded)")
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Checked on construction: a bad value fails before any data is read, naming the field."""
        if self.compile is True or self.compile is False:
            self.compile = "inductor" if self.compile else ""
        self.clip_norm = self.clip_norm or None
        self.ema_decay = self.ema_decay or None
        self.layer_decay = self.layer_decay or None
        check_int("steps", self.steps)
        check_int("batch_size", self.batch_size)
        check_int("grad_accum", self.grad_accum)
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_int("log_every", self.log_every)
        check_int("eval_every", self.eval_every, low=0)
        check_int("ckpt_every", self.ckpt_every, low=0)
        check_int("seed", self.seed, low=0)
        check_int("train_blocks", self.train_blocks, low=-1)
        check_choice("optimizer", self.optimizer.lower() if isinstance(self.optimizer, str) else self.optimizer,
                     ("adamw", "adam", "sgd"))
        check_choice("schedule", self.schedule, SCHEDULES)
        check_range("lr", self.lr, 0.0, MAX_LR, low_open=True, high_open=False)
        check_int("seed", self.seed, low=0, high=2**32 - 1)
        if self.precision not in TRAIN_PRECISIONS:
            hint = " (training keeps fp32 master weights: bf16-autocast)" if self.precision == "bf16" else ""
            raise ValueError(f"precision must be one of {', '.join(TRAIN_PRECISIONS)}{hint}; got {self.precision!r}")
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_BACKENDS:
            raise ValueError(f"compile must be true, false or a torch.compile backend ({', '.join(COMPILE_BACKENDS[1:])}),"
                             f" got {self.compile!r}")
        check_range("min_lr", self.min_lr, 0.0, math.inf)
        check_range("weight_decay", self.weight_decay, 0.0, math.inf)
        check_range("momentum", self.momentum, 0.0, 1.0)
        check_range("label_smoothing", self.label_smoothing, 0.0, 1.0)
        check_range("mixup", self.mixup, 0.0, math.inf)
        check_range("cutmix", self.cutmix, 0.0, math.inf)
        check_range("mix_switch_prob", self.mix_switch_prob, 0.0, 1.0, high_open=False)
        check_range("mix_prob", self.mix_prob, 0.0, 1.0, high_open=False)
        check_choice("distill", self.distill, KINDS)
        check_range("distill_alpha", self.distill_alpha, 0.0, 1.0, high_open=False)
        check_range("distill_tau", self.distill_tau, 0.0, math.inf, low_open=True)
        if not isinstance(self.betas, (list, tuple)) or len(self.betas) != 2:
            raise ValueError(f"betas must be two numbers (beta1, beta2), got {self.betas!r}")
        self.betas = (check_range("betas[0]", self.betas[0], 0.0, 1.0), check_range("betas[1]", self.betas[1], 0.0, 1.0))
        if self.clip_norm is not None:
            check_range("clip_norm", self.clip_norm, 0.0, math.inf, low_open=True)
        if self.ema_decay is not None:
            check_range("ema_decay", self.ema_decay, 0.0, 1.0, low_open=True)
        if self.layer_decay is not None:
            check_range("layer_decay", self.layer_decay, 0.0, 1.0, low_open=True, high_open=False)
        if self.parallel not in dist.PARALLEL:
            raise ValueError(f"parallel mode {self.parallel!r} is unknown; choose one of {', '.join(dist.PARALLEL)}")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}")
        if self.world_invariant and self.parallel == "fsdp":
            raise ValueError("train.world_invariant works with parallel = ddp (FSDP reduces sharded gradients itself)")
        dist.check_device(self.device)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        d = upgrade_train_dict(d)
        check_fields(cls, d, "training options")
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)


@dataclass
class ModelSpec(RecipeSection):
    """[model]: what is trained. A registry name (from scratch) or a checkpoint to fine-tune; every other key of the
    section is a field of the model's own config (ViTConfig: width, depth, ...; BiTConfig for `bit` models), kept in
    `arch` and handed to `create_model`, or, for a checkpoint, the values its file may not record (num_heads, gelu,
    ln_eps)."""

    name: str = key("model.name", "vit_b16", "registry name used when training from scratch")
    pretrained: str = key("model.pretrained", "", "checkpoint to fine-tune (any format vitkit reads, or a Hugging "
                          "Face hub id)")
    revision: str = key("model.revision", "", "with a hub id as model.pretrained: its branch, tag or commit (default "
                        "main); a run records here the commit it loaded")
    img_size: Any = key("model.img_size", None, "S, [H, W] or \"HxW\"; default: the size the name implies (a timm name's "
                        "resolution: vit_base_patch16_384 -> 384; else 224), or model.pretrained's own")
    num_classes: int = key("model.num_classes", 0, "0: the number of classes of the data")
    grad_checkpointing: bool = key("model.grad_checkpointing", False)
    require_pretrained: bool = key("model.require_pretrained", False, "fine-tuning recipes: refuse to start without "
                                   "model.pretrained")
    arch: dict[str, Any] = field(default_factory=dict)

    ARCH_FIELDS = frozenset(ViTConfig.__dataclass_fields__) | frozenset(BiTConfig.__dataclass_fields__)
    HINTS = ("num_heads", "gelu", "ln_eps", "pooling", "layer_scale")  # what a checkpoint file may not record

    def __post_init__(self) -> None:
        for k in ("name", "pretrained", "revision"):
            if not isinstance(getattr(self, k), str):
                raise ValueError(f"model.{k} must be a string, got {getattr(self, k)!r}")
        if self.revision and not self.pretrained:
            raise ValueError(f"model.revision = {self.revision!r} names a version of model.pretrained's hub repo, and "
                             "model.pretrained is not set")
        if isinstance(self.img_size, str):
            self.img_size = parse_img_size(self.img_size, "model.img_size")
        if self.img_size is None and not self.pretrained:
            self.img_size = name_img_size(self.name)  # what the name implies, never a generic default
        if self.img_size is not None:
            to_pair(self.img_size, "model.img_size")
        check_int("model.num_classes", self.num_classes, low=0)
        for k in ("grad_checkpointing", "require_pretrained"):
            if not isinstance(getattr(self, k), bool):
                raise ValueError(f"model.{k} must be true or false, got {getattr(self, k)!r}")
        bad = sorted(set(self.arch) - self.ARCH_FIELDS)
        if bad:
            raise ValueError(f"unknown key(s) {bad} in [model]{closest(bad[0], self.known_keys())}")

    @classmethod
    def known_keys(cls) -> set[str]:
        return {k for _, k in cls.recipe_fields().values()} | set(cls.ARCH_FIELDS)

    @classmethod
    def from_recipe(cls, sections: dict[str, Any], **extra: Any) -> ModelSpec:
        own = {k for _, k in cls.recipe_fields().values()}
        arch = {k: v for k, v in sections.get("model", {}).items() if k not in own}
        return super().from_recipe(sections, arch=arch, **extra)

    def to_recipe(self) -> dict[str, dict[str, Any]]:
        out = super().to_recipe()
        out["model"].update(self.arch)
        return out

    @property
    def size(self) -> tuple[int, int] | None:
        """(H, W) to train at; None: model.pretrained's own size."""
        return None if self.img_size is None else to_pair(self.img_size, "model.img_size")

    def size_note(self) -> str:
        """A line for the run's header when model.img_size overrides the size the name implies (applied, as
        `create_model(name, img_size=...)` applies it), else ''."""
        implied = name_overrides(self.name).get("img_size")
        if self.pretrained or implied is None or self.size == (implied, implied):
            return ""
        h, w = self.size
        return f"note: model.img_size = {h}x{w} overrides the {implied} px that {self.name} implies (E_pos built for {h}x{w})"

    @property
    def in_chans(self) -> int | None:
        return self.arch.get("in_chans")

    @property
    def hints(self) -> dict[str, Any]:
        """The [model] values a pretrained checkpoint's file may not record (`load_pretrained`'s hints)."""
        return {k: self.arch[k] for k in self.HINTS if k in self.arch}


@dataclass
class MppConfig(RecipeSection):
    """[mpp]: masked patch prediction (§4.6, appendix B.1.2), used when train.objective = "mpp"."""

    corrupt: float = key("mpp.corrupt", 0.5, "fraction of patch embeddings corrupted")
    replace_mask: float = key("mpp.replace_mask", 0.8, "of those: replaced by the learned [mask] embedding")
    replace_random: float = key("mpp.replace_random", 0.1, "... by another patch's embedding (the rest are kept)")
    bits: int = key("mpp.bits", 3, "mean colour quantised to this many bits per channel: 512 classes for RGB")

    def __post_init__(self) -> None:
        check_range("mpp.corrupt", self.corrupt, 0.0, 1.0, high_open=False, low_open=True)
        check_range("mpp.replace_mask", self.replace_mask, 0.0, 1.0, high_open=False)
        check_range("mpp.replace_random", self.replace_random, 0.0, 1.0 - float(self.replace_mask), high_open=False)
        check_int("mpp.bits", self.bits)


@dataclass
class SweepConfig(RecipeSection):
    """[sweep]: one run per learning rate, the pick on the dev split."""

    lrs: list[float] = key("sweep.lrs", [0.001, 0.003, 0.01, 0.03])

    def __post_init__(self) -> None:
        if not isinstance(self.lrs, list):
            raise ValueError(f"sweep.lrs must be a list of learning rates, got {self.lrs!r}")
        for lr in self.lrs:
            check_range("sweep.lrs[]", lr, 0.0, MAX_LR, low_open=True, high_open=False)


@dataclass
class LoraSpec(RecipeSection):
    """[lora]: fine-tune with LoRA adapters (Hu et al. 2022, vitkit.models.lora) instead of every weight; rank 0: off."""

    rank: int = key("lora.rank", 0, "rank r of every adapter; 0 = no LoRA (full fine-tuning)")
    alpha: float = key("lora.alpha", 16.0, "the update is scaled by alpha / rank")
    dropout: float = key("lora.dropout", 0.0, "dropout on the adapters' input")
    targets: list[str] = key("lora.targets", list(DEFAULT_TARGETS), "q, k, v (slices of the fused qkv), proj, fc1, fc2")
    train: list[str] = key("lora.train", ["head"], "trained beside the adapters: head, norm, bias")

    def __post_init__(self) -> None:
        check_int("lora.rank", self.rank, low=0)
        self.config(max(self.rank, 1))  # every other value checked, also while LoRA is off

    def config(self, rank: int | None = None) -> LoraConfig:
        """The model layer's LoraConfig of these keys."""
        return LoraConfig(rank=rank or self.rank, alpha=self.alpha, dropout=self.dropout, targets=tuple(self.targets),
                          train=tuple(self.train))


SECTIONS: dict[str, type[RecipeSection]] = {"model": ModelSpec, "data": DataConfig, "mpp": MppConfig,
                                            "sweep": SweepConfig, "lora": LoraSpec}
TOP_LEVEL = {"description", "extends"}
RECIPE_DIR = "recipes"


@dataclass
class RunConfig(RecipeSection):
    """A whole run: one typed section each, plus the run's objective and teacher (recipe keys train.objective,
    train.teacher). `from_sections` / `sections` convert from / to the nested dict a recipe and run_config.json hold;
    `updated` returns a copy with some recipe keys changed (typed values)."""

    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mpp: MppConfig = field(default_factory=MppConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    lora: LoraSpec = field(default_factory=LoraSpec)
    objective: str = key("train.objective", "classify", "classify (labels) | mpp (masked patch prediction, §4.6)")
    teacher: str = key("train.teacher", "", "checkpoint of the distillation teacher (train.distill = soft | hard)")
    description: str = ""

    def __post_init__(self) -> None:
        """The checks that span sections."""
        check_choice("train.objective", self.objective, OBJECTIVES)
        if not isinstance(self.teacher, str):
            raise ValueError(f"train.teacher must be a checkpoint path, got {self.teacher!r}")
        if bool(self.teacher) != (self.train.distill != "none"):
            raise ValueError("distillation needs both train.distill (soft | hard) and train.teacher (a checkpoint); "
                             f"got train.distill = {self.train.distill!r}, train.teacher = {self.teacher!r}")
        if self.objective == "mpp" and self.teacher:
            raise ValueError("masked patch prediction (train.objective = mpp) has no classes to distil: unset "
                             "train.teacher")
        if self.lora.rank and self.train.train_blocks >= 0:
            raise ValueError(f"lora.rank = {self.lora.rank} trains adapters on every block; optim.train_blocks = "
                             f"{self.train.train_blocks} trains whole blocks: use one or the other")
        if self.objective == "mpp" and (self.train.mixup or self.train.cutmix):
            raise ValueError("train.mixup / train.cutmix mix labels; masked patch prediction (train.objective = mpp) "
                             "has none: turn them off")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """{section: {key: default}} of every recipe key."""
        out: dict[str, Any] = {}
        for section in (ModelSpec, DataConfig, TrainConfig, MppConfig, SweepConfig, LoraSpec, cls):
            for sec, body in section.recipe_defaults().items():
                out.setdefault(sec, {}).update(body)
        return out

    @classmethod
    def from_sections(cls, raw: dict[str, Any], where: str = "config") -> RunConfig:
        """A RunConfig from a recipe's nested dict over the defaults; unknown sections and keys are refused
        (with the closest valid name), a bad value names its key, an AugReg preset is written out."""
        raw = upgrade_keys(raw, where)
        check_keys(raw, where)
        merged = merge(cls.defaults(), {k: v for k, v in raw.items() if k not in TOP_LEVEL})
        merged = apply_augreg(merged)
        desc = raw.get("description", "")
        if not isinstance(desc, str):
            raise ValueError(f"{where}: description must be a string, got {desc!r}")
        return cls.from_recipe(merged, model=ModelSpec.from_recipe(merged), data=DataConfig.from_recipe(merged),
                               train=TrainConfig.from_recipe(merged), mpp=MppConfig.from_recipe(merged),
                               sweep=SweepConfig.from_recipe(merged), lora=LoraSpec.from_recipe(merged),
                               description=desc)

    def sections(self) -> dict[str, Any]:
        """The nested dict of every key (run_config.json; `from_sections` reads it back to an equal RunConfig)."""
        out: dict[str, Any] = {"description": self.description} if self.description else {}
        for part in (self.model, self.data, self.train, self.mpp, self.sweep, self.lora):
            out = merge(out, part.to_recipe())
        for sec, body in super().to_recipe().items():
            out[sec].update(body)
        return out

    def updated(self, values: dict[str, Any]) -> RunConfig:
        """A copy with recipe keys changed: `{"optim.lr": 0.01, "data.path": "/data"}` (typed values)."""
        return RunConfig.from_sections(merge(self.sections(), nest(values)), "values")

    def flat(self) -> dict[str, Any]:
        """{"section.key": value} of every key (what a resume compares)."""
        return flatten(self.sections())


def flatten(cfg: dict[str, Any]) -> dict[str, Any]:
    return {f"{sec}.{k}" if isinstance(body, dict) else sec: v
            for sec, body in cfg.items() for k, v in (body.items() if isinstance(body, dict) else [("", body)])}


def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("vitkit").joinpath(RECIPE_DIR).iterdir() if p.name.endswith(".toml"))


def _read_toml(ref: str) -> tuple[dict[str, Any], str]:
    p = Path(ref)
    if p.is_file():
        text, where = read_text_file(p, "recipe", 16 << 20), str(p)
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


def load_config(ref: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                values: dict[str, Any] | None = None) -> RunConfig:
    """The defaults <- the recipe chain of `ref` (a path or a recipe name) <- `values` ({"section.key": value},
    typed, as commands give them) <- `section.key=value` overrides (TOML text, as `--set` gives them)."""
    layers, seen = [], []
    while ref:
        raw, where = _read_toml(ref)
        if where in seen:
            raise ValueError(f"{where}: `extends` loops back to itself")
        seen.append(where)
        raw = upgrade_keys(raw, where)
        check_keys(raw, where)
        layers.append(raw)
        ref = raw.get("extends")
    cfg: dict[str, Any] = {}
    for raw in reversed(layers):
        cfg = merge(cfg, {k: v for k, v in raw.items() if k != "extends"})
    if values:
        over = upgrade_keys(nest(values), "values")
        check_keys(over, "values")
        cfg = merge(cfg, over)
    for item in overrides:
        over = upgrade_keys(parse_override(item), "--set")
        check_keys(over, "--set")
        cfg = merge(cfg, over)
    return RunConfig.from_sections(cfg, seen[0] if seen else "config")


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """{"optim.lr": 0.1} -> {"optim": {"lr": 0.1}}."""
    out: dict[str, Any] = {}
    for dotted, v in values.items():
        sec, dot, k = dotted.partition(".")
        if not dot or not k or "." in k:
            raise ValueError(f"{dotted!r}: a recipe key is section.key, e.g. optim.lr")
        out.setdefault(sec, {})[k] = v
    return out


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
    defaults = RunConfig.defaults()
    for sec, k in (("data", "randaugment"), ("train", "mixup")):
        have = cfg[sec][k]
        if have not in (defaults[sec][k], preset[k]):
            raise ValueError(f"{sec}.{k} = {have!r} disagrees with data.augreg = {name!r} ({preset[k]!r}); "
                             "set one or the other")
    return out


def config_from_dict(raw: dict[str, Any], where: str = "config") -> RunConfig:
    """A RunConfig from sections written as Python data (the defaults fill the rest; unknown keys refused)."""
    return RunConfig.from_sections(raw, where)


def parse_override(item: str) -> dict[str, Any]:
    """`optim.lr=0.003` -> {"optim": {"lr": 0.003}}."""
    k, sep, value = item.partition("=")
    parts = k.strip().split(".")
    if not sep or len(parts) != 2 or not all(parts):
        raise ValueError(f"--set {item!r}: expected section.key=value, e.g. optim.lr=0.003")
    try:
        v = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        v = value.strip()
    except RecursionError:
        raise ValueError(f"--set {k.strip()}: the value is nested too deep") from None
    return {parts[0]: {parts[1]: v}}


def check_keys(cfg: dict[str, Any], where: str) -> None:
    """Unknown sections and keys refused, naming the closest valid one."""
    known = RunConfig.defaults()
    for section, body in cfg.items():
        if section in TOP_LEVEL:
            continue
        if section not in known or not isinstance(body, dict):
            raise ValueError(f"{where}: unknown section [{section}]{closest(section, known)}; sections: "
                             f"{sorted(known)}")
        allowed = set(known[section]) | (set(ModelSpec.ARCH_FIELDS) if section == "model" else set())
        bad = sorted(set(body) - allowed)
        if bad:
            raise ValueError(f"{where}: unknown key(s) {bad} in [{section}]{closest(bad[0], allowed)}; known: "
                             f"{sorted(allowed)}")
