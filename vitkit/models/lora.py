"""LoRA (Hu et al., ICLR 2022) on a ViT's encoder: W x + (alpha / r) B A x beside each targeted frozen Linear.

Targets are named per projection: "q", "k", "v" are the three slices of the fused `attn.qkv` Linear (each slice gets
its own A and B, and its update lands on its own rows of the output), "proj" the attention output, "fc1" / "fc2"
the MLP's two layers. Every encoder block is adapted, also Axial-ViT's row and column blocks and a hybrid's
transformer part (the ResNet stem is left frozen). A targeted Linear is replaced in place by a `LoraLinear` that
holds the *same* weight and bias Parameters (shared, not copied), so its state-dict keys stay the same and its
LoRA tensors sit beside them (`blocks.0.attn.qkv.lora_A.q`, `... .lora_B.q`). A is drawn as nn.Linear's kaiming-
uniform init, B is zero, so the adapted model starts equal to the base (Hu et al. §4.1).

`apply_lora` freezes everything but the adapters (and, as asked, the classifier head, the LayerNorms, the biases);
`merge_lora` folds the updates into new plain Linears for inference (the base Parameters are not modified);
`unload_lora` gives the base model back (the shared Parameters, no update). Either way a forward hook on an adapted
Linear stays on the Linear that replaces it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.vit import Block
from vitkit.utils import check_int, check_range

# target -> (module path inside an encoder block, slice index of the fused qkv or None)
TARGETS: dict[str, tuple[str, int | None]] = {"q": ("attn.qkv", 0), "k": ("attn.qkv", 1), "v": ("attn.qkv", 2),
                                             "proj": ("attn.proj", None), "fc1": ("mlp.fc1", None),
                                             "fc2": ("mlp.fc2", None)}
EXTRAS = ("head", "norm", "bias")  # what may train beside the adapters
DEFAULT_TARGETS = ("q", "v")  # Hu et al. §7.1: adapting W_q and W_v
HEAD_MODULES = ("head", "head_dist")  # the classifier(s) a fine-tune replaces
MAX_SCALING = 1e4  # the largest alpha / r accepted: common settings give 0.5 to 64 (rsLoRA at rank 1: alpha)


@dataclass
class LoraConfig:
    """What `apply_lora` adds: rank r, alpha (the update is scaled by alpha / r), dropout on the adapters' input,
    the target projections (`TARGETS`), and what trains beside them (`EXTRAS`: "head" the classifier, "norm" every
    LayerNorm, "bias" every bias)."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = DEFAULT_TARGETS
    train: tuple[str, ...] = ("head",)

    def __post_init__(self) -> None:
        check_int("lora.rank", self.rank)
        check_range("lora.alpha", self.alpha, 0.0, math.inf, low_open=True)
        if self.alpha / self.rank > MAX_SCALING:  # finite, but the update then swamps W x (and overflows)
            raise ValueError(f"lora.alpha / lora.rank = {self.alpha:g} / {self.rank} scales the update by "
                             f"{self.alpha / self.rank:.3g}, over {MAX_SCALING:,.0f} (LoRA's alpha is of the order of "
                             "the rank: Hu et al. §4.1, peft's default 8 / 8)")
        check_range("lora.dropout", self.dropout, 0.0, 1.0)
        self.targets = _names("lora.targets", self.targets, tuple(TARGETS))
        if not self.targets:
            raise ValueError(f"lora.targets is empty; name some of {', '.join(TARGETS)}")
        self.train = _names("lora.train", self.train, EXTRAS)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "dropout": self.dropout, "targets": list(self.targets),
                "train": list(self.train)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoraConfig:
        if not isinstance(d, dict):
            raise ValueError(f"a LoRA config is a JSON object, got {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown LoRA config key(s) {unknown}; known: rank, alpha, dropout, targets, train")
        return cls(**{k: tuple(v) if k in ("targets", "train") else v for k, v in d.items()})


