"""DDP and FSDP on CPU: 2 gloo processes, each on half of the global batch, end with the same weights
as one process with the same global batch; the checkpoints they write (full, unsharded state) resume
in a 1-process run, and a 1-process checkpoint resumes under FSDP; the same across world sizes with tar shards
read by loader workers; with `train.world_invariant`, bitwise equal across world sizes."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import Preloaded, built_once, differing_keys, digits_model, digits_trainer, shared_root
from vitkit import distributed as dist
from vitkit.data.digits import load_digits_split
from vitkit.data.loader import StepLoader
from vitkit.data.shards import ShardDataset, pack
from vitkit.data.transforms import TrainTransform
from vitkit.train.config import TrainConfig, load_config
from vitkit.train.engine import Trainer
from vitkit.train.run import run_experiment

N = 6  # steps per phase
CFG = dict(optimizer="sgd", steps=2 * N, batch_size=32, grad_accum=2, lr=0.05, warmup_steps=2, log_every=3, seed=0,
           tensorboard=False)  # (no assertion reads TensorBoard files: metrics.jsonl holds the same records)
# FSDP: Polyak averaging on too, so the sharded EMA is checkpointed and restored as well
FSDP = dict(CFG, parallel="fsdp", ema_decay=0.9)


def _model():
    torch.manual_seed(0)
    return digits_model(width=32, depth=2, num_heads=2, mlp_dim=64)


def _trainer(out: Path, cfg: dict) -> Trainer:
    return digits_trainer(_model(), TrainConfig(**cfg), out)


@contextlib.contextmanager
def _group(rank: int, world: int, store: str):
    """One worker's process group; a worker that completes its work leaves without the interpreter's teardown.

    A worker once aborted in CI (SIGABRT, "terminate called without an active exception", from C++) with no
    Python traceback: faulthandler now prints where each thread was. Teardown after a finished, shut-down
    run is torch's and gloo's business, not what these tests check (they compare the weights the workers
    wrote), so a worker that got that far exits at once; a failure anywhere before still fails the test."""
    faulthandler.enable()
    torch.set_num_threads(1)
    # loader workers are forked, as under torchrun (whose ranks are started, not spawned): a spawned rank would
    # spawn them too, each importing torch again
    multiprocessing.set_start_method("fork", force=True)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _phases(out: Path, cfg: Any, resume_from: str, make: Any, *make_args: Any) -> None:
    """Train the trainer `make(out, cfg, *make_args)` builds to step N (train_state.pt at `out`, rank 0 only), then,
    given `resume_from`, finish that state's run in `out`/resumed (a 1-process checkpoint finished with this world
    size)."""
    make(out, cfg, *make_args).fit(stop_at=N)
    if resume_from:
        t = make(out / "resumed", cfg, *make_args)
        t.load_state(resume_from)
        t.fit()


def _run(out: Path, cfg: Any) -> None:
    run_experiment(cfg, out, progress=False, curves=False)  # (no assertion reads curves.png)


def _pair_worker(rank: int, world: int, store: str, jobs: list[tuple[Any, ...]]) -> None:
    with _group(rank, world, store):
        for job, *args in jobs:
            job(*args)


def _shards(root: Path) -> str:
    """The first 400 images of the digits' training split packed into 4 tar shards under `root` (the 12 steps of a
    global batch of 32 read 384)."""
    train, _ = load_digits_split()
    pack(train, root, "train", shard_size=100, indices=range(400))
    return str(root)


def _pair_jobs(root: Path) -> list[tuple[Any, ...]]:
    """What each of the pair's processes does, in order (`_build_pair`)."""
    one = {name: str(root / f"{name}-one" / "train_state.pt") for name in ("shards", "fsdp", "inv")}
    return [(_phases, root / "ddp", CFG, "", _trainer),
            (_phases, root / "shards", CFG, one["shards"], _shard_trainer, str(root / "s")),
            (_phases, root / "fsdp", FSDP, one["fsdp"], _trainer),
            (_run, root / "fsdp_run", FSDP_RUN),
            (_phases, root / "inv", INV, one["inv"], _inv_trainer)]


