"""The training engine shared by pre-training and fine-tuning (paper §4.1, appendix B).

Determinism is by construction: the data order of epoch e is a permutation drawn from
(seed, e), and every random draw of step s (augmentation, dropout) comes from generators seeded
with (seed, s). A run therefore resumes exactly from any saved step: the checkpoint only needs the
weights, the optimizer state (and the EMA), and the step number.

Data comes from one kind of loader, a `vitkit.data.loader.StepLoader` that yields ready batches by
step (in-memory arrays or files, workers, per-sample augmentation).
Under `torch.distributed` (see vitkit.distributed) the model is wrapped in DDP, or sharded by FSDP2
with `parallel="fsdp"`; each rank trains on its shard of the global batch, and only rank 0 writes
logs and checkpoints (always the full, unsharded state). With `world_invariant` the gradient is
reduced in micro-batch order instead, so any world size that divides `grad_accum` gives the same bits.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from vitkit import distributed as dist
from vitkit.data.augment import Mix, mix_images
from vitkit.data.base import fingerprint
from vitkit.data.collate import NativePacker
from vitkit.data.loader import StepLoader, step_generator
from vitkit.formats.common import check_tensor_values, pickle_refusal
from vitkit.models.packing import PackedBatch
from vitkit.models.vit import TwoHeads
from vitkit.train.config import TrainConfig, upgrade_train_dict
from vitkit.train.distill import distillation_loss
from vitkit.train.grads import world_invariant_grads
from vitkit.train.metrics import metric_lines
from vitkit.train.optim import EMA, build_optimizer, freeze, lr_at, param_groups
from vitkit.utils.atomic import atomic_path, atomic_write_text, clean_stale_temps
from vitkit.utils.hardware import manual_seed
from vitkit.utils.precision import autocast

HOLD_ENV = "VITKIT_HOLD_AT_STEP"  # tests: stop at this step (after its checkpoint) until killed; see Trainer._hold


def check_native_training(model: nn.Module, cfg: TrainConfig, teacher: nn.Module | None) -> None:
    """A ValueError naming what native-resolution training (packed images, NaViT: a `NativePacker` loader) does not
    combine with here: a model without `forward_packed` (the MPP objective's wrapper) or one that cannot pack,
    gradient accumulation, Mixup / CutMix, a distillation teacher, several processes, torch.compile."""
    why = []
    if not hasattr(model, "forward_packed"):
        why.append(f"a {type(model).__name__} takes images, not packed patches (train.objective = classify)")
    else:
        model.check_packable()
    if cfg.grad_accum != 1:
        why.append(f"train.grad_accum = {cfg.grad_accum} (a packed batch is one micro-batch)")
    if cfg.mixup or cfg.cutmix:
        why.append("train.mixup / train.cutmix (they mix equal-size images)")
    if teacher is not None or cfg.world_invariant:
        why.append("a distillation teacher / train.world_invariant")
    if dist.world_size() > 1:
        why.append("several processes (torchrun)")
    if cfg.compile:
        why.append("train.compile (every packed batch has its own shape)")
    if why:
        raise ValueError("native-resolution training (data.max_patches > 0) does not combine with: " + "; ".join(why))


class Trainer:
    """Runs `cfg.steps` optimisation steps of `model` on the batches of a `StepLoader`, with logging and
    exact resume. `eval_fn(model) -> metrics` is called every `eval_every` steps (on the EMA weights
    when Polyak averaging is on).
    """

    STATE_NAME = "train_state.pt"

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        data: StepLoader,
        out_dir: str | Path,
        eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
        progress: bool = True,
        save_checkpoints: bool = True,
        teacher: nn.Module | None = None,
    ) -> None:
        if not isinstance(data, StepLoader):  # (TrainConfig checked its own values when it was built)
            raise ValueError(f"the Trainer takes a vitkit.data.loader.StepLoader, got {type(data).__name__}")
        if isinstance(data.transform, NativePacker):
            check_native_training(model, cfg, teacher)
        self.model, self.cfg, self.data = model.to(cfg.device), cfg, data
        freeze(model, cfg.train_blocks)  # before DDP / FSDP wrap: they see only what trains
        self.rank, self.world = dist.rank(), dist.world_size()
        self.is_main = self.rank == 0
        if cfg.world_invariant and cfg.grad_accum % self.world:
            raise ValueError(f"train.world_invariant needs grad_accum divisible by the number of processes: "
                             f"grad_accum {cfg.grad_accum}, {self.world} processes")
        self.out = Path(out_dir)
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            for stale in clean_stale_temps(self.out):  # left by a process killed mid-write
                tqdm.write(f"removed {stale}, a temporary file left by an interrupted write")
        # the module that runs the forward pass: DDP wrapper (or `model` sharded in place by FSDP)
        # and/or torch.compile around it; the optimizer is built below, after sharding
        self.forward_model: nn.Module = dist.wrap_model(model, cfg.device, cfg.parallel) if self.world > 1 else model
        self.sharded = dist.is_sharded(model)
        if cfg.compile:
            self.forward_model = torch.compile(self.forward_model, backend=cfg.compile)
        self.eval_fn, self.progress, self.save_checkpoints = eval_fn, progress, save_checkpoints
        if (teacher is None) != (cfg.distill == "none"):
            raise ValueError("train.distill needs a teacher (train.teacher), and a teacher needs train.distill = "
                             "soft or hard")
        self.teacher = teacher.to(cfg.device) if teacher is not None else None
        # the compiled step (train.compile) also takes Adam(W)'s fused update on the CPU (on CUDA it is always fused)
        fused = True if cfg.compile and not self.sharded and cfg.optimizer.lower() in ("adam", "adamw") else None
        self.opt = build_optimizer(
            param_groups(model, cfg.weight_decay, cfg.layer_decay), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.betas,
            cfg.momentum, fused=fused
        )
        if self.is_main and self.opt.defaults.get("fused"):  # said once, so a run's log shows which update ran
            kind = "CUDA" if torch.device(cfg.device).type == "cuda" else "CPU"
            tqdm.write(f"optimizer: {type(self.opt).__name__} with torch's fused {kind} kernel (every parameter on "
                       f"{cfg.device})")
        self.ema = EMA(model, cfg.ema_decay) if cfg.ema_decay else None
        self.step = 0
        self.lr = 0.0
        self.skipped_images = 0  # unreadable images met so far (counted over the whole run)
        # sums over the steps since the last log line (loss x n, correct, n): saved with the state, so the
        # first line logged after a resume averages the same steps as an uninterrupted run's
        self.log_window = [0.0, 0.0, 0.0]
        self.metrics_path = self.out / "metrics.jsonl"
        self._tb: Any = None
        self._resumed_at: int | None = None  # set by load_state
        # wall-clock seconds of fitting before this process (from the state resumed), and the step they count from:
        # 0, unless the state was written before vitkit kept the time (then only the time since the resume is known)
        self.train_s_before, self.train_s_from = 0.0, 0
        self._fit_t0: float | None = None  # when the fit under way began (None between fits)
        self._fingerprint: dict[str, Any] | None = None  # of the training data, computed once (files are stat'ed)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The resumable state, unsharded. Under FSDP every rank must call it; only rank 0 gets the weights."""
        if self.sharded:
            model_sd, opt_sd = dist.full_state(self.model, self.opt)
        else:
            model_sd, opt_sd = self.model.state_dict(), self.opt.state_dict()
        return {
            "step": self.step,
            "model": model_sd,
            "optimizer": opt_sd,
            "ema": dist.full_tensors(self.ema.shadow) if self.ema else None,
            "skipped_images": self.skipped_images,
            "train_config": json.dumps(self.cfg.to_dict()),
            "data": json.dumps(self._data_fingerprint()),
            "train_s": self.train_s, "train_s_from": self.train_s_from,
        }

    @property
    def train_s(self) -> float:
        """Wall-clock seconds spent fitting this run, over every process that trained it (a resumed run adds the time
        its state recorded); from step `train_s_from` on."""
        return self.train_s_before + (time.perf_counter() - self._fit_t0 if self._fit_t0 is not None else 0.0)

    def _data_fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.data.dataset)
        return self._fingerprint

    def save_state(self) -> Path:
        """Write the resumable training state atomically (a crash leaves the previous one intact).

        Only rank 0 writes; the state holds the unwrapped weights, so any world size can resume it."""
        path = self.out / self.STATE_NAME
        window = dist.sum_across(self.log_window, self.cfg.device)  # collective: the global batch's sums
        state = self.state_dict() if self.is_main or self.sharded else None  # gathering shards is collective
        if self.is_main:
            state["log_window"] = window
            with atomic_path(path) as tmp:
                torch.save(state, tmp)
        dist.barrier()
        return path

    # TrainConfig fields that may change between a run and its resumption without changing its result
    RESUME_FREE = ("log_every", "eval_every", "ckpt_every", "device", "tensorboard", "extra")

    def load_state(self, path: str | Path | None = None, force: bool = False) -> None:
        """Continue from a saved state. The state is checked first: its keys, that its weights fit this
        model (names and shapes), and that it was written by the same training recipe (differing
        TrainConfig fields are named; `force=True` accepts them)."""
        path = Path(path) if path else self.out / self.STATE_NAME
        if not path.is_file():
            raise FileNotFoundError(f"no training state to resume from at {path}")
        try:
            st = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
            raise ValueError(f"{path}: not a readable training state: {pickle_refusal(e)}") from e
        if not isinstance(st, dict):
            raise ValueError(f"{path}: not a vitkit training state (a {type(st).__name__}, expected a dict)")
        missing = [k for k in ("step", "model", "optimizer") if k not in st]
        if missing:
            raise ValueError(f"{path}: not a complete vitkit training state: missing {missing}")
        step = st["step"]
        if isinstance(step, torch.Tensor) and step.numel() == 1 and not step.is_floating_point():
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= self.cfg.steps:
            raise ValueError(f"{path}: step {step!r} is not a step of this run (0..{self.cfg.steps})")
        self._check_resume_weights(st["model"], path)
        if not force and "train_config" in st:
            saved = upgrade_train_dict(json.loads(st["train_config"]))
            now = self.cfg.to_dict()
            diff = [f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
                    if k not in self.RESUME_FREE and saved.get(k) != now.get(k)]
            if diff:
                raise ValueError(f"{path} was written by another training recipe ({'; '.join(diff)}); "
                                 "resume with the same settings, or accept them with --resume --force")
        if not force and isinstance(st.get("data"), str):
            then, now = json.loads(st["data"]), self._data_fingerprint()
            if then != now:
                what = (f"{then.get('n')} examples then, {now['n']} now" if then.get("n") != now["n"] else
                        "the same number of examples, but other files, sizes or labels")
                raise ValueError(f"{path}: the training data changed since this state was saved ({what}); a resume on "
                                 "other data is not the same run (a held-out split would be re-carved): restore the "
                                 "data, or accept the change with --resume --force")
        if self.sharded:
            dist.load_full_state(self.model, self.opt, st["model"], st["optimizer"])
        else:
            self.model.load_state_dict(st["model"])
            try:
                self.opt.load_state_dict(st["optimizer"])
            except (ValueError, KeyError) as e:
                raise ValueError(f"{path}: the optimizer state does not fit this optimizer ({e})") from e
        if self.ema is not None and st.get("ema") is not None:
            shadow = {k: v.float() for k, v in st["ema"].items()}
            self.ema.shadow = dist.shard_like(shadow, self.model.state_dict()) if self.sharded else shadow
        self.step = int(st["step"])
        self.skipped_images = int(st.get("skipped_images", 0))
        known = isinstance(st.get("train_s"), float)  # a state from before the time was kept: counted from here
        self.train_s_before = float(st["train_s"]) if known else 0.0
        self.train_s_from = int(st.get("train_s_from", 0)) if known else self.step
        # the global sums since the last log line, held by rank 0 (the others add nothing until the next line)
        window = [float(v) for v in st.get("log_window", [0.0, 0.0, 0.0])]
        self.log_window = window if self.is_main else [0.0, 0.0, 0.0]
        self._resumed_at = self.step  # the log is cut back to this step when training goes on (fit)

    def _check_resume_weights(self, saved: dict[str, Any], path: Path) -> None:
        """The saved weights must be this model's: a ValueError names missing, extra and mis-shaped tensors."""
        own = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}  # DTensors: the full shape
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: 'model' is not a dict of tensors")
        got = {k: tuple(v.shape) for k, v in saved.items() if isinstance(v, torch.Tensor)}
        bad = [k for k, v in saved.items() if not isinstance(v, torch.Tensor)][:3]
        if bad:
            raise ValueError(f"{path}: 'model' holds non-tensor entries ({', '.join(bad)})")
        problems = [f"missing {k}" for k in own if k not in got][:3]
        problems += [f"unexpected {k}" for k in got if k not in own][:3]
        problems += [f"{k} is {got[k]}, this model has {own[k]}" for k in own if k in got and got[k] != own[k]][:3]
        if problems:
            raise ValueError(f"{path} holds the weights of another architecture ({'; '.join(problems)}); "
                             "resume with the model it was trained with")
        refs = self.model.state_dict()
        for k, v in saved.items():
            check_tensor_values(k, v, refs[k], path)

    def _truncate_metrics(self, step: int) -> None:
        """Drop log lines written after the resumed step, so the log reads as one uninterrupted run.

        A torn line (a kill in the middle of an append) is dropped with a notice. The log is rewritten
        atomically."""
        if not self.metrics_path.exists():
            return
        keep = []
        for n, ln, rec in metric_lines(self.metrics_path):
            if rec is None:
                tqdm.write(f"{self.metrics_path}:{n}: dropped a torn log line (a kill mid-write): {ln[:60]!r}")
            elif rec.get("step", 0) <= step and not rec.get("final"):  # the final evaluation is logged again
                keep.append(ln)
        atomic_write_text(self.metrics_path, "".join(ln + "\n" for ln in keep))

    def log(self, rec: dict[str, Any]) -> None:
        """Append one record to metrics.jsonl (and TensorBoard), on the main process only."""
        if not self.is_main:
            return
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if self.cfg.tensorboard and self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional
                self._tb = False
            else:
                self._tb = SummaryWriter(str(self.out / "tb"))
        if self._tb:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, rec.get("step", self.step))
            self._tb.flush()

    # ------------------------------------------------------------------ the loop
    def train_step(self, step: int, x: torch.Tensor, y: torch.Tensor,
                   positions: list[int] | None = None) -> tuple[float, float, int]:
        """One optimisation step on this rank's batch (all micro-batches); returns (loss, accuracy, examples).

        The step's loss and correct count stay tensors until its optimizer update is queued, then are read back
        together: one host read per step, none between the forward, backward and update.

        The loss of each micro-batch is weighted by its share of the batch, so accumulating k
        micro-batches gives the gradient of the whole batch's mean loss (as one big batch would).
        With `world_invariant`, `positions` (each row's place in the global batch) say which micro-batch
        a row belongs to; see `vitkit.train.grads`."""
        cfg, model = self.cfg, self.model
        lr = lr_at(step, cfg.lr, cfg.steps, cfg.warmup_steps, cfg.schedule, cfg.min_lr)
        for g in self.opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)  # layer-wise decay scales each depth's group
        self.lr = lr
        self.opt.zero_grad(set_to_none=True)
        if cfg.world_invariant:
            total_loss, correct = world_invariant_grads(self, step, x, y, positions)
        else:
            manual_seed(cfg.seed * 1_000_003 + step + 104_729 * self.rank)  # dropout / drop-path draws
            mix = Mix()
            if cfg.mixup or cfg.cutmix:  # on this rank's batch, from (seed, step, rank) alone: resume stays exact
                x, mix = self._mix(x, step, -1 - self.rank)
            x, y = x.to(cfg.device, non_blocking=True), y.to(cfg.device, non_blocking=True)  # pinned: copies overlap
            total_loss, correct, start = 0.0, 0, 0
            # packed images (NaViT) are one micro-batch (check_native_training: grad_accum 1)
            chunks = [(x, y)] if isinstance(x, PackedBatch) else list(zip(x.chunk(cfg.grad_accum),
                                                                          y.chunk(cfg.grad_accum)))
            for i, (xm, ym) in enumerate(chunks):
                sync = i == len(chunks) - 1 or not hasattr(self.forward_model, "no_sync")
                with contextlib.nullcontext() if sync else self.forward_model.no_sync():
                    loss, right = self._forward_backward(xm, ym, mix, y, start, len(ym) / len(y))
                start += len(ym)
                total_loss += loss * len(ym) / len(y)
                correct += right
        if cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        self.opt.step()
        if self.ema is not None:
            self.ema.update(model)
        loss_sum, right = _read_back(total_loss, correct)
        return loss_sum, right / len(y), len(y)

    def _mix(self, x: torch.Tensor, step: int, stream: int) -> tuple[torch.Tensor, Mix]:
        cfg = self.cfg
        return mix_images(x, step_generator(cfg.seed, step, stream), cfg.mixup, cfg.cutmix, cfg.mix_switch_prob,
                          cfg.mix_prob)

    def _forward_backward(self, xm: torch.Tensor, ym: torch.Tensor, mix: Mix, mix_y: torch.Tensor, start: int,
                          weight: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of one micro-batch (rows start.. of the mixed batch whose labels are `mix_y`), its
        loss scaled by `weight`; returns the unscaled loss and the number of correct top-1 predictions (for a model
        with its own targets, the fraction of them right times the micro-batch's images, so train_acc stays a
        fraction), as float64 tensors on the device (read back by train_step, once per step)."""
        cfg = self.cfg
        with autocast(cfg.precision, cfg.device):
            out = self.forward_model(xm)
        dist_logits = None
        if isinstance(out, TwoHeads):  # DeiT's class and distillation heads
            out, dist_logits = out.logits, out.dist_logits
        # a model that brings its own targets (masked patch prediction) returns (logits, targets)
        logits, target = out if isinstance(out, tuple) else (out, ym)
        if mix.kind != "none" and not isinstance(out, tuple):  # Mixup / CutMix soft targets (rows, K)
            target = mix.targets(mix_y, logits.shape[-1])[start : start + len(ym)]
        if self.teacher is not None:
            with autocast(cfg.precision, cfg.device):
                t_logits = self.teacher(xm)  # (float32: the Teacher returns float)
            loss = distillation_loss(logits, dist_logits, t_logits, target, cfg.distill, cfg.distill_alpha,
                                     cfg.distill_tau, cfg.label_smoothing)
        else:  # with a distillation token and no teacher, both heads learn the labels
            heads = [logits] if dist_logits is None else [logits, dist_logits]
            loss = sum(F.cross_entropy(h.float(), target, label_smoothing=cfg.label_smoothing)
                       for h in heads) / len(heads)
        if dist_logits is not None:  # accuracy of the inference output: the two heads' mean
            logits = TwoHeads(logits, dist_logits).mean()
        (loss * weight).backward()
        hard = target if target.ndim == 1 else ym  # accuracy against the images' own labels under mixing
        right = (logits.argmax(-1) == hard).float().sum().double()
        if len(hard) != len(ym):  # a model with its own targets (MPP: masked patches): their accuracy, per image
            right = right / len(hard) * len(ym)
        return loss.detach().double(), right

    def model_state(self) -> dict[str, torch.Tensor]:
        """The full weights; under FSDP every rank must call it and only rank 0 gets them."""
        return dist.full_model_state(self.model) if self.sharded else self.model.state_dict()

    def evaluate_now(self) -> dict[str, float]:
        """`eval_fn` on the (EMA) weights; under FSDP every rank must call it (the forward is collective)."""
        assert self.eval_fn is not None
        if self.ema is None:
            return self.eval_fn(self.model)
        backup = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.ema.copy_to(self.model)
        try:
            return self.eval_fn(self.model)
        finally:
            self.model.load_state_dict(backup)

    def _hold(self) -> None:
        """$VITKIT_HOLD_AT_STEP reached (a crash-safety test's hook): say so in `<out>/.held-at-<step>` and wait to be
        killed, so a SIGKILL lands at a chosen step rather than after a guessed sleep."""
        (self.out / f".held-at-{self.step}.rank{self.rank}").write_text(str(os.getpid()))
        while True:
            time.sleep(1)

    def fit(self, stop_at: int | None = None) -> dict[str, Any]:
        """Train from `self.step` to `cfg.steps` (or `stop_at`); returns the last logged metrics."""
        if self._resumed_at is not None and self.is_main:
            self._truncate_metrics(self._resumed_at)  # lines written after the saved step are logged again
        self._resumed_at = None
        cfg = self.cfg
        end = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
        self.model.train()
        if self.is_main:
            atomic_write_text(self.out / "train_config.json", json.dumps(cfg.to_dict(), indent=2) + "\n")
        show = self.progress and self.is_main
        bar = tqdm(total=end, initial=self.step, disable=not show, desc="train", unit="step", dynamic_ncols=True)
        last: dict[str, Any] = {}
        hold_at = int(os.environ.get(HOLD_ENV, "0") or 0)
        t0 = self._fit_t0 = time.perf_counter()
        for batch in self.data.iterate(self.step, end):
            if batch.step != self.step:  # the loader and the loop must agree, or resume is not exact
                raise RuntimeError(f"data loader returned step {batch.step}, expected {self.step}")
            if batch.skipped:
                self.skipped_images += len(batch.skipped)
                self.log({"step": self.step, "skipped_images": batch.skipped, "skipped_total": self.skipped_images})
                for msg in batch.skipped:
                    bar.write(f"skipped unreadable image ({self.skipped_images} so far): {msg}")
            if len(batch.y) == 0:
                raise ValueError(f"every image of the batch of step {self.step} was unreadable")
            loss, acc, n = self.train_step(self.step, batch.x, batch.y, batch.positions)
            if not math.isfinite(loss):  # NaN or Inf: every later step would be made of it
                raise FloatingPointError(f"loss became {_finite_name(loss)} at step {self.step} (non-finite); lower "
                                         "optim.lr, set optim.clip_norm, or check what scales the model's outputs "
                                         "(lora.alpha)")
            self.step += 1
            w = self.log_window  # this rank's sums since the last log line: loss x n, correct, n
            self.log_window = [w[0] + loss * n, w[1] + acc * n, w[2] + n]
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:  # (a stop_at pause logs nothing extra)
                # every rank reaches this line at the same step: the figures are the global batch's, not rank 0's
                g_loss, g_correct, g_seen = dist.sum_across(self.log_window, cfg.device)
                dt = time.perf_counter() - t0
                lr = self.lr  # the schedule's lr (a group under layer-wise decay runs at a fraction of it)
                last = {
                    "step": self.step,
                    "loss": g_loss / g_seen,
                    "train_acc": g_correct / g_seen,
                    "lr": lr,
                    "img_per_s": g_seen / max(dt, 1e-9),
                }
                self.log(last)
                bar.set_postfix(loss=f"{last['loss']:.3f}", lr=f"{lr:.2e}", img_s=f"{last['img_per_s']:.0f}")
                t0, self.log_window = time.perf_counter(), [0.0, 0.0, 0.0]
            if self.eval_fn and cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                if self.is_main or self.sharded:
                    ev = self.evaluate_now()
                if self.is_main:
                    self.log({"step": self.step, **{f"eval_{k}": v for k, v in ev.items()}})
                    if show:  # (the figures are in metrics.jsonl either way)
                        bar.write(f"step {self.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in ev.items() if k != "n"))
                dist.barrier()
            if self.save_checkpoints and cfg.ckpt_every and self.step % cfg.ckpt_every == 0 and self.step < end:
                self.save_state()
            if self.step == hold_at:
                self._hold()
        bar.close()
        self.train_s_before, self._fit_t0 = self.train_s, None  # the clock stops with the fit
        if self.save_checkpoints:
            self.save_state()
        if self.ema is not None and self.step >= cfg.steps:  # the averaged weights are the result (appendix B.1.1)
            self.ema.copy_to(self.model)  # (not at a stop_at pause: training goes on from the raw weights)
        return last


def _read_back(*values: torch.Tensor | float) -> list[float]:
    """The step's sums (tensors on the device, or 0.0 where nothing was added) as Python floats, in one transfer."""
    dev = next((v.device for v in values if isinstance(v, torch.Tensor)), torch.device("cpu"))
    return torch.stack([torch.as_tensor(v, dtype=torch.float64, device=dev) for v in values]).tolist()


def _finite_name(loss: float) -> str:
    """A non-finite loss as people write it: NaN, inf or -inf."""
    return "NaN" if loss != loss else str(loss)