def _names(what: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of names ({', '.join(allowed)}), got {value!r}")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise ValueError(f"{what}: unknown {bad}; choose from {', '.join(allowed)}")
    return tuple(v for v in allowed if v in value)  # one canonical order, no repeats


class LoraLinear(nn.Linear):
    """A frozen nn.Linear (its own weight and bias Parameters, shared with the base model) plus one low-rank update
    per output slice: y = x W^T + b, then y[:, rows_s] += (alpha / r) (dropout(x) A_s^T) B_s^T for each slice s.

    `slices` maps a name to the (start, stop) output rows it updates: q, k and v of a fused qkv, or the whole
    output for a plain projection."""

    def __init__(self, base: nn.Linear, slices: dict[str, tuple[int, int]], rank: int, alpha: float,
                 dropout: float) -> None:
        nn.Module.__init__(self)  # nn.Linear's own __init__ would allocate a new weight: the base's is taken
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        self.slices = dict(slices)
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()
        w = base.weight
        self.lora_A = nn.ParameterDict({s: nn.Parameter(w.new_empty(rank, self.in_features)) for s in slices})
        self.lora_B = nn.ParameterDict({s: nn.Parameter(w.new_zeros(b - a, rank)) for s, (a, b) in slices.items()})
        for a in self.lora_A.values():  # nn.Linear's init for A (peft's and the reference code's), B = 0
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))

    def delta_weight(self, name: str) -> torch.Tensor:
        """(alpha / r) B A of slice `name`: what merging adds to its rows of the weight."""
        return (self.lora_B[name] @ self.lora_A[name]) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        h = self.drop(x)
        updates = {s: F.linear(F.linear(h, self.lora_A[s]), self.lora_B[s]) * self.scaling for s in self.slices}
        if len(updates) == 1 and next(iter(self.slices.values())) == (0, self.out_features):
            return y + next(iter(updates.values())).to(y.dtype)
        parts, at = [], 0  # the output rebuilt slice by slice: untouched rows as they are, adapted rows updated
        for s, (a, b) in sorted(self.slices.items(), key=lambda kv: kv[1]):
            if a > at:
                parts.append(y[..., at:a])
            parts.append(y[..., a:b] + updates[s].to(y.dtype))
            at = b
        if at < self.out_features:
            parts.append(y[..., at:])
        return torch.cat(parts, dim=-1)

    def merged(self) -> nn.Linear:
        """A plain nn.Linear whose weight is W + (alpha / r) B A per slice (a new tensor; W is not modified)."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                        device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            w = self.weight.detach().clone()
            for s, (a, b) in self.slices.items():
                w[a:b] += self.delta_weight(s).to(w.dtype)
            lin.weight = nn.Parameter(w, requires_grad=self.weight.requires_grad)
            if self.bias is not None:
                lin.bias = self.bias
        return lin

    def unloaded(self) -> nn.Linear:
        """The base nn.Linear: the same weight and bias Parameters, no update."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        lin.weight, lin.bias = self.weight, self.bias
        return lin

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lora r={self.rank} alpha={self.alpha:g} on {', '.join(self.slices)}"


