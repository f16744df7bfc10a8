"""The units of work of a reproduction (pre-training and fine-tuning runs), cached and resumable.

Each unit is one `run_experiment` run in its own folder under the output folder; its summary is written
to `unit.json` when it is complete. Running a reproduction again skips complete units, resumes a
killed one exactly from its last checkpoint (train_state.pt) and starts the others, so a killed
`vitkit reproduce` continues where it stopped. Units are shared between experiments by name: Fig. 5
reuses Fig. 4's full-data runs, the §3.2 and §4.6 experiments reuse its ViT.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from vitkit.formats import load_pretrained
from vitkit.models.flops import model_flops
from vitkit.reproduce.plan import Pretrain, Scale, finetune_config, model_section, pretrain_config
from vitkit.reproduce.stats import bracketed, extension, pick_rate
from vitkit.reproduce.transfer import FewShotEvaluator
from vitkit.train.config import TrainConfig, config_from_dict
from vitkit.train.engine import Trainer
from vitkit.train.metrics import read_metrics
from vitkit.train.run import run_experiment
from vitkit.utils import check_int
from vitkit.utils.atomic import atomic_write_text

UNIT_FILE = "unit.json"
STATE_FILE = "reproduce.json"
SEED_KEYS = ("pretrain_seeds", "posemb_seeds")  # Scale fields a folder may grow along
# Scale fields that choose rates, never a unit's meaning: every pre-training unit off the scale's own rate is named by
# its rate, and a fine-tuning unit's sweep is checked (and extended) each time it is read, so a folder written
# before tuning keeps every unit it holds
TUNING_KEYS = ("tune_lrs", "finetune_extend")
# Scale fields that change how often a run writes its training state, never its numbers (train.ckpt_every may change
# when a run resumes): a folder written with other checkpoints keeps every unit it holds
CHECKPOINT_KEYS = ("pretrain_checkpoints",)


@dataclass(frozen=True)
class Finetune:
    """Fine-tuning on the digits from a pre-training run (or from scratch: `source` None, `scratch` a family-size)."""

    source: Pretrain | None
    img_size: int = 16
    seed: int = 0
    scratch: tuple[str, str] = ("ViT", "B")
    steps: int = 0  # 0: the scale's fine-tuning steps (more for a from-scratch run given a pre-training's budget)

    def name(self, scale: Scale) -> str:
        src = self.source.name(scale) if self.source else f"scratch-{self.scratch[0].lower()}-{self.scratch[1]}"
        return f"{src}__digits{self.img_size}px_seed{self.seed}" + (f"_steps{self.steps}" if self.steps else "")


Unit = Pretrain | Finetune


def unit_steps(unit: Unit, scale: Scale) -> int:
    """A unit's training steps as the progress bar plans them: a fine-tune's grid rates (an extension past a winning
    edge adds its steps to the bar when it runs)."""
    if isinstance(unit, Pretrain):
        return unit.steps or scale.steps
    return (unit.steps or scale.finetune_steps) * len(scale.finetune_lrs)


class Workbench:
    """Runs units in `out` at one scale on one device, with one progress bar over all planned training steps;
    `jobs` > 1 pre-trains that many runs at once in worker processes (`pretrain_all`)."""

    def __init__(self, out: str | Path, scale: Scale, progress: bool = True, device: str = "cpu",
                 jobs: int = 1) -> None:
        self.out, self.scale, self.progress, self.device = Path(out), scale, progress, device
        self.jobs = check_int("jobs", jobs)
        # every run of this workbench trains with the same thread count, in a worker or in this process: a run's
        # floating-point sums (and so its numbers) depend on it, and a sweep's lone extension run trains here
        self.threads = max(1, torch.get_num_threads() // self.jobs)
        self._check_folder()
        self._evaluator: FewShotEvaluator | None = None
        self.sweeps: dict[Pretrain, list[dict[str, float]]] = {}  # each model's rate sweep (tuning.py), once
        self._counted: set[Path] = set()  # run folders the progress bar counts
        self.bar: tqdm | None = None

    def _check_folder(self) -> None:
        """One folder holds one scale on one kind of device: a smoke run's units must never stand in for the full
        run's, nor CPU runs for GPU runs (the same seed gives other numbers there)."""
        path = self.out / STATE_FILE
        doc = {"scale": self.scale.to_dict(), "device": _device_kind(self.device)}
        if path.is_file():
            try:
                saved = json.loads(path.read_text())
            except ValueError as e:
                raise ValueError(f"{path}: not readable JSON ({e}); choose another --out") from e
            # a key a later vitkit added to Scale reads as its default in a folder written before it
            scale = json.loads(json.dumps(  # as JSON writes it: a default tuple reads as the list a folder keeps
                {**{f.name: f.default for f in fields(Scale) if f.default is not MISSING}, **saved.get("scale", {})}))
            want = json.loads(json.dumps(doc["scale"]))
            # more seeds or rates only add units, other checkpoint counts change no number: the folder's units hold
            for k in SEED_KEYS + TUNING_KEYS + CHECKPOINT_KEYS:
                scale.pop(k, None)
                want.pop(k, None)
            if scale != want:
                raise ValueError(f"{self.out} holds a reproduction at scale {saved.get('scale', {}).get('name')!r} "
                                 f"with other settings; choose another --out (this run is {self.scale.name!r})")
            if saved.get("device", "cpu") != doc["device"]:
                raise ValueError(f"{self.out} holds a reproduction run on {saved.get('device', 'cpu')}; this run is "
                                 f"on {doc['device']}: choose another --out")
            return
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, indent=2) + "\n")

    @property
    def evaluator(self) -> FewShotEvaluator:
        if self._evaluator is None:
            self._evaluator = FewShotEvaluator(self.scale.shots, self.scale.fewshot_seeds,
                                               limit=self.scale.transfer_limit)
        return self._evaluator

    def folder(self, unit: Unit) -> Path:
        kind = "pretrain" if isinstance(unit, Pretrain) else "finetune"
        return self.out / kind / unit.name(self.scale)

    def done(self, unit: Unit) -> bool:
        return (self.folder(unit) / UNIT_FILE).is_file()

    def unique(self, units: list[Unit]) -> list[Unit]:
        """`units` without repeats, by run folder: two experiments may name one run differently (`images=0` and
        `images=glyph_images`, `steps=0` and the scale's steps), and it must be trained, and counted, once."""
        first: dict[Path, Unit] = {}
        for u in units:
            first.setdefault(self.folder(u), u)
        return list(first.values())

    def start(self, units: list[Unit], desc: str) -> None:
        """Open the progress bar over the training steps of `units` (complete ones counted as done)."""
        self._counted = set()
        self.bar = tqdm(total=0, desc=desc, unit="step", disable=not self.progress, dynamic_ncols=True)
        self.count(units)

    def count(self, units: list[Unit], planned: bool = False) -> None:
        """Add the steps of `units` the bar does not count yet (complete ones as done): units planned once their
        learning rate is known (tuning.py), a sweep's extensions. `planned`: their steps are in the bar's total
        already (the crossover sizes its grid before the rates are picked); only the complete ones move it."""
        if self.bar is None:
            return
        new = [u for u in self.unique(units) if self.folder(u) not in self._counted]
        self._counted.update(self.folder(u) for u in new)
        if not planned:
            self.bar.total += sum(unit_steps(u, self.scale) for u in new)
        done = sum(unit_steps(u, self.scale) for u in new if self.done(u))
        if done:
            self.bar.update(done)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _train(self, unit: Unit, cfg: dict[str, Any], evaluators: dict[str, Any] | None,
               out: Path | None = None) -> tuple[Path, bool]:
        """Run (resume, or read back) one training run in `out` (default: the unit's folder)."""
        out = out or self.folder(unit)
        if (out / "result.json").is_file():
            return out, False
        resume = (out / Trainer.STATE_NAME).is_file()
        if self.bar is not None:
            self.bar.set_postfix_str(unit.name(self.scale)[:60])
        with _torch_threads(self.threads):
            run_experiment(config_from_dict(cfg, unit.name(self.scale)), out, resume=resume, overwrite=not resume,
                           progress=False, evaluators=evaluators, curves=False)
        return out, True

    def _finish(self, unit: Unit, summary: dict[str, Any], steps: int) -> dict[str, Any]:
        """Write the unit's summary; `steps`: training steps it ran now (the progress bar moves by them)."""
        atomic_write_text(self.folder(unit) / UNIT_FILE, json.dumps(summary, indent=2) + "\n")
        if self.bar is not None and steps:
            self.bar.update(steps)
        return summary

    def pretrain(self, run: Pretrain) -> dict[str, Any]:
        """Train (or resume, or read back) one pre-training run; returns its summary: the few-shot curve,
        the early-stopping pick (best 5-shot digits dev accuracy), compute and the glyph test accuracy."""
        path = self.folder(run) / UNIT_FILE
        if path.is_file():
            return json.loads(path.read_text())
        cfg = pretrain_config(run, self.scale, self.device)
        out, trained = self._train(run, cfg, {"fewshot": self.evaluator})
        result = json.loads((out / "result.json").read_text())
        curve = [{k.removeprefix("eval_fewshot_"): v for k, v in r.items() if k == "step" or k.startswith("eval_fewshot_")}
                 for r in read_metrics(out / "metrics.jsonl") if any(k.startswith("eval_fewshot_") for k in r)]
        key = f"digits_dev_{self.scale.select_shots}shot"
        best = max(curve, key=lambda r: (r[key], r["step"])) if curve else {}
        model = load_pretrained(out / "model")
        flops = _forward_flops(model)
        tcfg = TrainConfig.from_dict(json.loads((out / "train_config.json").read_text()))
        summary = {
            "name": run.name(self.scale), "family": run.family, "size": run.size, "posemb": run.posemb, "pooling": run.pooling,
            "objective": run.objective, "images": run.images or self.scale.glyph_images, "steps": tcfg.steps,
            "seed": run.seed, "lr": run.lr or self.scale.lrs[run.family],
            "params": sum(p.numel() for p in model.parameters()),
            "forward_flops_per_image": flops,
            "train_flops": 3 * flops * tcfg.batch_size * tcfg.steps,  # forward + backward, every image of every step
            "train_s": result["train_s"], "train_s_from_step": result.get("train_s_from_step", 0),
            "glyph_test_top1": (result.get("test") or {}).get("top1"),
            "curve": curve, "best": best, "final": curve[-1] if curve else {}, "model_dir": str(out / "model"),
            "optimizer": run.optimizer, "threads": self.threads if trained else None,  # None: trained before
            "config": {"model": model_section(run.family, run.size, run.posemb, run.pooling, self.scale.models)},
        }
        return self._finish(run, summary, unit_steps(run, self.scale) if trained else 0)

    def finetune(self, ft: Finetune) -> dict[str, Any]:
        """Fine-tune on the digits at each learning rate of the sweep (pre-training the source first if
        needed); the pick is the best dev accuracy, and its test accuracy is the result. A sweep whose best lies at
        an edge is extended past it by the grid's ratio, up to `scale.finetune_extend` rates per side
        (stats.extension), so the pick is interior; a finished unit whose sweep is not yet bracketed is extended
        when read again (its rates' folders are read back: only the new rates train)."""
        sc = self.scale
        if not self._extends(ft):
            return self._read(ft)
        src = self.pretrain(ft.source)["model_dir"] if ft.source is not None else ""
        scratch = None if ft.source is not None else model_section(*ft.scratch, models=sc.models)
        steps = ft.steps or sc.finetune_steps
        sweep: list[dict[str, float]] = []
        todo, ran_steps = list(sc.finetune_lrs), 0
        while todo:
            lr = todo.pop(0)
            cfg = finetune_config(sc, src, lr, ft.img_size, ft.seed, scratch_model=scratch, steps=ft.steps or None,
                                  device=self.device)
            out, ran = self._train(ft, cfg, None, self.folder(ft) / f"lr_{lr:g}")
            if ran and lr not in sc.finetune_lrs and self.bar is not None:
                self.bar.total += steps  # an extension: steps the plan did not count
            ran_steps += steps if ran else 0
            result = json.loads((out / "result.json").read_text())
            sweep.append({"lr": lr, "dev_top1": result["dev"]["top1"], "test_top1": result["test"]["top1"],
                          "train_s": result["train_s"]})
            if not todo and (nxt := extension(sweep, sc.finetune_lrs, sc.finetune_extend, "dev_top1")) is not None:
                todo.append(nxt)
        sweep.sort(key=lambda r: r["lr"])
        best = next(r for r in sweep if r["lr"] == pick_rate(sweep, "dev_top1"))
        summary = {"name": ft.name(sc), "source": ft.source.name(sc) if ft.source else "scratch",
                   "img_size": ft.img_size, "seed": ft.seed, "lr": best["lr"], "dev_top1": best["dev_top1"],
                   "test_top1": best["test_top1"], "sweep": sweep, "bracketed": bracketed(sweep, "dev_top1")}
        return self._finish(ft, summary, ran_steps)

    def pretrain_all(self, runs: list[Pretrain]) -> list[dict[str, Any]]:
        """The summaries of `runs`, training those not done: one after another, or `jobs` at a time in worker
        processes (small models leave a GPU or several cores idle; each worker takes cores // jobs threads)."""
        self._in_workers([r for r in self.unique(runs) if not self.done(r)])
        return [self.pretrain(r) for r in runs]

    def finetune_all(self, fts: list[Finetune]) -> list[dict[str, Any]]:
        """The summaries of `fts`, as `pretrain_all` (their sources pre-trained first): fine-tunes not done, or whose
        sweep still extends past a winning edge, run `jobs` at a time."""
        todo = [f for f in self.unique(fts) if self._extends(f)]
        self.pretrain_all([f.source for f in todo if f.source is not None])
        self._in_workers(todo)
        return [self.finetune(f) for f in fts]

    def _extends(self, ft: Finetune) -> bool:
        """Whether a fine-tune has rates left to train: not done, or its sweep not yet bracketed and extensible."""
        return not self.done(ft) or extension(self._read(ft)["sweep"], self.scale.finetune_lrs,
                                              self.scale.finetune_extend, "dev_top1") is not None

    def _read(self, unit: Unit) -> dict[str, Any]:
        return json.loads((self.folder(unit) / UNIT_FILE).read_text())

    def _rates(self, ft: Finetune) -> int | None:
        """How many rates a finished fine-tune's sweep holds (None: not finished)."""
        return len(self._read(ft)["sweep"]) if self.done(ft) else None

    def _in_workers(self, todo: list[Unit]) -> None:
        """Train `todo` (distinct run folders) `jobs` at a time in worker processes; with one job, or one unit, the
        callers train them in this process instead."""
        if self.jobs < 2 or len(todo) < 2:
            return
        before = {self.folder(u): self._rates(u) for u in todo if isinstance(u, Finetune)}
        ours = set(multiprocessing.active_children())
        with _thread_env(self.threads), ProcessPoolExecutor(self.jobs, mp_context=_pool_context(self.threads),
                                                           initializer=_worker_start,
                                                           initargs=(dict(os.environ),)) as pool:
            futures = {pool.submit(_unit_in_worker, str(self.out), self.scale, u, self.device, self.threads): u
                       for u in todo}
            try:
                self._collect(futures, before)
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the command line: stop the workers, not wait
                _stop_workers(pool, ours)  # (a failed run instead lets the others finish, then names its error)
                raise

    def _collect(self, futures: dict[Any, Unit], before: dict[Path, int | None]) -> None:
        """Wait for the workers' units as they finish, advancing the progress bar by the steps each trained."""
        for f in as_completed(futures):
            f.result()  # a failed run fails the reproduction, naming its error
            u = futures[f]
            if self.bar is None:
                continue
            if isinstance(u, Finetune):  # the rates it trained; those past the grid were not planned
                was, each = before[self.folder(u)], u.steps or self.scale.finetune_steps
                new = (self._rates(u) or 0) - (was or 0)
                self.bar.total += each * (new - (len(self.scale.finetune_lrs) if was is None else 0))
                self.bar.update(each * new)
            else:
                self.bar.update(unit_steps(u, self.scale))
            self.bar.set_postfix_str(u.name(self.scale)[:60])


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op thread count set to `threads` for one training run, restored after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@contextmanager
def _thread_env(threads: int) -> Iterator[None]:
    """Workers started inside inherit `threads` as their OpenMP / BLAS pool sizes, read when they import numpy and
    torch: jobs x (all cores) spinning threads oversubscribe a machine many times over."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update({n: str(threads) for n in names})
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


# what a worker imports to train a unit: a fork server loads it once, and each worker forks from there (importing
# torch starts no CUDA context and no OpenMP threads; the BLAS threads numpy's import starts where threads > 1 are
# stopped and restarted around a fork by OpenBLAS's own fork handlers). torch._dynamo too: every optimizer imports it
# when it is built (and with it torch.distributed's FSDP and DTensor), ~2 CPU s that each worker paid again
# (it starts no thread either)
WORKER_MODULES = ("vitkit.reproduce.runs", "torch._dynamo")
_SERVER: dict[str, int] = {}  # the fork server this module started: its pid and the thread count of its environment


def _pool_context(threads: int) -> multiprocessing.context.BaseContext:
    """How a pool whose workers train with `threads` threads each starts them: forked from a fork server that holds the
    worker modules (one import per parent process, not one per worker), or spawned (each worker imports them) where
    there is no fork server, or where one runs with another thread environment than `threads` (started by someone
    else, or for a pool with another thread count): OpenMP and BLAS read their pool sizes from it when the server
    loads them, so its workers would train with other thread counts, and so give other numbers. Spawned too off Linux
    and where the server's socket cannot be made. Never plain fork: no fork of a process that holds CUDA or OpenMP
    state. The server is Python's one per process: it lives until this process ends, and a later forkserver user in
    the process (a DataLoader given that context) gets it with vitkit loaded and this pool's thread environment."""
    spawn = multiprocessing.get_context("spawn")
    server = getattr(forkserver, "_forkserver", None)
    if sys.platform != "linux" or not hasattr(server, "_forkserver_pid"):  # (macOS: no fork after system libraries)
        return spawn
    preload = server._preload_modules
    forkserver.set_forkserver_preload(list(WORKER_MODULES))
    try:
        with _thread_env(threads):  # a server started here reads this pool's thread counts
            was = server._forkserver_pid
            forkserver.ensure_running()  # starts it, or a new one if it died
    except OSError:  # its socket cannot be made (a path under TMPDIR longer than AF_UNIX's limit): spawn needs none
        return spawn
    finally:
        forkserver.set_forkserver_preload(preload)
    if server._forkserver_pid != was:
        _SERVER.update(pid=server._forkserver_pid, threads=threads)
    if _SERVER != {"pid": server._forkserver_pid, "threads": threads}:
        return spawn
    return multiprocessing.get_context("forkserver")


