"""Step-indexed, deterministic, multi-process batch loading with per-rank sharding.

The global batch of step s holds positions [s*B, (s+1)*B) of the permutation of epoch s // (N // B),
drawn from (seed, epoch); the image at batch position p is augmented with a generator seeded from
(seed, s, p). A batch is therefore a pure function of (seed, step): it does not depend on the number
of workers, on where a run was resumed, or on the world size: rank r of W takes the r-th of W equal,
contiguous blocks of positions, so the union of the ranks' batches is the one-process batch, and a
micro-batch of gradient accumulation (a block of positions too) lies on one rank whenever W divides
their number. A sequential pass (no shuffling) deals positions r, r+W, ... instead, which evens out
its last, partial batch. Unreadable images are dropped from their batch and named in `Batch.skipped`;
the trainer counts and logs them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from vitkit.data.base import batch_reader
from vitkit.data.collate import NativePacker
from vitkit.data.datasets import Dataset
from vitkit.data.transforms import EvalTransform, TrainTransform
from vitkit.models.packing import PackedBatch

SampleTransform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A CPU generator seeded from (seed, step, stream): the only source of randomness of a step."""
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + step * 7919 + stream) % (2**63 - 1))
    return g


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator()
    g.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


_CAPPED: set[tuple[int, int]] = set()  # (workers asked for, cores) already said


@dataclass
class Batch:
    x: torch.Tensor | PackedBatch  # images (B, C, H, W), or packed images of their own sizes (NativePacker)
    y: torch.Tensor
    step: int
    skipped: list[str] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # the data set index of each row of x
    positions: list[int] = field(default_factory=list)  # the position of each row of x in the global batch

    def pin_memory(self) -> "Batch":
        """The batch in page-locked memory, so that copying it to a GPU can overlap compute (DataLoader calls this
        in its pinning thread)."""
        return dataclasses.replace(self, x=self.x.pin_memory(), y=self.y.pin_memory())


def _decode_size_of(transform: SampleTransform) -> tuple[int, int] | None:
    """The decode size a vitkit transform declares (TrainTransform / EvalTransform), else None."""
    return transform.decode_size() if isinstance(transform, (TrainTransform, EvalTransform)) else None


def _identity(b: Batch) -> Batch:
    return b


#: the longest path of a Unix socket (sun_path less its terminating NUL, Linux)
UNIX_PATH_MAX = 107


def check_worker_socket_dir() -> None:
    """Refuse, naming TMPDIR, a temporary folder too deep for loader workers. With torch's "file_descriptor"
    sharing (Linux's default) a worker hands each batch over through a Unix socket that multiprocessing creates
    under the temporary folder (`pymp-XXXXXXXX/listener-XXXXXXXX`); when that path is longer than a socket's path
    may be, Python 3.11's queue thread only prints "AF_UNIX path too long", drops the batch, and the run waits
    for it for ever."""
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        return
    from multiprocessing import process

    # the folder multiprocessing made for this process, or the one it will make (util.get_temp_dir's own rule)
    base = process.current_process()._config.get("tempdir") or os.path.join(tempfile.gettempdir(), "pymp-" + "x" * 8)
    listener = os.path.join(base, "listener-" + "x" * 8)
    if len(listener) > UNIX_PATH_MAX:
        raise ValueError(f"the temporary folder {tempfile.gettempdir()!r} is too deep for data-loading workers: "
                         f"they pass batches through a Unix socket under it ({listener!r}, {len(listener)} "
                         f"characters; at most {UNIX_PATH_MAX}); set TMPDIR to a shorter folder (e.g. /tmp), "
                         "or load in the main process (--set data.num_workers=0)")