def _targets_of(model: nn.Module, cfg: LoraConfig) -> dict[str, dict[str, tuple[int, int]]]:
    """{module path: {slice name: output rows}} of every targeted Linear of `model`'s encoder blocks."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    blocks = [name for name, m in model.named_modules() if isinstance(m, Block)]  # Axial-ViT: its row and col
    if not blocks:
        raise ValueError(f"LoRA adapts a ViT's encoder blocks; a {type(model).__name__} has none (a BiT ResNet is "
                         "fine-tuned in full)")
    for block in blocks:
        for t in cfg.targets:
            path, part = TARGETS[t]
            lin = model.get_submodule(f"{block}.{path}")
            if not isinstance(lin, nn.Linear) or isinstance(lin, LoraLinear):
                raise ValueError(f"{block}.{path} is a {type(lin).__name__}, not a plain Linear LoRA can adapt "
                                 "(LoRA is applied once)")
            n = lin.out_features if part is None else lin.out_features // 3
            rows = (0, n) if part is None else (part * n, (part + 1) * n)
            out.setdefault(f"{block}.{path}", {})[t] = rows
    return out


def apply_lora(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """Adapt `model`'s encoder in place (see the module docstring) and freeze all but the adapters and
    `cfg.train`; returns `model`, with `model.lora_config` and `model.lora_base_hash` (`base_fingerprint` of the
    base) set. The base weights stay the same Parameters (a trained bias or norm is trained in place)."""
    if getattr(model, "lora_config", None) is not None:
        raise ValueError("this model already carries LoRA adapters: merge_lora or unload_lora it first")
    targets = _targets_of(model, cfg)
    meta = any(p.is_meta for p in model.parameters())  # an architecture built without weights has no identity
    base_hash = None if meta else base_fingerprint(model)  # of the base, before anything trains
    for p in model.parameters():
        p.requires_grad_(False)
    for path, slices in targets.items():
        parent, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent), name, LoraLinear(model.get_submodule(path), slices, cfg.rank, cfg.alpha,
                                                              cfg.dropout))
    for name, p in model.named_parameters():
        head = name.split(".")[0] in HEAD_MODULES
        norm = isinstance(model.get_submodule(name.rpartition(".")[0]), nn.LayerNorm) if "." in name else False
        p.requires_grad_(".lora_A." in name or ".lora_B." in name or ("head" in cfg.train and head)
                         or ("norm" in cfg.train and norm) or ("bias" in cfg.train and name.endswith(".bias")))
    model.lora_config = cfg
    model.lora_base_hash = base_hash
    return model


#: nn.Module's forward hook tables, handed from a LoraLinear to the Linear that replaces it
FORWARD_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
                 "_forward_hooks_always_called")


def lora_modules(model: nn.Module) -> dict[str, LoraLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLinear)}


def _replace(model: nn.Module, how: str) -> nn.Module:
    found = lora_modules(model)
    if not found:
        raise ValueError("this model carries no LoRA adapters")
    for path, m in found.items():
        parent, _, name = path.rpartition(".")
        lin = m.merged() if how == "merge" else m.unloaded()
        for hooks in FORWARD_HOOKS:  # the same dicts: hooks on the adapted Linear keep running, their handles work
            setattr(lin, hooks, getattr(m, hooks))
        setattr(model.get_submodule(parent), name, lin)
    for p in model.parameters():  # a plain model again, trainable as a loaded one is
        p.requires_grad_(True)
    model.lora_config = model.lora_base_hash = None
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its Linear (W + (alpha / r) B A, new weight tensors) in place: a plain model, which
    every format, export and runtime takes. The logits equal the adapted model's up to fp32 rounding."""
    return _replace(model, "merge")


def unload_lora(model: nn.Module) -> nn.Module:
    """Drop the adapters in place: the base model again, with its original (shared) Parameters."""
    return _replace(model, "unload")


def lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What an adapter file holds: every trainable tensor (LoRA's A and B, and the head / norms / biases trained
    beside them), by vitkit key."""
    if getattr(model, "lora_config", None) is None:
        raise ValueError("this model carries no LoRA adapters")
    return {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}


FINGERPRINT_SKIP = re.compile(r"^(head|head_dist|pre_logits)\.|^pos_embed|\.lora_[AB]\.")


def base_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the base weights adapters are trained on: every tensor except the classifier (a fine-tune
    replaces it), the position embeddings (resampled to the fine-tuning resolution, §3.2) and the adapters
    themselves, by key, dtype, shape and bytes. The same weights read from any format give the same hash."""
    h = hashlib.sha256()
    for k, t in sorted(model.state_dict().items()):
        if FINGERPRINT_SKIP.search(k):
            continue
        t = t.detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