def _worker_start(env: dict[str, str]) -> None:
    """A worker reads the environment its parent had when it asked for the worker (a forked one starts with its
    fork server's), leaves interrupting to its parent (Ctrl-C reaches the whole process group; the parent stops
    the workers) and ends itself if the parent dies without stopping it (SIGKILL): an orphan would go on training
    a unit that a resumed run trains again in the same folder."""
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is None:
        raise RuntimeError("_worker_start runs in a worker process, started by multiprocessing")
    threading.Thread(target=_end_with_parent, args=(parent.sentinel,), daemon=True,
                     name="vitkit-parent-watch").start()


def _end_with_parent(sentinel: int) -> None:
    """Wait for the parent's end: `sentinel` (multiprocessing's pipe from the process that asked for this worker,
    also under a fork server, whose child the worker is) reads end-of-file when the parent has died."""
    multiprocessing.connection.wait([sentinel])
    os._exit(1)  # as a SIGKILL would: a checkpoint is written atomically, the unit resumes from the last one


def _stop_workers(pool: ProcessPoolExecutor, before: set[multiprocessing.process.BaseProcess]) -> None:
    """Cancel what has not started and terminate the workers started since `before` (a unit being trained resumes
    from its last checkpoint when the reproduction is run again)."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = [p for p in multiprocessing.active_children() if p not in before]
    for p in workers:
        p.terminate()
    for p in workers:
        p.join(10)


def _unit_in_worker(out: str, scale: Scale, unit: Unit, device: str, threads: int) -> None:
    torch.set_num_threads(threads)
    wb = Workbench(out, scale, progress=False, device=device)
    if isinstance(unit, Pretrain):
        wb.pretrain(unit)
    else:
        wb.finetune(unit)


# forward FLOPs per image by architecture (model type and config): a sweep's or a grid's runs share a few, and counting
# a ResNet's (or a hybrid's stem) traces a forward pass (~0.1 s a model, as long as a smoke run's training)
_FLOPS: dict[str, int] = {}


def _forward_flops(model: torch.nn.Module) -> int:
    """`model_flops(model)`, counted once per architecture in this process."""
    key = type(model).__name__ + json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    if key not in _FLOPS:
        _FLOPS[key] = model_flops(model)
    return _FLOPS[key]


def _device_kind(device: str) -> str:
    """cpu or cuda: what decides the numbers (cuda:1 and cuda give the same)."""
    return device.split(":")[0]
