"""Shared test helpers: the demo's digits ViT (smaller with overrides) and a Trainer over the digits through
the one loader (`StepLoader` + `TrainTransform`), as `vitkit demo` runs it."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vitkit import distributed as dist
from vitkit.data.digits import LABELS, load_digits_split
from vitkit.data.loader import StepLoader
from vitkit.data.transforms import TrainTransform
from vitkit.models import create_model
from vitkit.models.preprocess import PreprocessConfig
from vitkit.train.config import TrainConfig
from vitkit.train.engine import Trainer

DEMO_ARCH = dict(img_size=16, patch_size=4, in_chans=1, num_classes=10, width=96, depth=4, num_heads=4, mlp_dim=192)


#: images of other sizes and aspects (h, w) for native-resolution tests: a 4:1 strip, a 1:3 portrait, a square, and
#: one smaller than a 16-patch grid of 8 px patches
NATIVE_SIZES = [(40, 160), (90, 30), (50, 50), (12, 20)]


def native_images(folder: Path, seed: int = 0) -> list[Path]:
    """PNG files of NATIVE_SIZES (random RGB pixels) in `folder`."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    files = []
    for i, (h, w) in enumerate(NATIVE_SIZES):
        files.append(folder / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(files[-1])
    return files


def tiny_labelled_vit(**overrides: Any):  # noqa: ANN201
    """A tiny ordinary ViT (32 px fixed, 8 px patches, width 32, depth 2, one register, 5 classes a-e), every
    parameter random (no zero head or token hides a wrong wiring)."""
    import torch

    m = create_model("vit", **{**dict(img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64,
                                      num_classes=5, num_registers=1), **overrides})
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    m.preprocess = PreprocessConfig(img_size=m.config.img_size, labels=list("abcde"))
    return m.eval()


def digits_model(**overrides: Any):
    """The demo's architecture (recipe digits_demo) with `overrides`, with the digits' preprocessing."""
    model = create_model("vit", **{**DEMO_ARCH, **overrides})
    model.preprocess = PreprocessConfig(img_size=model.config.img_size, mean=(0.5,), std=(0.5,), labels=list(LABELS))
    return model


#: the folder the pytest-xdist workers of this session share (`shared_root`), set by tests/suite_fixtures.py
SHARED: list[Path] = []


@functools.cache
def trained_digits_vit():  # noqa: ANN201
    """A digits ViT trained for a few hundred steps (about 90% test accuracy): a model whose answers mean something
    (cached: built once per test session; under pytest-xdist trained by the first worker that asks and saved in the
    workers' shared folder, the others load it: the same weights, bitwise)."""
    if not SHARED:
        return _train_digits_vit()
    from vitkit.formats import load_pretrained, save_pretrained

    folder = built_once(SHARED[0], "trained_digits_vit", lambda f: save_pretrained(_train_digits_vit(), f / "model"))
    return load_pretrained(folder / "model").eval()


def _train_digits_vit():  # noqa: ANN202
    import torch

    torch.manual_seed(0)
    model = digits_model(width=48, depth=2, num_heads=3, mlp_dim=96)
    train, _ = load_digits_split()
    x, y = model.preprocess(train.images), torch.from_numpy(train.labels)
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        i = torch.randint(0, len(y), (64,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def digits_test_tensors(model) -> tuple[Any, Any]:  # noqa: ANN001
    """(the 450 test digits through `model`'s preprocessing, their labels) as tensors."""
    import torch

    _, test = load_digits_split()
    pre = model.preprocess
    return pre.normalize(pre.resize(test.images)), torch.from_numpy(test.labels)


def int8_against_fp32(model, run) -> tuple[float, float, float]:  # noqa: ANN001
    """On the 450 test digits: (top-1 agreement of `run`, a runner of an exported graph, with `model`'s fp32
    answers, fp32's accuracy minus the runner's, the largest |logit difference|)."""
    import torch

    x, y = digits_test_tensors(model)
    with torch.no_grad():
        ref = model(x)
    got = run(x)
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    drop = (ref.argmax(-1) == y).float().mean().item() - (got.argmax(-1) == y).float().mean().item()
    return agree, drop, (got - ref).abs().max().item()


SMALL_VIT = dict(img_size=16, patch_size=4, in_chans=1, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5)


def random_vit(**overrides: Any):  # noqa: ANN201
    """A small ViT (SMALL_VIT with `overrides`) in eval mode with every parameter drawn from N(0, 0.2), so no
    zero-initialised head or token hides a wrong wiring."""
    import torch

    from vitkit.models.vit import VisionTransformer, ViTConfig

    torch.manual_seed(0)
    m = VisionTransformer(ViTConfig(**{**SMALL_VIT, **overrides})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m


def digits_loader(model, cfg: TrainConfig) -> StepLoader:
    """The digits training split, augmented as the demo does (small affine jitter, no flips), this rank's shard."""
    train, _ = load_digits_split()
    tf = TrainTransform(model.preprocess, "affine", flip=False)
    return StepLoader(train, cfg.batch_size, tf, cfg.seed, rank=dist.rank(), world=dist.world_size())


def digits_trainer(model, cfg: TrainConfig, out: str | Path, **kw: Any) -> Trainer:
    return Trainer(model, cfg, digits_loader(model, cfg), out, **{"progress": False, **kw})


def differing_keys(a: dict, b: dict) -> list[str]:
    """The keys of two state dicts (the same keys) whose tensors are not equal bit for bit."""
    import torch

    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    return [k for k in a if not torch.equal(a[k], b[k])]


def assert_resumes_bitwise(ds, tmp_path: Path) -> None:  # noqa: ANN001
    """8 steps on `ds` (one loader worker, affine + RandAugment) end with the same weights, bit for bit, when
    the run is stopped and saved at step 4 and resumed from that state."""
    import torch

    def trainer(out: Path) -> Trainer:
        torch.manual_seed(0)
        model = digits_model(width=32, depth=1, num_heads=2, mlp_dim=64)
        cfg = TrainConfig(steps=8, batch_size=32, lr=1e-3, warmup_steps=2, log_every=2, ckpt_every=4, seed=1,
                          tensorboard=False)
        tf = TrainTransform(model.preprocess, "affine", flip=False, randaugment=(2, 5))
        return Trainer(model, cfg, StepLoader(ds, 32, tf, 1, num_workers=1), out, progress=False)

    whole = trainer(tmp_path / "a")
    whole.fit()
    first = trainer(tmp_path / "b")
    first.fit(stop_at=4)
    first.save_state()
    resumed = trainer(tmp_path / "b")
    resumed.load_state()
    resumed.fit()
    assert differing_keys(whole.model.state_dict(), resumed.model.state_dict()) == []


def assert_read_once_per_epoch(ds) -> None:  # noqa: ANN001
    """2 ranks x 2 loader workers, global batch 64: every sample of an epoch is read exactly once (the last
    partial batch of an epoch is dropped, as always in training)."""
    from vitkit.data.transforms import EvalTransform

    seen: list[int] = []
    for rank in range(2):
        loader = StepLoader(ds, 64, EvalTransform(digits_model().preprocess), seed=3, rank=rank, world=2,
                            num_workers=2)
        for b in loader.iterate(0, loader.steps_per_epoch):
            seen.extend(b.indices)
    n = loader.steps_per_epoch * 64
    assert len(seen) == n and len(set(seen)) == n  # nobody reads a sample twice, nothing of the epoch is missed


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/`pid`/stat after the command's name (state, parent, ...); [] for a process that has ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def process_state(pid: int) -> str:
    """`pid`'s state letter from /proc (R, S, D, Z: a zombie has ended, ...); "" for a process that is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else ""


def parent_of(pid: int) -> int:
    """`pid`'s parent's pid, from /proc (0 for a process that has ended)."""
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def descendants(pid: int) -> list[int]:
    """The processes started by `pid`, and theirs (from /proc: torchrun puts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        children.setdefault(parent_of(int(proc.name)), []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def shared_root(tmp_path_factory) -> Path:  # noqa: ANN001
    """The folder every pytest-xdist worker of this session shares (the basetemp's parent, as xdist documents;
    without xdist the session's basetemp)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def built_once(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `root`/`name` that `build(folder)` fills, built once per test session and shared by every
    pytest-xdist worker (`root`: `shared_root`): the first to ask builds it under a file lock, the others wait for
    it and read it. Readers must not write into it."""
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not done.is_file():
            if folder.exists():  # half built by a worker whose build failed: built again
                shutil.rmtree(folder)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def check_reproduction(out: Path, names: Sequence[str], scale: str = "smoke") -> dict[str, dict]:
    """What a `vitkit reproduce` folder `out` shows of each experiment of `names`: its result at `scale` with the
    paper's claim, its figures drawn (over 5 kB each) and its section in SUMMARY.md; returns the results."""
    results = {}
    for name in names:
        res = results[name] = json.loads((out / name / "result.json").read_text())
        assert res["scale"] == scale and res["claim"]
        for fig in res["figures"]:
            assert (out / name / fig).stat().st_size > 5000
    summary = (out / "SUMMARY.md").read_text()
    assert all(f"## {n}" in summary for n in names)
    return results


def _not_laid_out(engine, fig) -> None:  # noqa: ANN001
    """A layout engine's pass (`Figure.tight_layout`'s, a constrained layout's at draw time), skipped."""


def figures_drawn_not_encoded(monkeypatch, laid_out: bool = True) -> None:  # noqa: ANN001
    """For a test that reads no figure file: matplotlib's `Figure.savefig` draws every artist of the figure as laid
    out (`draw_without_rendering`: ticks and their labels, legends, images resampled) but rasterises and encodes no
    PNG and writes none: about half a figure's CPU. The tests that read the files keep the real savefig
    (tests/test_cli_e2e.py's curves.png, tests/inspect/test_inspect.py's CLI figures, tests/reproduce/test_summary.py's
    redraw). `laid_out=False`, for a test that reads no figure in memory either: the layout passes are skipped too
    (tight / constrained: a text-extent pass over every axes, the costlier half of what is left), the artists are
    drawn where they were made; tests/reproduce/test_summary.py's `_drawn`, which reads where legends were placed,
    keeps them."""
    monkeypatch.setattr("matplotlib.figure.Figure.savefig", lambda fig, *args, **kwargs: fig.draw_without_rendering())
    if not laid_out:
        figures_not_laid_out(monkeypatch)


def figures_not_laid_out(monkeypatch) -> None:  # noqa: ANN001
    """For a test that reads its figure files only as files (each written, over a size: `check_reproduction`):
    matplotlib's layout passes (tight / constrained: a text-extent pass over every axes) skipped; every artist is
    still drawn, rasterised and encoded, where it was made."""
    monkeypatch.setattr("matplotlib.layout_engine.TightLayoutEngine.execute", _not_laid_out)
    monkeypatch.setattr("matplotlib.layout_engine.ConstrainedLayoutEngine.execute", _not_laid_out)


# The interpreter `Preloaded` starts: it imports what each request names (once, for every later request too), then
# forks a child per request, which runs the request's code as `python -c CODE ARGS` would run it (sys.argv, a fresh
# __main__, the environment and folder it was given, its stdout / stderr into files or onto the standard streams a
# client sent, an uncaught exception printed with its traceback and exit code 1, SystemExit's code, then the
# interpreter's exit: non-daemon threads joined, atexit hooks run). A request is a line of JSON on its stdin (from
# `Preloaded`; the answers on its stdout: `{"id", "pid"}` when forked, `{"id", "exit"}` when reaped, as subprocess's
# returncode: -N for signal N) or on a connection to its Unix socket (argv[1]) with the client's stdin, stdout and
# stderr (FORKED_CLIENT; the answers on that connection).
_ZYGOTE = r"""
import importlib, json, os, select, signal, socket, sys
sys.path[0] = os.getcwd()  # `python -c`'s '' (the folder it started in), fixed before a child changes folder
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen()
def send(to, msg):
    line = (json.dumps(msg) + "\n").encode()
    if to is None:
        os.write(1, line)
    else:
        try:
            to.sendall(line)
        except OSError:  # the client is gone
            pass
def child(req, fds):
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (wake_r, wake_w, listener.fileno(), *[c.fileno() for c in conns],
                   *[to.fileno() for _, to in running.values() if to is not None]):
            os.close(fd)
        if fds:
            for fd, sent in zip((0, 1, 2), fds):
                os.dup2(sent, fd)
        else:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import atexit, builtins, tempfile, threading, traceback, types
        tempfile.tempdir = None  # (read from TMPDIR again)
        sys.argv = ["-c", *req["args"]]
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        try:
            exec(compile(req["code"], "<string>", "exec"), main.__dict__)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException as e:  # printed as the interpreter prints it: from the code's own frames
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
def fork(req, to, fds=()):
    for name in req["preload"]:
        try:
            importlib.import_module(name)
        except Exception:  # (the child's own import of it fails, and says why)
            pass
    pid = os.fork()
    if pid == 0:
        child(req, fds)
    for fd in fds:
        os.close(fd)
    running[pid] = (req.get("id"), to)
    send(to, {"id": req.get("id"), "pid": pid})
running, conns, buf = {}, [], b""
while True:
    ready = select.select([0, wake_r, listener, *conns], [], [])[0]
    if wake_r in ready:
        os.read(wake_r, 4096)
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        key, to = running.pop(pid)
        send(to, {"id": key, "exit": os.waitstatus_to_exitcode(status)})
        if to is not None:
            to.close()
    if listener in ready:
        conns.append(listener.accept()[0])
    for conn in [c for c in conns if c in ready]:  # a client's one request: then only its answers on the connection
        conns.remove(conn)
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        if msg:
            fork(json.loads(msg), conn, fds)
        else:  # the client left before its request
            conn.close()
    if 0 in ready:
        data = os.read(0, 1 << 20)
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            fork(json.loads(line), None)
for pid in running:
    os.kill(pid, signal.SIGKILL)
"""

#: what a `vitkit` command imports by the time it trains: the optimizer's torch._dynamo, the curves' matplotlib
CLI_MODULES = ("torch._dynamo", "vitkit.cli", "matplotlib.pyplot")
#: `python -m vitkit`, as code for `Preloaded` (its arguments: the request's)
VITKIT_MAIN = "import runpy\nrunpy.run_module('vitkit', run_name='__main__', alter_sys=True)"


# `python -c FORKED_CLIENT SOCKET ARGS`: `python -m vitkit ARGS` forked from the `Preloaded` interpreter listening on
# SOCKET, with this process's environment, folder and standard streams; this process passes SIGTERM and SIGINT on to
# it and exits as it exits (128 + N for signal N, as a shell reports it). A launcher (torchrun) that starts processes
# of its own starts these: each a Python start-up without imports, the command forked with the launcher's environment.
FORKED_CLIENT = f"CODE, PRELOAD = {VITKIT_MAIN!r}, {list(CLI_MODULES)!r}" + """
import json, os, signal, socket, sys, time
conn = socket.socket(socket.AF_UNIX)
for _ in range(500):  # (the interpreter binds its socket as it starts)
    try:
        conn.connect(sys.argv[1])
        break
    except (FileNotFoundError, ConnectionRefusedError):
        time.sleep(0.01)
req = {"code": CODE, "args": sys.argv[2:], "preload": PRELOAD, "env": dict(os.environ), "cwd": os.getcwd()}
socket.send_fds(conn, [json.dumps(req).encode()], [0, 1, 2])
answers = conn.makefile()
pid = json.loads(answers.readline())["pid"]
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda n, _: os.kill(pid, n))
code = json.loads(answers.readline())["exit"]
sys.exit(code if code >= 0 else 128 - code)
"""


class ForkedRun:
    """A `Preloaded` child, read as a `subprocess.Popen` (pid, poll, wait, returncode, communicate)."""

    def __init__(self, server: Preloaded, key: int, logs: Path) -> None:
        self._server, self._key, self._logs = server, key, logs
        self.pid: int = server._reply(key, "pid")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server._reply(self._key, "exit", block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server._reply(self._key, "exit", timeout=timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return tuple(self.output(name) for name in ("stdout", "stderr"))

    def output(self, stream: str = "stderr") -> str:
        """What the child has written to `stream` ("stdout" or "stderr") so far."""
        return (self._logs / stream).read_text(errors="replace")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Preloaded:
    """An interpreter that imports once what the processes forked from it need (torch, torch._dynamo, vitkit.cli...),
    for the tests whose claim needs a process of its own (an allocator's state, a file-size limit, a SIGKILL, two
    jobs at once) but not an interpreter start-up and the imports of torch each (~3-6 CPU s a process): each child is
    forked from it, never from pytest (its threads), and runs its code as `python -c CODE ARGS` does (`_ZYGOTE`).
    What a library reads from the environment at import (HOME, HF_HUB_OFFLINE) is the interpreter's: a test of that
    starts a fresh process. One per pytest process, started when first asked for (tests/suite_fixtures.py's
    `preloaded`) and stopped at the session's end: the CPU of its children is counted there (benchmarks/suite_cputime.py).
    """

    def __init__(self) -> None:
        self._logs = Path(tempfile.mkdtemp(prefix="vk-forked-"))
        #: the Unix socket FORKED_CLIENT's processes connect to
        self.socket = self._logs / "sock"
        self._proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(self.socket)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
        self._replies: dict[tuple[int, str], int] = {}
        self._cond = threading.Condition()
        self._count = 0
        threading.Thread(target=self._read, daemon=True, name="preloaded-replies").start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            msg = json.loads(line)
            with self._cond:
                self._replies[msg["id"], "pid" if "pid" in msg else "exit"] = msg.get("pid", msg.get("exit"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _reply(self, key: int, what: str, block: bool = True, timeout: float | None = None) -> int | None:
        with self._cond:
            if block and not self._cond.wait_for(lambda: (key, what) in self._replies or self._proc.poll() is not None,
                                                 timeout):
                raise subprocess.TimeoutExpired(f"forked run {key}", timeout or 0)
            if (key, what) not in self._replies and block:
                raise RuntimeError(f"the preloaded interpreter ended (exit {self._proc.returncode})")
            return self._replies.get((key, what))

    def start(self, code: str, *args: str, preload: Sequence[str] = (), env: dict | None = None,
              cwd: Path | None = None) -> ForkedRun:
        """`python -c CODE ARGS` (in `cwd`, with `env`: os.environ's by default), forked once `preload` is imported."""
        with self._cond:
            self._count += 1
            key = self._count
        logs = self._logs / str(key)
        logs.mkdir()
        req = {"id": key, "code": code, "args": list(args), "preload": list(preload),
               "env": dict(os.environ if env is None else env), "cwd": str(cwd or os.getcwd()),
               "stdout": str(logs / "stdout"), "stderr": str(logs / "stderr")}
        self._proc.stdin.write((json.dumps(req) + "\n").encode())
        self._proc.stdin.flush()
        return ForkedRun(self, key, logs)

    def run(self, code: str, *args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
        """`start` to its end: `subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)`'s
        result."""
        run = self.start(code, *args, **kw)
        out, err = run.communicate(timeout)
        return subprocess.CompletedProcess(["-c", code, *args], run.returncode, out, err)

    def vitkit(self, *args: str, setup: str = "", preload: Sequence[str] = CLI_MODULES,
               **kw: Any) -> subprocess.CompletedProcess:
        """`python -m vitkit ARGS` (`run`), after the lines `setup` (a limit, a signal's handler)."""
        return self.run(f"{setup}\n{VITKIT_MAIN}", *args, preload=preload, **kw)

    def stop(self) -> None:
        """End the interpreter (its children still running are killed) and reap it."""
        try:
            with contextlib.suppress(BrokenPipeError):  # (an interpreter that ended early)
                self._proc.stdin.close()
            self._proc.wait()
        finally:
            shutil.rmtree(self._logs, ignore_errors=True)