# one of the pair: `python -c PAIR_RANK RANK STORE ROOT`
PAIR_RANK = """
import sys
from pathlib import Path
from tests.test_distributed import _pair_jobs, _pair_worker
_pair_worker(int(sys.argv[1]), 2, sys.argv[2], _pair_jobs(Path(sys.argv[3])))
"""


def _build_pair(root: Path, preloaded: Preloaded) -> None:
    """The 2-process half of every test in this file, done by one pair of gloo processes (one pair instead of one
    per test), after the 1-process checkpoints at step N that it finishes."""
    shards = _shards(root / "s")
    assert torch.get_num_threads() == 1  # as in the workers (suite_fixtures.py): the world-invariant test compares bits
    for name, make, cfg, args in (("shards", _shard_trainer, CFG, (shards,)), ("fsdp", _trainer, FSDP, ()),
                                  ("inv", _inv_trainer, INV, ())):
        make(root / f"{name}-one", cfg, *args).fit(stop_at=N)  # (one thread, as in the workers: suite_fixtures.py)
    # the two ranks are forked from the suite's preloaded interpreter once it has imported this module,
    # torch._dynamo and torch.distributed.checkpoint.state_dict (FSDP's full checkpoints, in both ranks): no
    # interpreter start-up for either; a rank that fails stops the other, as torch.multiprocessing's join does
    ranks = [preloaded.start(PAIR_RANK, str(rank), str(root / "store"), str(root),
                             preload=["torch._dynamo", "torch.distributed.checkpoint.state_dict", __name__])
             for rank in range(2)]
    deadline = time.time() + 600
    while any(r.poll() is None for r in ranks) and not any(r.poll() for r in ranks) and time.time() < deadline:
        time.sleep(0.05)
    for r in ranks:
        r.kill()  # (a rank still running: the other failed, or the deadline passed)
    for rank, r in enumerate(ranks):
        err = r.communicate()[1]
        assert r.returncode == 0, f"rank {rank} exited {r.returncode}: {err[-3000:]}"


@pytest.fixture(scope="module")
def pair(tmp_path_factory, preloaded: Preloaded) -> Path:  # noqa: ANN001
    """The folder of the pair's runs (read only: a test that resumes one writes into its own tmp_path)."""
    return built_once(shared_root(tmp_path_factory), "distributed_pair", lambda root: _build_pair(root, preloaded))


def _one_at_n(run: Path, single: Trainer) -> None:
    """The 1-process state at step N that the pair finished is this test's own 1-process run at step N."""
    assert differing_keys(torch.load(run / "train_state.pt", weights_only=True)["model"], single.model.state_dict()) == []


