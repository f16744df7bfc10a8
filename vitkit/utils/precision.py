"""One precision vocabulary for every command (predict, eval, export's bench, bench, train): what each name of
`vitkit.utils.options.PRECISIONS` means for a torch model, and how `auto` is resolved.

| name            | weights | matmuls                    | where it runs                                        |
|-----------------|---------|----------------------------|------------------------------------------------------|
| `fp32`          | fp32    | fp32                       | everywhere                                           |
| `bf16`          | bf16    | bf16                       | inference: torch (weights cast), OpenVINO            |
| `bf16-autocast` | fp32    | bf16 under `torch.autocast`| torch: training (fp32 master weights), eval, bench   |
|                 |         | (LayerNorm, softmax, loss  |                                                      |
|                 |         | stay fp32)                 |                                                      |
| `int8`          | int8    | int8 (dynamic, or static   | inference on onnxruntime; OpenVINO (NNCF, calibrated)|
|                 |         | calibrated on images)      |                                                      |

`auto` resolves to bf16 only where the hardware multiplies bf16 natively (a CUDA GPU that supports it; a CPU with
AVX512_BF16 or AMX, read from its flags), else fp32, and says what it costs (`options.PRECISION_COST`): elsewhere oneDNN emulates bf16 and it runs slower
than fp32 (docs/serving.md). int8 is never picked for you (it changes the numbers). `resolve` returns the choice
with its reason, for the caller to print.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

from vitkit.utils.hardware import cpu_has_native_bf16
from vitkit.utils.options import INFERENCE_PRECISION, PRECISION_CHOICES, PRECISION_COST, PRECISIONS

CHOICES = PRECISION_CHOICES  # the names and their meaning are vitkit.utils.options'


@dataclass(frozen=True)
class Precision:
    """What a precision name means for a torch model: its weights' dtype, its inputs' dtype, autocast or not."""

    name: str
    weights: torch.dtype  # int8: the fp32 model that the runtime quantises
    autocast: bool = False

    @property
    def input_dtype(self) -> torch.dtype:
        return self.weights

    def context(self, device: str | torch.device = "cpu") -> contextlib.AbstractContextManager:
        """`torch.autocast` to bf16 on `device`'s type for bf16-autocast; a no-op context otherwise."""
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)

    def cast(self, model: nn.Module) -> nn.Module:
        """`model` with this precision's weights: a bf16 copy for bf16 (the caller's model is left as it was)."""
        return copy.deepcopy(model).to(self.weights) if self.weights != torch.float32 else model


_TABLE = {"fp32": Precision("fp32", torch.float32), "bf16": Precision("bf16", torch.bfloat16),
          "bf16-autocast": Precision("bf16-autocast", torch.float32, autocast=True),
          "int8": Precision("int8", torch.float32)}


def get(name: str | Precision, allowed: tuple[str, ...] = PRECISIONS, flag: str = "precision") -> Precision:
    """The `Precision` called `name` (not "auto": see `resolve`), if `allowed` here; else a ValueError. A
    `Precision` already looked up is returned as it is (a choice is resolved once)."""
    if isinstance(name, Precision) and name.name in allowed:
        return name
    if name not in allowed:
        raise ValueError(f"{flag} must be one of {', '.join(allowed)}; got {name!r}")
    return _TABLE[name]


def resolve(name: str | None, device: str | torch.device = "cpu", flags: set[str] | None = None,
            native: str = "bf16", allowed: tuple[str, ...] = PRECISIONS, flag: str = "--precision") -> tuple[str, str]:
    """(precision to run, why) for a name of `CHOICES`. `auto` is `native` (bf16 for inference, bf16-autocast for
    training) where the hardware multiplies bf16 natively, else fp32 (see the module docstring). None: the
    default of the commands that answer with a model, fp32 (the checkpoint's own answer)."""
    if name is None:
        return INFERENCE_PRECISION, ("the default: the checkpoint's own answer (--precision auto: bf16 where the "
                                     "hardware multiplies it natively)")
    if name != "auto":
        if name not in allowed:
            raise ValueError(f"{flag} must be one of {', '.join(('auto', *allowed))}; got {name!r}")
        return name, "asked for"
    dev = torch.device(device)
    cost = f"; cost: {PRECISION_COST[native]}" if native in PRECISION_COST else ""
    if dev.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return (native, f"auto: the GPU supports bf16{cost}") if ok else ("fp32", "auto: the GPU has no bf16")
    if cpu_has_native_bf16(flags):
        return native, f"auto: the CPU multiplies bf16 natively (AVX512_BF16 / AMX){cost}"
    return "fp32", "auto: the CPU has no native bf16 (no AVX512_BF16 / AMX): bf16 would be emulated and slower"


def autocast(name: str, device: str | torch.device = "cpu") -> contextlib.AbstractContextManager:
    """The autocast context of precision `name` on `device` (a no-op except for bf16-autocast)."""
    return get(name).context(device)


def input_dtype(name: str) -> torch.dtype:
    """The dtype a torch model takes under precision `name`: bf16 for bf16 weights, else fp32."""
    return get(name).input_dtype
