"""Exact resume: a run SIGKILLed at a chosen step after a checkpoint and resumed ends bitwise equal
to an uninterrupted run (CPU, fixed seed), with file data (an image folder, and the same images packed into
tar shards), worker processes, Inception crop + flip +
RandAugment + random erasing, Mixup / CutMix, dropout, and a corrupt image that is skipped, counted and named."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tests.helpers import CLI_MODULES, FORKED_CLIENT, VITKIT_MAIN, ForkedRun, descendants, differing_keys, process_state
from tests.inputs import run_main
from vitkit.cli import main
from vitkit.data.digits import load_digits_split
from vitkit.train.engine import HOLD_ENV

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its runs' figures drawn, not encoded: none read

STEPS = 50  # checkpoints every 10 steps; each test kills at a chosen step between two of them

CONFIG = """
[model]
name = "vit_ti16"
img_size = 8
patch_size = 4
in_chans = 1
width = 16
depth = 1
num_heads = 2
mlp_dim = 32
dropout = 0.1

[data]
name = "folder"
path = "{root}"
channels = 1
augment = "inception"
flip = true
randaugment = [2, 10]
random_erasing = 0.25
num_workers = 1

[optim]
name = "adamw"
lr = 3e-3
weight_decay = 0.05

[schedule]
steps = {steps}
warmup_steps = 10