class StepLoader:
    """Batches of `dataset` by step number; `iterate(start, end)` prefetches with `num_workers` processes. With a
    `NativePacker` (vitkit/data/collate.py) as the transform, each batch's `x` is a `PackedBatch`: the images at
    their own aspect ratio, packed (NaViT); each image's draws come from its own generator, as a transform's do."""

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        transform: SampleTransform | NativePacker,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world: int = 1,
        num_workers: int = 0,
        decode_size: tuple[int, int] | None = None,
        pin_memory: bool = False,
    ) -> None:
        n = len(dataset)
        if batch_size < 1 or (shuffle and n < batch_size):
            raise ValueError(f"batch size {batch_size} does not fit the {n} examples of the data set")
        if batch_size % world:
            raise ValueError(f"the global batch {batch_size} is not divisible by the world size {world}")
        self.dataset, self.batch_size, self.transform, self.seed = dataset, batch_size, transform, seed
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if num_workers > cores:  # more loader processes than cores only adds memory and switching
            if (num_workers, cores) not in _CAPPED:  # said once a process, not once a loader (train, dev, test)
                _CAPPED.add((num_workers, cores))
                logging.getLogger("vitkit").warning("%d data-loading workers asked for on %d cores: using %d",
                                                    num_workers, cores, cores)
            num_workers = cores
        self.shuffle, self.rank, self.world, self.num_workers = shuffle, rank, world, num_workers
        self.pin_memory = pin_memory  # for a CUDA device: batches arrive page-locked (copies overlap compute)
        # files much larger than this are decoded smaller (JPEG draft / Pillow reduce); None: full size
        self.decode_size = decode_size if decode_size is not None else _decode_size_of(transform)
        # training drops the last partial batch of an epoch; a sequential pass keeps it
        self.steps_per_epoch = n // batch_size if shuffle else -(-n // batch_size)
        self._perm_epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def positions(self, step: int) -> list[tuple[int, int]]:
        """(batch position, data set index) pairs that this rank loads at `step`."""
        epoch, i = divmod(step, self.steps_per_epoch)
        if not self.shuffle:
            idx = range(i * self.batch_size, min((i + 1) * self.batch_size, len(self.dataset)))
            return [(p, j) for p, j in enumerate(idx)][self.rank :: self.world]
        if epoch != self._perm_epoch:
            self._perm, self._perm_epoch = epoch_permutation(len(self.dataset), self.seed, epoch), epoch
        idx = self._perm[i * self.batch_size : (i + 1) * self.batch_size].tolist()
        share = self.batch_size // self.world
        return list(enumerate(idx))[self.rank * share : (self.rank + 1) * share]

    def load(self, step: int) -> Batch:
        imgs, gens, ys, skipped, kept, at = [], [], [], [], [], []
        pos = self.positions(step)
        read = batch_reader(self.dataset)
        if read is not None and pos:  # drawn in one pass (a glyph stream); the same images as one by one
            x, y = read(np.array([j for _, j in pos], dtype=np.int64))
            imgs, ys = list(x.unbind(0)), y.tolist()
            at, kept = [p for p, _ in pos], [j for _, j in pos]
            gens = [step_generator(self.seed, step, 2 + p) for p in at]
            pos = []
        for p, j in pos:
            try:
                img, label = self.dataset.get(j, self.decode_size)
                if hasattr(self.transform, "check"):
                    self.transform.check(img)
            except ValueError as e:
                skipped.append(str(e) if self.dataset.describe(j) in str(e) else f"{self.dataset.describe(j)}: {e}")
                continue
            imgs.append(img)
            gens.append(step_generator(self.seed, step, 2 + p))
            ys.append(label)
            kept.append(j)
            at.append(p)
        if not imgs:
            return Batch(torch.empty(0), torch.empty(0, dtype=torch.long), step, skipped)
        # same-size images go through the transform as one batch (bitwise what one by one gives, faster)
        if isinstance(self.transform, NativePacker):  # native resolution (NaViT): x is a PackedBatch
            packed = self.transform(list(zip(imgs, ys)), gens, train=self.shuffle).batch
            return Batch(packed, torch.tensor(ys, dtype=torch.long), step, skipped, kept, at)
        batched = self.transform.batch(imgs, gens) if isinstance(self.transform, (TrainTransform, EvalTransform)) else None
        x = batched if batched is not None else torch.stack([self.transform(i, g) for i, g in zip(imgs, gens)])
        return Batch(x, torch.tensor(ys, dtype=torch.long), step, skipped, kept, at)

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __getitem__(self, step: int) -> Batch:  # map-style access for torch's DataLoader
        return self.load(step)

    def iterate(self, start: int, end: int) -> Iterator[Batch]:
        """Batches of steps start..end-1 in order; with workers, loading overlaps the model's work."""
        if self.num_workers <= 0:
            for s in range(start, end):
                b = self.load(s)
                yield b.pin_memory() if self.pin_memory and len(b.y) else b
            return
        check_worker_socket_dir()
        dl = torch.utils.data.DataLoader(
            self, batch_size=None, sampler=range(start, end), num_workers=self.num_workers,
            collate_fn=_identity, prefetch_factor=4, pin_memory=self.pin_memory,
        )
        yield from dl