def _delta(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def test_two_gloo_processes_match_one_process(tmp_path: Path, pair: Path) -> None:
    ddp_state = torch.load(pair / "ddp" / "train_state.pt", weights_only=True)
    single = _trainer(tmp_path / "one", CFG)
    single.fit(stop_at=N)
    assert ddp_state["step"] == N
    delta = _delta(ddp_state["model"], single.model.state_dict())
    assert delta < 1e-5, f"2-process DDP differs from 1 process by {delta}"
    # the logged loss and accuracy are the global batch's (reduced over ranks), not rank 0's half
    logs = [[r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
            for d in (pair / "ddp", tmp_path / "one")]
    assert [r["step"] for r in logs[0]] == [r["step"] for r in logs[1]] == [3, 6]
    d_loss = max(abs(a["loss"] - b["loss"]) for a, b in zip(*logs))
    d_acc = max(abs(a["train_acc"] - b["train_acc"]) for a, b in zip(*logs))
    assert d_loss < 1e-5 and d_acc < 1e-6, (d_loss, d_acc)
    # resume the 2-process checkpoint with a different world size (1) and finish the run
    resumed = _trainer(tmp_path / "ddp", CFG)
    resumed.load_state(pair / "ddp" / "train_state.pt")
    resumed.fit()
    single.fit()
    delta2 = _delta(resumed.model.state_dict(), single.model.state_dict())
    assert delta2 < 1e-5
    print(f"DDP(2) vs 1 process: max |dw| {delta:.2e} after {N} steps, {delta2:.2e} after resuming with world 1")


def _shard_trainer(out: Path, cfg: dict, shards: str) -> Trainer:
    """The digits model on tar shards, this rank's part of each global batch, one loader worker per rank."""
    model = _model()
    tf = TrainTransform(model.preprocess, "affine", flip=False)
    loader = StepLoader(ShardDataset(shards, channels=1), cfg["batch_size"], tf, cfg["seed"], rank=dist.rank(),
                        world=dist.world_size(), num_workers=1)
    return Trainer(model, TrainConfig(**cfg), loader, out, progress=False)


@pytest.mark.slow
def test_shards_resume_across_world_sizes(tmp_path: Path, pair: Path) -> None:
    """Tar shards read by 2 ranks x 1 loader worker: the 2-process run matches 1 process, its checkpoint finishes in
    1 process, and a 1-process checkpoint finishes in 2 processes, each as the uninterrupted 1-process run."""
    shards = str(pair / "s")
    single = _shard_trainer(tmp_path / "one", CFG, shards)
    single.fit(stop_at=N)
    _one_at_n(pair / "shards-one", single)
    # the pair: 2 ranks to step N (shards/), then the 1-process checkpoint finished by them (shards/resumed/)
    two = torch.load(pair / "shards" / "train_state.pt", weights_only=True)
    into_two = pair / "shards" / "resumed"
    d_two = _delta(two["model"], single.model.state_dict())
    resumed = _shard_trainer(tmp_path / "two", CFG, shards)
    resumed.load_state(pair / "shards" / "train_state.pt")
    resumed.fit()
    single.fit()
    final = single.model.state_dict()
    d_one = _delta(resumed.model.state_dict(), final)
    d_into = _delta(torch.load(into_two / "train_state.pt", weights_only=True)["model"], final)
    assert max(d_two, d_one, d_into) < 1e-5, (d_two, d_one, d_into)
    print(f"shards, 2 ranks vs 1: max |dw| {d_two:.2e} at step {N}; 2 -> 1 process {d_one:.2e}, "
          f"1 -> 2 processes {d_into:.2e} at step {2 * N}")


def test_fsdp_matches_one_process_and_resumes_across_world_sizes(tmp_path: Path, pair: Path) -> None:
    single = _trainer(tmp_path / "one", FSDP)  # one process: `parallel` has nothing to shard over
    single.fit(stop_at=N)  # as the pair's fsdp-one/train_state.pt, which the FSDP workers resumed
    _one_at_n(pair / "fsdp-one", single)
    single_n = {k: v.clone() for k, v in single.model.state_dict().items()}
    single_ema_n = {k: v.clone() for k, v in single.ema.shadow.items()}
    fsdp_state = torch.load(pair / "fsdp" / "train_state.pt", weights_only=True)
    assert fsdp_state["step"] == N
    # the checkpoint holds full tensors with the plain layout: model, optimizer (SGD momentum), EMA
    assert fsdp_state["model"].keys() == single_n.keys()
    d_w = _delta(fsdp_state["model"], single_n)
    d_ema = _delta(fsdp_state["ema"], single_ema_n)
    opt_single = single.opt.state_dict()
    assert fsdp_state["optimizer"]["param_groups"] == opt_single["param_groups"]
    d_mom = max((fsdp_state["optimizer"]["state"][i]["momentum_buffer"] - s["momentum_buffer"]).abs().max().item()
                for i, s in opt_single["state"].items())
    assert max(d_w, d_ema, d_mom) < 1e-5, f"2-process FSDP differs from 1 process: {d_w} {d_ema} {d_mom}"
    # FSDP(2) checkpoint -> 1 plain process, and 1-process checkpoint -> FSDP(2): both end as the 1-process run
    resumed = _trainer(tmp_path / "fsdp", FSDP)
    resumed.load_state(pair / "fsdp" / "train_state.pt")
    resumed.fit()
    single.fit()
    final = torch.load(tmp_path / "one" / "train_state.pt", weights_only=True)
    d_resumed, d_into = (
        max(_delta(torch.load(run / "train_state.pt", weights_only=True)[k], final[k]) for k in ("model", "ema"))
        for run in (tmp_path / "fsdp", pair / "fsdp" / "resumed")
    )
    assert d_resumed < 1e-5 and d_into < 1e-5, (d_resumed, d_into)
    print(f"FSDP(2) vs 1 process: max |dw| {d_w:.2e}, |d ema| {d_ema:.2e}, |d momentum| {d_mom:.2e} after {N} steps; "
          f"{d_resumed:.2e} resumed in 1 process, {d_into:.2e} 1-process checkpoint resumed under FSDP(2)")


def test_fsdp_run_evaluates_and_saves_like_one_process(tmp_path: Path, pair: Path) -> None:
    """A whole recipe run under FSDP(2): evaluation during training on the sharded EMA weights, checkpoints,
    and the final unsharded model evaluated and saved by rank 0, as a 1-process run of the same recipe."""
    fsdp = pair / "fsdp_run"
    one = tmp_path / "one"
    run_experiment(FSDP_RUN, one, progress=False, curves=False)  # as the pair's (no assertion reads curves.png)
    res = [json.loads((d / "result.json").read_text()) for d in (fsdp, one)]
    d_eval = max(abs(res[0][s][k] - res[1][s][k]) for s in ("dev", "test") for k in ("top1", "loss"))
    w = [load_file(d / "model" / "model.safetensors") for d in (fsdp, one)]
    d_w = _delta(*w)
    logged = [[r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "eval_top1" in r]
              for d in (fsdp, one)]
    assert [r["step"] for r in logged[0]] == [r["step"] for r in logged[1]] and len(logged[0]) >= 2
    d_eval = max([d_eval] + [abs(a["eval_loss"] - b["eval_loss"]) for a, b in zip(*logged)])
    assert d_w < 1e-5 and d_eval < 1e-5, (d_w, d_eval)
    print(f"FSDP(2) recipe run vs 1 process: saved weights max |dw| {d_w:.2e}, eval |d| {d_eval:.2e}")


# a whole recipe run under FSDP
FSDP_RUN = load_config("digits_pretrain", [
    "model.width=16", "model.depth=2", "model.num_heads=2", "model.mlp_dim=32", "model.grad_checkpointing=true",
    "schedule.steps=4", "schedule.warmup_steps=1", "train.batch_size=32", "train.eval_every=2",
    "train.ckpt_every=2", "train.ema_decay=0.9", "train.parallel=fsdp", "train.tensorboard=false",
    "data.num_workers=0",
])
# world-invariant reduction: 4 micro-batches of 8, with dropout and Mixup/CutMix drawn per micro-batch
INV = dict(CFG, grad_accum=4, world_invariant=True, mixup=0.2, cutmix=1.0)


def _inv_trainer(out: Path, cfg: dict) -> Trainer:
    torch.manual_seed(0)
    return digits_trainer(digits_model(width=32, depth=2, num_heads=2, mlp_dim=64, dropout=0.1), TrainConfig(**cfg),
                          out)


@pytest.mark.slow
def test_world_invariant_runs_are_bitwise_equal_across_world_sizes(tmp_path: Path, pair: Path) -> None:
    """With train.world_invariant, 2 processes and 1 process (one thread each) end with the same bits, and a
    checkpoint resumed with the other world size finishes with the bits of the uninterrupted 1-process run (the
    default DDP reduction agrees only to rounding: 1.2e-7 in the test above)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the workers: a matmul's summation order may depend on the thread count
    try:
        single = _inv_trainer(tmp_path / "one", INV)
        single.fit(stop_at=N)
        _one_at_n(pair / "inv-one", single)  # the state the pair finished
        # the pair: 2 ranks to step N (inv/), then the 1-process checkpoint finished by them (inv/resumed/)
        two = torch.load(pair / "inv" / "train_state.pt", weights_only=True)
        into_two = pair / "inv" / "resumed"
        assert two["step"] == N
        assert differing_keys(two["model"], single.model.state_dict()) == [], "2 processes differ from 1 at step N"
        resumed = _inv_trainer(tmp_path / "two", INV)  # the 2-process checkpoint finished by 1 process
        resumed.load_state(pair / "inv" / "train_state.pt")
        resumed.fit()
        single.fit()
    finally:
        torch.set_num_threads(threads)
    final = single.model.state_dict()
    assert differing_keys(resumed.model.state_dict(), final) == []
    finished_by_two = torch.load(into_two / "train_state.pt", weights_only=True)
    assert finished_by_two["step"] == 2 * N and differing_keys(finished_by_two["model"], final) == []
