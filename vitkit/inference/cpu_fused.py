"""fp32 inference on the CPU with oneDNN's fused matmuls: the torch runtime's default for fp32 (`inference_model`).

Each encoder block (eq. 2-3) runs its four Dense layers as oneDNN matmuls on prepacked weights with their epilogues
fused: the bias; the GELU after fc1 (the model's own form, erf or tanh); the residual add after proj and fc2, with
LayerScale folded into those two layers' weights. Eager torch runs each as an MKL matmul followed by separate
passes over the activations (the bias copied in, GELU, LayerScale, the add). The arithmetic is the same up to fp32
rounding (tested against an fp64 forward); the speed is in BENCHMARKS.md.

A transform that keeps semantics or stays away: a block is replaced only where every module in it is exactly the
type this file computes (`Block`, `Attention`, `Mlp`, `nn.Linear`, `nn.LayerNorm`, `nn.GELU`, LayerScale or none,
no relative positions) and has no hooks; anything else -- LoRA's `LoraLinear`, a user's subclass, QuickGELU, a
forward hook -- runs as written. The attention mask of packed images (models/packing.py) is honoured: it is passed
to the same scaled-dot-product attention. A call runs the block itself where its state asks for more than eq. 2-3 on `x`
(token merging, recorded attention), with gradients, autocast, another dtype or device, or a hook (also a global
module hook) registered since.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module

from vitkit.models.layers import Attention, Block, DropPath, EncodeState, LayerScale, Mlp


def available() -> bool:
    """Whether this torch has oneDNN's fused linear (`torch.ops.mkldnn._linear_pointwise`)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class FusedBlock(nn.Module):
    """`block` (an encoder Block, kept as a submodule: its parameters, and the fallback path) run with fused
    oneDNN matmuls. Weights are packed at the first call, and again when a parameter changed in place since."""

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.block = block
        self.gelu = block.mlp.act.approximate  # "none" (erf) / "tanh"
        self._packed: dict[str, Any] | None = None
        self._versions: tuple[int, ...] = ()

    def __getstate__(self) -> dict[str, Any]:  # packed oneDNN tensors cannot be copied or pickled: repacked
        return {**self.__dict__, "_packed": None, "_versions": ()}

    def _pack(self) -> dict[str, Any]:
        versions = tuple(p._version for p in self.block.parameters())
        if self._packed is None or versions != self._versions:
            b = self.block

            def folded(lin: nn.Linear, ls: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
                w, bias = lin.weight.detach(), None if lin.bias is None else lin.bias.detach()
                if isinstance(ls, LayerScale):  # gamma * (W x + b) = (gamma W) x + gamma b
                    g = ls.gamma.detach()
                    w, bias = w * g[:, None], None if bias is None else bias * g
                return w, bias

            def pack(wb: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
                return torch.ops.mkldnn._reorder_linear_weight(wb[0].contiguous(), None), wb[1]

            self._packed = {"qkv": pack(folded(b.attn.qkv, nn.Identity())), "proj": pack(folded(b.attn.proj, b.ls1)),
                            "fc1": pack(folded(b.mlp.fc1, nn.Identity())), "fc2": pack(folded(b.mlp.fc2, b.ls2))}
            self._versions = versions
        return self._packed

    def forward(self, x: torch.Tensor, state: EncodeState | None = None) -> torch.Tensor:
        b = self.block
        if (torch.is_grad_enabled() or self.training or x.dtype != torch.float32 or x.device.type != "cpu"
                or (state is not None and not state.plain) or torch.is_autocast_enabled("cpu") or _hooked(b)):
            return b(x, state)
        p, lin = self._pack(), torch.ops.mkldnn._linear_pointwise
        B, T, C = x.shape
        a = b.attn
        qkv = lin(b.norm1(x), *p["qkv"], "none", [], "")
        q, k, v = a.split_heads(qkv)
        mask = None if state is None else state.mask  # packed images (models/packing.py): kept apart here too
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=a.sdpa_scale).transpose(1, 2).reshape(B, T, C)
        x = lin.binary(out, x, *p["proj"], "add")  # eq. 2: z' = MSA(LN(z)) + z
        h = lin(b.norm2(x), *p["fc1"], "gelu", [], self.gelu)
        return lin.binary(h, x, *p["fc2"], "add")  # eq. 3: z = MLP(LN(z')) + z'


#: each part of a block the fused path computes, and the exact types it computes it for
_EXACT: dict[str, tuple[type, ...]] = {
    "": (Block,), "attn": (Attention,), "mlp": (Mlp,), "norm1": (nn.LayerNorm,), "norm2": (nn.LayerNorm,),
    "attn.qkv": (nn.Linear,), "attn.proj": (nn.Linear,), "mlp.fc1": (nn.Linear,), "mlp.fc2": (nn.Linear,),
    "mlp.act": (nn.GELU,), "mlp.drop": (nn.Dropout,), "drop": (nn.Dropout,), "drop_path": (DropPath,),
    "ls1": (LayerScale, nn.Identity), "ls2": (LayerScale, nn.Identity)}


def _hooked(block: nn.Module) -> bool:
    """Whether a hook would see the block's work: one on any of its modules, or a global module hook."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in block.modules())


def _fusable(block: nn.Module) -> bool:
    """Whether `block` is exactly what FusedBlock computes: every part of the exact type, nothing more, no hooks."""
    parts = dict(block.named_modules())
    if set(parts) != set(_EXACT) or any(type(parts[n]) not in types for n, types in _EXACT.items()):
        return False
    return block.attn.rel is None and not _hooked(block)


def fused_for_cpu(model: nn.Module) -> nn.Module:
    """`model` with every plain encoder Block run by `FusedBlock`: a copy sharing the caller's parameters (the
    caller's model is left as it was); `model` itself where oneDNN's fused linear is absent or no block fits."""
    if not available() or not any(_fusable(m) for m in model.modules()):
        return model
    memo: dict[int, Any] = {id(t): t for t in [*model.parameters(), *model.buffers()]}  # shared, not copied
    out = copy.deepcopy(model, memo)
    for parent in list(out.modules()):
        for name, child in list(parent.named_children()):
            if _fusable(child):
                setattr(parent, name, FusedBlock(child).train(child.training))
    return out
