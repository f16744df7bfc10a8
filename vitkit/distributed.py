"""Multi-process / multi-machine training through `torch.distributed`, launched by `torchrun`.

`torchrun --nnodes N --nproc-per-node P --rdzv-endpoint HOST:PORT -m vitkit.cli train ...` sets
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; `init_from_env` joins the group (gloo on
CPU, NCCL on GPU). Each rank trains on its shard of the global batch (see vitkit.data.loader);
gradients are averaged by DDP, or, with `parallel = "fsdp"` (the large variants), the weights,
gradients and optimizer state are sharded over the ranks by FSDP2 (`fully_shard` per encoder block
and once more at the root). Rank 0 writes logs and checkpoints; checkpoints always hold the full
(unsharded) weights and optimizer state, so any world size, with or without FSDP, resumes them.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
from torch import nn

PARALLEL = ("ddp", "fsdp")


def check_device(device: str) -> str:
    """`device` if this machine has it; else a ValueError that says what is missing (before any work)."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r} is not a device name (cpu, cuda, cuda:1, ...)") from e
    if d.type == "cuda":
        if not torch.cuda.is_available():
            build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
            raise ValueError(f"device {device!r} was asked for, but no CUDA GPU is usable here (torch "
                             f"{torch.__version__} is {build}); use device=cpu")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif d.type not in ("cpu", "mps", "xpu"):
        raise ValueError(f"device {device!r} is not supported; use cpu or cuda")
    return device


def is_initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    return torch.distributed.get_rank() if is_initialized() else 0


def world_size() -> int:
    return torch.distributed.get_world_size() if is_initialized() else 1


def barrier() -> None:
    if is_initialized() and world_size() > 1:
        torch.distributed.barrier()


def sum_across(values: list[float], device: str = "cpu") -> list[float]:
    """Element-wise sums of `values` over all ranks (the values themselves in a single process)."""
    if not (is_initialized() and world_size() > 1):
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t.tolist()


def init_from_env(device: str = "cpu") -> str:
    """Join the process group described by torchrun's environment; returns the device for this rank.

    Without WORLD_SIZE > 1 in the environment this does nothing (single process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or is_initialized():
        return device
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return device


def shutdown() -> None:
    """Leave the process group, once this rank's training objects are gone.

    A DDP reducer or FSDP state left in a reference cycle keeps the group's gloo work (and its tensors)
    alive into interpreter teardown, where releasing them from a gloo thread can abort the process after
    the run has finished; collecting first frees them while the interpreter is whole."""
    if is_initialized():
        gc.collect()
        torch.distributed.destroy_process_group()


def wrap_model(model: nn.Module, device: str, parallel: str = "ddp") -> nn.Module:
    """The module that runs the forward pass of `model` on this rank.

    `ddp`: a DDP wrapper (rank 0's weights are broadcast, gradients all-reduced and averaged).
    `fsdp`: `model` itself, sharded in place by FSDP2 (its parameters become DTensor shards), so
    build the optimizer afterwards and read or write its state with `full_state` / `load_full_state`."""
    if parallel == "fsdp":
        return shard_model(model, device)
    if parallel != "ddp":
        raise ValueError(f"unknown parallel mode {parallel!r}; choose one of {', '.join(PARALLEL)}")
    ids = [torch.device(device).index] if device.startswith("cuda") else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def shard_model(model: nn.Module, device: str) -> nn.Module:
    """FSDP2: one `fully_shard` unit per ViT encoder block (gathered only while it runs), then the root
    (patch embedding, tokens, final norm, head). Every rank must start from the same weights (same seed)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from vitkit.models.vit import Block

    mesh = init_device_mesh(torch.device(device).type, (world_size(),))
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    for blk in blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _full_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)  # rank 0 gets full CPU tensors, others {}


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full weights of a sharded `model` on rank 0 (collective; other ranks get {})."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options())


def full_state(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The full (unsharded) model and optimizer state of a sharded `model`, on rank 0 (collective).

    The optimizer state has torch's usual layout (parameters numbered in `opt.param_groups` order), as
    `opt.state_dict()` of an unsharded model, so either kind of run loads it."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    msd = full_model_state(model)
    osd = get_optimizer_state_dict(model, opt, options=_full_options())
    if rank() != 0:
        return {}, {}
    index = {name: i for i, name in enumerate(_param_names(model, opt))}
    return msd, {
        "state": {index[n]: v for n, v in osd["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in osd["param_groups"]],
    }


def load_full_state(model: nn.Module, opt: torch.optim.Optimizer, msd: dict, osd: dict) -> None:
    """Shard a full model + optimizer state (as `full_state` writes it) into a sharded `model` (every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    names = _param_names(model, opt)
    osd = {
        "state": {names[i]: v for i, v in osd["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in osd["param_groups"]],
    }
    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, msd, options=opts)
    set_optimizer_state_dict(model, opt, osd, options=opts)


def _param_names(model: nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the order torch numbers an optimizer's parameters."""
    names = {p: n for n, p in model.named_parameters()}
    return [names[p] for g in opt.param_groups for p in g["params"]]


def full_tensors(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`d` with DTensor shards gathered into full tensors (collective under FSDP)."""
    from torch.distributed.tensor import DTensor

    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in d.items()}


def shard_like(d: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Full tensors `d` sharded as the DTensors of `ref` (e.g. a sharded model's state_dict)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    return {
        k: distribute_tensor(v.to(ref[k].device), ref[k].device_mesh, ref[k].placements)
        if isinstance(ref.get(k), DTensor) else v
        for k, v in d.items()
    }