[train]
batch_size = 16
log_every = 5
ckpt_every = 10
tensorboard = false
mixup = 0.2
cutmix = 1.0
"""


def make_digit_folder(root: Path, n: int = 120) -> Path:
    """root/train/<digit>/*.png (+ one corrupt file) and root/val/<digit>/*.png, 12x12 grey."""
    train, _ = load_digits_split()
    for i in range(n):
        d = root / ("train" if i < 100 else "val") / str(int(train.labels[i]))
        d.mkdir(parents=True, exist_ok=True)
        arr = (train.images[i, 0].numpy() * 255).astype(np.uint8)
        Image.fromarray(arr).resize((12, 12)).save(d / f"{i:04d}.png")
    (root / "train" / "3" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    return root


def _exit_code(out: Path, run: subprocess.CompletedProcess) -> int:
    """What `vitkit train` exits with for a finished run: 1 when it skipped unreadable images (the corrupt file);
    a run that left no result.json fails here with what it printed."""
    assert (out / "result.json").is_file(), f"exit {run.returncode}, no result.json: {(run.stdout + run.stderr)[-3000:]}"
    return 1 if json.loads((out / "result.json").read_text()).get("skipped_images") else 0


def _train_cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "vitkit.cli", "train", "--config", str(cfg), "--out", str(out),
            "--no-progress", "--threads", "1", *extra]


def _shards_of(root: Path, out: Path) -> str:
    """root packed into tar shards (`vitkit data pack`), with a corrupt member appended to the first training shard
    (packing skips unreadable files, so the shards would otherwise hold none); the [data] lines that read them."""
    import io
    import tarfile

    assert main(["data", "pack", str(root), str(out), "--shard-size", "40", "--channels", "1", "--no-progress"]) == 1
    with tarfile.open(out / "train-000000.tar", "a") as tar:
        for name, data in (("broken.png", b"\x89PNG\r\n\x1a\n not an image"), ("broken.cls", b"3")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return f'name = "shards"\npath = "{out}/train-{{000000..000002}}.tar"\ntest_path = "{out}/test-000000.tar"'


def _run_config(tmp_path: Path, source: str, extra_train: str = "") -> Path:
    """run.toml: CONFIG on the digit folder, or on the same images packed into shards; `extra_train`: more
    [train] lines."""
    root = make_digit_folder(tmp_path / "digits")
    text = CONFIG.format(root=root, steps=STEPS).replace("[train]\n", "[train]\n" + extra_train)
    if source == "shards":
        text = text.replace(f'name = "folder"\npath = "{root}"', _shards_of(root, tmp_path / "shards"))
    cfg = tmp_path / "run.toml"
    cfg.write_text(text)
    return cfg


def _wait_dead(pids: list[int], timeout: float = 60.0) -> None:
    """Wait until every pid has exited: gone, or a zombie whose threads have all exited. A zombie leader is not
    enough: its other threads (a loader worker's queue feeder, torch's) still hold the process's files, the run
    folder's lock among them, until each has exited, and a resume started then was refused; kill() only sends the
    signal."""
    deadline = time.time() + timeout
    for pid in pids:
        while time.time() < deadline:
            state = process_state(pid)
            try:
                threads = len(os.listdir(f"/proc/{pid}/task"))
            except (FileNotFoundError, ProcessLookupError):
                break
            if not state:  # gone
                break
            if state in ("Z", "X") and threads <= 1:
                break
            time.sleep(0.01)


def _kill_at_step(run: subprocess.Popen | ForkedRun, out: Path, step: int, ranks: int = 1) -> int:
    """SIGKILL `run` (a process, or one forked from the suite's preloaded interpreter) and every process it started
    once each of its `ranks` holds at `step` (the engine's $VITKIT_HOLD_AT_STEP hook: after that step's work, past its
    first checkpoint); the step of the state it left."""
    held = [out / f".held-at-{step}.rank{r}" for r in range(ranks)]
    deadline = time.time() + 300
    while not all(f.exists() for f in held) and run.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    # torchrun's workers too, and the processes they had forked (whose pids the held files name), at once
    forked = [int(f.read_text()) for f in held if f.exists() and f.read_text() != str(run.pid)]
    pids = descendants(run.pid) + [run.pid] + [p for pid in forked for p in [pid, *descendants(pid)]]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, err = run.communicate()
    code = run.returncode
    _wait_dead(pids)  # torchrun's rank 0 holds the run folder's lock until all its threads have exited
    assert code == -signal.SIGKILL, f"the run ended before it could be killed: {(err or '')[-2000:]}"
    assert all(f.exists() for f in held), f"the run never reached step {step}"
    saved_step = torch.load(out / "train_state.pt", weights_only=True)["step"]
    assert saved_step == step // 10 * 10  # the last checkpoint before the kill: steps after it are redone
    return saved_step


@pytest.mark.slow
@pytest.mark.parametrize("source,kill_at", [("folder", 17), ("shards", 34)])
def test_sigkill_and_resume_is_bitwise_exact(tmp_path: Path, source: str, kill_at: int, preloaded) -> None:  # noqa: ANN001
    cfg = _run_config(tmp_path, source)
    # the run that is killed is `python -m vitkit train` in a process of its own, forked from the suite's preloaded
    # interpreter (tests.helpers.Preloaded); the uninterrupted run (trained while the other one holds at its step)
    # and the resumed one run `vitkit train` in this process
    killed = preloaded.start(VITKIT_MAIN, *_train_cmd(cfg, tmp_path / "killed")[3:], preload=CLI_MODULES,
                             env={**os.environ, HOLD_ENV: str(kill_at)})
    full = run_main(*_train_cmd(cfg, tmp_path / "full")[3:])
    out_full = full.stdout + full.stderr
    saved_step = _kill_at_step(killed, tmp_path / "killed", kill_at)

    resumed = run_main(*_train_cmd(cfg, tmp_path / "killed", "--resume")[3:])
    assert resumed.returncode == _exit_code(tmp_path / "killed", resumed), resumed.stderr[-2000:]
    assert full.returncode == _exit_code(tmp_path / "full", full) == 1, out_full[-2000:]

    a = load_file(tmp_path / "full" / "model" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    assert differing_keys(a, b) == [], f"differs after resume from step {saved_step}"

    # the logged losses agree line by line: same data order, same augmentation, same dropout
    def losses(run: str) -> list[tuple[int, float]]:
        recs = [json.loads(ln) for ln in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in recs if "loss" in r]

    assert losses("full") == losses("killed") and len(losses("full")) == STEPS // 5
    # the corrupt file was skipped, counted and named, never crashing the run
    recs = [json.loads(ln) for ln in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    skipped = [r for r in recs if "skipped_images" in r]
    assert skipped and all("broken.png" in m for r in skipped for m in r["skipped_images"])
    assert json.loads((tmp_path / "full" / "result.json").read_text())["skipped_images"] == skipped[-1]["skipped_total"]
    assert "broken.png" in out_full or "skipped" in out_full


@pytest.mark.slow
def test_sigkill_under_two_processes_resumes_bitwise_in_one(tmp_path: Path, preloaded) -> None:  # noqa: ANN001
    """With train.world_invariant, a run on tar shards launched by torchrun with 2 processes, SIGKILLed after a
    checkpoint and resumed by 1 process, ends with the bits of an uninterrupted 1-process run (the same
    augmentation, Mixup / CutMix, dropout and corrupt member as above; one thread per process). Each process torchrun
    starts has `python -m vitkit` forked with its environment and streams from the suite's preloaded interpreter
    (tests.helpers.FORKED_CLIENT: no interpreter start-up and import of torch per rank)."""
    cfg = _run_config(tmp_path, "shards", "grad_accum = 2\nworld_invariant = true\n")
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
                sys.executable, "-c", FORKED_CLIENT, str(preloaded.socket)]
    killed = subprocess.Popen(torchrun + _train_cmd(cfg, tmp_path / "killed")[3:], env={**env, HOLD_ENV: "25"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    saved_step = _kill_at_step(killed, tmp_path / "killed", 25, ranks=2)

    full = run_main(*_train_cmd(cfg, tmp_path / "full")[3:])  # in this process: as above
    assert full.returncode == _exit_code(tmp_path / "full", full), full.stderr[-2000:]
    resumed = run_main(*_train_cmd(cfg, tmp_path / "killed", "--resume")[3:])
    assert resumed.returncode == _exit_code(tmp_path / "killed", resumed), resumed.stderr[-2000:]
    a = load_file(tmp_path / "full" / "model" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    assert differing_keys(a, b) == [], f"differs after resuming step {saved_step} in 1 process"
