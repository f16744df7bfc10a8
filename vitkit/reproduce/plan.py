"""The laptop set-up of `vitkit reproduce`, as plain data: model families, sizes, schedules, scales.

Every run is 16x16 grey images, 1000 glyph classes (vitkit/data/glyphs.py) for pre-training; transfer is
measured on real images no run trained on (scikit-learn's digits, scikit-image's lfw_subset). The three
families are sized to the same pre-training compute (forward FLOPs per image within about 1.6x of each
other, counted by vitkit.models.flops.model_flops), as the paper's Fig. 3-4 compare ViT-B/32 with
ResNet50 (§4.2). Pre-training follows the paper's recipe at small scale (Adam(W) with decoupled weight
decay, linear warmup then linear decay, no augmentation or label smoothing, the same hyper-parameters for
every subset); fine-tuning follows its appendix B.1.1 (SGD with momentum 0.9, no weight decay, gradient
clipping at 1, cosine decay).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# The families of Fig. 3-5, each at three sizes ("B" is the size of the data-size sweep).
_VIT = {"name": "vit", "patch_size": 4, "num_heads": 4}
_HYBRID = {"name": "vit", "patch_size": 1, "num_heads": 4, "resnet_layers": [1]}
MODELS: dict[str, dict[str, dict[str, Any]]] = {
    "ViT": {
        "S": {**_VIT, "width": 32, "depth": 4, "mlp_dim": 64},
        "B": {**_VIT, "width": 64, "depth": 4, "mlp_dim": 128},
        "L": {**_VIT, "patch_size": 2, "width": 64, "depth": 4, "mlp_dim": 128},  # B at half the patch (B/16 vs B/32)
    },
    "ResNet": {  # BiT: pre-activation ResNet-v2, GroupNorm + weight standardisation
        "S": {"name": "bit", "layers": [1, 1], "width_factor": 0.5},
        "B": {"name": "bit", "layers": [2, 2], "width_factor": 0.5},
        "L": {"name": "bit", "layers": [2, 2], "width_factor": 1.0},
    },
    "Hybrid": {  # one BiT stage (stride 4, as R50's first stage at 224 px gives ViT a 4x4 grid here)
        "S": {**_HYBRID, "resnet_width": 0.5, "width": 64, "depth": 2, "mlp_dim": 128},
        "B": {**_HYBRID, "resnet_width": 0.5, "width": 64, "depth": 4, "mlp_dim": 128},
        "L": {**_HYBRID, "resnet_width": 1.0, "width": 96, "depth": 6, "mlp_dim": 192},
    },
}
# The laptop scale's set: the same, but ViT-L is ViT-S at half the patch (an 8x8 grid at a quarter of ViT-L's cost:
# experiment 3 needs the grid, not the width).
LAPTOP_MODELS: dict[str, dict[str, dict[str, Any]]] = {
    **MODELS, "ViT": {**MODELS["ViT"], "L": {**_VIT, "patch_size": 2, "width": 32, "depth": 4, "mlp_dim": 64}}}
# The smoke scale's set: the same shapes (patch grids, stages, a hybrid stem) at a fraction of the width and depth,
# so that every experiment's plumbing runs in seconds.
_TVIT = {"name": "vit", "patch_size": 4, "num_heads": 2, "width": 16, "mlp_dim": 32}
_THYB = {**_TVIT, "patch_size": 1, "resnet_layers": [1], "resnet_width": 0.5}  # 0.5: GroupNorm's 32 groups
TINY_MODELS: dict[str, dict[str, dict[str, Any]]] = {
    "ViT": {"S": {**_TVIT, "depth": 1}, "B": {**_TVIT, "depth": 2}, "L": {**_TVIT, "patch_size": 2, "depth": 2}},
    "ResNet": {"S": {"name": "bit", "layers": [1], "width_factor": 0.5},
               "B": {"name": "bit", "layers": [1, 1], "width_factor": 0.5},
               "L": {"name": "bit", "layers": [2, 2], "width_factor": 0.5}},
    "Hybrid": {"S": {**_THYB, "depth": 1}, "B": {**_THYB, "depth": 2}, "L": {**_THYB, "depth": 3}},
}
MODEL_SETS = {"paper": MODELS, "laptop": LAPTOP_MODELS, "tiny": TINY_MODELS}
FAMILIES = tuple(MODELS)
OPTIMIZERS = ("adamw", "sgd")  # appendix D.1 (Table 7): the ResNet pre-trained with Adam or SGD with momentum
POSEMBS = ("none", "learn1d", "learn2d", "relative")  # appendix D.4 (Table 8)
IMG_SIZE = 16


@dataclass(frozen=True)
class Scale:
    """How big each experiment is: `LAPTOP` (`vitkit reproduce --all`: every verdict's point with 3 seeds, sized for
    2 cores; times in REPRODUCTION.md), `FULL` (the larger grid of `--scale long`) or `SMOKE` (the plumbing only)."""

    name: str
    glyph_images: int  # the largest pre-training set
    sizes: tuple[int, ...]  # the data-size axis (random nested subsets; the last is the whole set)
    steps: int  # pre-training steps of every run (the same for every subset, as in the paper)
    batch: int
    eval_every: int  # few-shot evaluation during pre-training (the paper's early stopping, §4.2)
    finetune_steps: int
    finetune_batch: int
    finetune_lrs: tuple[float, ...]  # swept; the pick is the best digits dev accuracy (never test)
    finetune_seeds: tuple[int, ...]
    posemb_seeds: tuple[int, ...]
    mpp_steps: tuple[int, ...]  # masked-patch pre-training lengths (§4.6)
    glyph_classes: int = 1000
    # masked patch prediction's pre-training rate (Adam(W); the paper's is 2e-4 at batch 4096, appendix B.1.2): picked
    # on this grid, extended past an edge that wins, by the rule's metric on dev (digits dev accuracy after
    # fine-tuning; MPP seed 0 fine-tuned with seed 0) at the longest MPP length, then used at every length
    mpp_lrs: tuple[float, ...] = (2e-4, 6e-4, 2e-3, 6e-3)
    # pre-training learning rate per family: the best 5-shot digits dev accuracy of {1e-3, 3e-3, 6e-3, 1.2e-2}
    # on the whole set (benchmarks/reproduce_lr.py; REPRODUCTION.md has the figures) -- 6e-3 for all three --
    # then fixed for every subset
    lrs: dict[str, float] = field(default_factory=lambda: {"ViT": 6e-3, "ResNet": 6e-3, "Hybrid": 6e-3})
    shots: tuple[int, ...] = (1, 5, 10, 25)
    fewshot_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    transfer_limit: int = 0  # > 0: at most this many images per transfer split (smoke runs only)
    # > 0: the glyph test split's images (data.glyph_test_images; smoke runs only); 0: glyph_test_size(glyph_images)
    glyph_test_images: int = 0
    select_shots: int = 5  # early stopping picks the step with the best 5-shot digits *dev* accuracy
    glyph_stream: bool = False  # glyphs drawn when loaded (data.glyph_stream: 10^6-10^8 images), not held
    evals_per_run: int = 0  # > 0: evaluate this many times in each run, whatever its length (not every eval_every)
    num_workers: int = 0  # loader processes of each pre-training run (drawing a glyph stream overlaps training)
    # pre-training seeds of every point of experiments 1-3 (data size, compute, what the ViT learns): a verdict
    # needs at least 3 (rules.py)
    pretrain_seeds: tuple[int, ...] = (0,)
    # appendix D.3 (class token vs global average pooling): each variant's pre-training rate is picked on this grid
    # (seed 0, 5-shot digits dev), extended past an edge that wins
    pooling_lrs: tuple[float, ...] = (3e-3, 6e-3, 1.2e-2)
    models: str = "paper"  # the model set (MODEL_SETS): "paper" (the table in docs/reproduction/history.md), "laptop", "tiny"
    compute_sizes: tuple[str, ...] = ("S", "B", "L")  # experiment 2's sizes of each family (Fig. 5)
    # appendix D.1 (Table 7): the ResNet's pre-training rate per optimiser is picked on this grid (seed 0, 5-shot
    # digits dev), extended past an edge that wins
    optimizer_lrs: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: {"adamw": (3e-3, 6e-3, 1.2e-2), "sgd": (0.03, 0.1, 0.3)})
    # every supervised model's own pre-training rate (a family at a size with its position embedding and pooling;
    # vitkit/reproduce/tuning.py): picked on this grid on the whole set (seed 0, 5-shot digits dev, the scale's
    # schedule), extended past an edge that wins, then used for every seed and subset of that model; it replaces
    # pooling_lrs and optimizer_lrs["adamw"] (one sweep per model). Empty: off -- every run takes `lrs`, and only
    # experiments 8 and 10 sweep, on their own grids
    tune_lrs: tuple[float, ...] = ()
    # fine-tuning: a sweep of finetune_lrs whose best lies at an edge is extended past it by the grid's ratio, up to
    # this many rates per side, so that the pick is bracketed (0: the grid as it is)
    finetune_extend: int = 0
    # training states written by each pre-training run (every steps // this many steps, the last at its end): what a
    # killed run resumes from. The smoke scale's few-step runs write 2, not one a step (each a file written and synced)
    pretrain_checkpoints: int = 4

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL = Scale(
    name="full", glyph_images=100_000, sizes=(1_563, 6_250, 25_000, 100_000), steps=1000, batch=128, eval_every=250,
    finetune_steps=300, finetune_batch=64, finetune_lrs=(0.01, 0.03), finetune_seeds=(0, 1, 2),
    posemb_seeds=(0, 1, 2), mpp_steps=(250, 1000, 3000), pretrain_seeds=(0, 1, 2), finetune_extend=4,
    tune_lrs=(3e-3, 6e-3, 1.2e-2),  # every model's own rate, as the laptop's (its B models' sweep: 6e-3 interior)
)
# The smoke scale: tiny models (TINY_MODELS), 100 glyph classes, 4 pre-training steps, 60 transfer images per split (5
# shots of each digit still fit; its sample figure draws 2,000 glyphs, not 20,000), 250 glyph test images (not 1,000:
# each run's final evaluation of them cost more than its 4 training steps); its fine-tunes
# still learn the digits (40 SGD steps at 0.05; tests/reproduce/test_reproduce.py asserts at least twice chance), so
# a broken fine-tune shows in the seconds-long run.
SMOKE = Scale(
    name="smoke", glyph_images=1_000, sizes=(250, 1_000), steps=4, batch=16, eval_every=4, finetune_steps=40,
    finetune_batch=32, finetune_lrs=(0.05,), finetune_seeds=(0,), posemb_seeds=(0,), mpp_steps=(2, 4), shots=(1, 5),
    fewshot_seeds=(0,), transfer_limit=60, models="tiny", mpp_lrs=(3e-3, 6e-3), glyph_classes=100,
    optimizer_lrs={"adamw": (3e-3, 6e-3), "sgd": (0.05, 0.1)}, pretrain_checkpoints=2, glyph_test_images=250,
)
# `vitkit reproduce --all`: every experiment with 3 pre-training (and fine-tuning) seeds in under an hour on 2 cores
# (measured 2026-11-26: 39 min 48 s in one invocation from an empty folder, the test suite beside it; REPRODUCTION.md
# section 5 and benchmarks/results/reproduce/laptop/timing.md say what supports it).
# Smaller than FULL everywhere: 100 glyph classes (32,000 images seen left ViT-B near chance on 1,000), 20,000
# images (nested subsets of 2,500 and 20,000), 500 steps of batch 64, ViT-L narrower (LAPTOP_MODELS), Fig. 5 over
# the S and B sizes, shorter fine-tunes. Every supervised model's pre-training rate tuned on {3e-3, 6e-3, 1.2e-2}
# (tune_lrs; a pick of 6e-3 is the unit the 2026-11-25 run trained at `lrs`), every fine-tuning sweep bracketed.
LAPTOP = Scale(
    name="laptop", glyph_images=20_000, sizes=(2_500, 20_000), steps=500, batch=64, eval_every=125,
    finetune_steps=150, finetune_batch=64, finetune_lrs=(0.01, 0.03), finetune_seeds=(0, 1, 2),
    posemb_seeds=(0, 1, 2), mpp_steps=(100, 500), pretrain_seeds=(0, 1, 2), models="laptop", compute_sizes=("S", "B"),
    glyph_classes=100, tune_lrs=(3e-3, 6e-3, 1.2e-2), finetune_extend=4,
)
SCALES = {s.name: s for s in (LAPTOP, FULL, SMOKE)}
# `vitkit reproduce --scale` (and --smoke) -> the Scale of experiments 1-6 and 8-10 (the crossover's grid has the
# option's own name); "long" is the Scale named "full", the name its run folders and result JSON are written with
SCALE_OPTIONS = {"smoke": SMOKE.name, "laptop": LAPTOP.name, "long": FULL.name}


def scale_label(name: str) -> str:
    """The `--scale` name of a Scale's (or crossover grid's) name, as the documents say it: "full" -> "long"."""
    return next((o for o, s in SCALE_OPTIONS.items() if s == name), name)


@dataclass(frozen=True)
class Pretrain:
    """One pre-training run: a family at a size, on `images` glyphs, `steps` long, with a seed."""

    family: str
    size: str = "B"
    images: int = 0  # 0: the whole set
    steps: int = 0  # 0: the scale's
    seed: int = 0
    posemb: str = "learn1d"
    objective: str = "classify"  # or "mpp" (§4.6: labels unused)
    pooling: str = "token"  # or "gap": global average pooling and no class token (appendix D.3)
    lr: float = 0.0  # 0: the scale's rate for the family
    optimizer: str = "adamw"  # or "sgd": SGD with momentum 0.9 (appendix D.1)

    def name(self, scale: Scale) -> str:
        n = self.images or scale.glyph_images
        tag = ("" if self.posemb == "learn1d" else f"_pos-{self.posemb}") + (
            "" if self.pooling == "token" else f"_pool-{self.pooling}")
        obj = ("" if self.objective == "classify" else f"_{self.objective}") + (
            "" if self.optimizer == "adamw" else f"_{self.optimizer}")
        lr = f"_lr{self.lr:g}" if self.lr else ""
        return f"{self.family.lower()}-{self.size}{tag}{obj}_n{n}_steps{self.steps or scale.steps}{lr}_seed{self.seed}"


def model_section(family: str, size: str, posemb: str = "learn1d", pooling: str = "token",
                  models: str = "paper") -> dict[str, Any]:
    """The [model] section of a family at a size, from the model set `models` (MODEL_SETS: a scale's)."""
    m = {**MODEL_SETS[models][family][size], "img_size": IMG_SIZE, "in_chans": 1}
    if pooling != "token":
        if family == "ResNet":
            raise ValueError("a ResNet has no class token to replace by pooling")
        m["pooling"] = pooling
    if posemb != "learn1d":
        if family == "ResNet":
            raise ValueError("a ResNet has no position embeddings")
        m["posemb"] = posemb
    return m


def pretrain_config(run: Pretrain, scale: Scale, device: str = "cpu") -> dict[str, Any]:
    """The run config (vitkit.train.config sections) of one pre-training run."""
    n = run.images or scale.glyph_images
    steps = run.steps or scale.steps
    every = max(1, steps // scale.evals_per_run) if scale.evals_per_run else scale.eval_every
    return {
        "description": f"reproduce: pre-train {run.family}-{run.size} on {n} glyphs ({run.objective})",
        "model": model_section(run.family, run.size, run.posemb, run.pooling, scale.models),
        "data": {"name": "glyphs", "glyph_images": scale.glyph_images, "glyph_classes": scale.glyph_classes, "glyph_size": IMG_SIZE,
                 "subset": 0 if n == scale.glyph_images else n, "channels": 1, "augment": "none", "flip": False,
                 "num_workers": scale.num_workers, "eval_split": "dev", "mean": [0.5], "std": [0.5],
                 "glyph_stream": scale.glyph_stream,
                 **({"glyph_test_images": scale.glyph_test_images} if scale.glyph_test_images else {})},
        "optim": optim_section(run, scale),
        "schedule": {"steps": steps, "warmup_steps": max(1, steps // 10), "decay": "linear"},
        "train": {"batch_size": scale.batch, "seed": run.seed, "log_every": max(1, min(50, steps // 4)),
                  "eval_every": every, "ckpt_every": max(1, steps // scale.pretrain_checkpoints),
                  "objective": run.objective, "tensorboard": False, "device": device},
    }


def optim_section(run: Pretrain, scale: Scale) -> dict[str, Any]:
    """Pre-training's optimiser: AdamW with decoupled weight decay 0.05 (the paper's Adam, §4.1), or for appendix
    D.1 SGD with momentum 0.9 and weight decay 1e-4 (BiT's upstream recipe); clipping at 1 for both."""
    lr = run.lr or scale.lrs[run.family]
    if run.optimizer == "adamw":
        return {"name": "adamw", "lr": lr, "weight_decay": 0.05, "clip_norm": 1.0, "label_smoothing": 0.0}
    if run.optimizer == "sgd":
        if not run.lr:
            raise ValueError("an SGD pre-training run needs its own learning rate (the scale's rates are Adam's)")
        return {"name": "sgd", "momentum": 0.9, "lr": lr, "weight_decay": 1e-4, "clip_norm": 1.0,
                "label_smoothing": 0.0}
    raise ValueError(f"pre-training optimizer must be one of {OPTIMIZERS}, got {run.optimizer!r}")


def equal_budget_steps(scale: Scale, pretrain_steps: int) -> int:
    """Fine-tuning steps from scratch that see as many images as `pretrain_steps` of pre-training and the usual
    fine-tuning together (the same model and image size, so the same FLOPs per image): §4.6's fair baseline."""
    return scale.finetune_steps + -(-pretrain_steps * scale.batch // scale.finetune_batch)


def finetune_config(scale: Scale, pretrained: str, lr: float, img_size: int = IMG_SIZE, seed: int = 0,
                    scratch_model: dict[str, Any] | None = None, steps: int | None = None,
                    device: str = "cpu") -> dict[str, Any]:
    """Fine-tuning on the digits (appendix B.1.1's recipe, small) at one learning rate of the sweep: from
    `pretrained`, or from scratch with `scratch_model` (a [model] section) for the §4.6 comparison. 10% of
    the training split is held out as the dev split that picks the learning rate. `steps`: other than the scale's
    (a from-scratch run given the compute of a pre-training run plus its fine-tuning, `equal_budget_steps`)."""
    model = {"pretrained": pretrained, "img_size": img_size} if pretrained else {**(scratch_model or {}),
                                                                                "img_size": img_size}
    s = steps or scale.finetune_steps
    return {
        "description": f"reproduce: fine-tune on digits at {img_size} px",
        "model": model,
        "data": {"name": "digits", "channels": 1, "augment": "affine", "flip": False, "num_workers": 0,
                 "dev_fraction": 0.1, "mean": [0.5], "std": [0.5]},
        "optim": {"name": "sgd", "momentum": 0.9, "lr": lr, "weight_decay": 0.0, "clip_norm": 1.0},
        "schedule": {"steps": s, "warmup_steps": max(1, s // 10), "decay": "cosine"},
        "train": {"batch_size": scale.finetune_batch, "seed": seed, "log_every": max(1, min(50, s // 3)),
                  "eval_every": 0, "ckpt_every": max(1, s // 2), "tensorboard": False, "device": device},
    }


#: the experiments of `vitkit reproduce`, in their order (experiments.py builds each; a test checks the two agree)
EXPERIMENT_NAMES = ("fig4", "size", "fig5", "fig7", "hires", "posemb", "mpp", "pooling", "optim", "crossover")
#: the crossover grid's scales (crossover.py's CROSSOVER_SCALES): named as the --scale options
CROSSOVER_SCALE_NAMES = tuple(SCALE_OPTIONS)
