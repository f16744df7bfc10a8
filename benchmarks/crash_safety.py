"""Crash safety and hostile files, measured: SIGKILLs at random moments (checkpoints written every step, so
many land mid-write), a full disk, then `--resume`, each compared bitwise with an uninterrupted run;
malicious pickles planted in every place vitkit reads a file, none of which may run; and (round 2) crafted inputs
that used to hang or exhaust memory, each in its own process under a time limit with its peak memory, and SIGKILLs
right after a run's final line, in the middle of `data pack` and of `convert --overwrite`.

    .venv/bin/python benchmarks/crash_safety.py [--kills 14] [--seed 0] [--kill-points 6] [--round2-only]

Writes benchmarks/results/crash_safety.json and prints a summary for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bounded_input import CASES as BOUNDED_CASES  # the child script beside this one
from safetensors.torch import load_file

import vitkit
from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.train.config import load_config
from vitkit.train.run import run_experiment

RECIPE = ["model.width=16", "model.depth=1", "model.num_heads=2", "model.mlp_dim=32", "schedule.steps=200",
          "schedule.warmup_steps=4", "train.batch_size=32", "train.ckpt_every=1", "train.log_every=5",
          "train.tensorboard=false", "data.num_workers=0", "model.dropout=0.1"]


def _cmd(out: Path, *extra: str) -> list[str]:
    sets = [x for s in RECIPE for x in ("--set", s)]
    return [sys.executable, "-m", "vitkit", "train", "--config", "digits_pretrain", "--out", str(out), "--no-progress",
            "--threads", "1", *sets, *extra]


def _same(a: Path, b: Path) -> bool:
    x, y = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _losses(run: Path) -> list:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r]


def _seconds(cmd: list[str]) -> float:
    """How long one uninterrupted run of `cmd` takes (to place the kills of the next runs inside it)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def _killed_after(cmd: list[str], seconds: float) -> bool:
    """Start `cmd`, SIGKILL it after `seconds`; whether the kill found it still running."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    p.send_signal(signal.SIGKILL)
    return p.wait() == -signal.SIGKILL


def kills(root: Path, n: int, rng: random.Random) -> list[dict]:
    ref = root / "ref"
    subprocess.run(_cmd(ref), check=True, capture_output=True)
    duration = _seconds(_cmd(root / "timing"))
    rows = []
    for i in range(n):
        out = root / f"kill{i}"
        killed = _killed_after(_cmd(out), rng.uniform(0.25, 0.95) * duration)
        temps = [x.name for x in out.glob(".*.tmp")] if out.exists() else []
        state = out / "train_state.pt"
        step = torch.load(state, weights_only=True)["step"] if state.exists() else None
        r = subprocess.run(_cmd(out, "--resume") if step is not None else _cmd(out, "--overwrite"),
                           capture_output=True, text=True)
        rows.append({"kill": i, "killed_mid_run": killed, "resumed_from_step": step, "temp_files_left": temps,
                     "resume_rc": r.returncode, "bitwise": r.returncode == 0 and _same(out, ref),
                     "log_equal": r.returncode == 0 and _losses(out) == _losses(ref)})
        print(rows[-1], flush=True)
    return rows


def full_disk(root: Path) -> dict:
    ref = root / "ref"
    out = root / "full"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))  # the checkpoint no longer fits

    r = subprocess.run(_cmd(out), capture_output=True, text=True, preexec_fn=limit)
    one_line = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    state = out / "train_state.pt"
    resumed = subprocess.run(_cmd(out, "--resume") if state.exists() else _cmd(out, "--overwrite"),
                             capture_output=True, text=True)
    return {"rc": r.returncode, "message": one_line[0] if one_line else r.stderr[-300:],
            "traceback": "Traceback" in r.stderr, "state_after_failure": state.exists(),
            "resume_rc": resumed.returncode, "bitwise": resumed.returncode == 0 and _same(out, ref)}


class Payload:
    def __init__(self, fn, arg) -> None:  # noqa: ANN001
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def pickles(root: Path) -> dict:
    """Payload callables x every place a file is read; the marker must never be written."""
    import builtins
    import subprocess as sp

    marker = root / "pwned"
    cmd = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').write('x')"
    payloads = [Payload(os.system, cmd), Payload(sp.getoutput, cmd), Payload(builtins.exec, code),
                Payload(builtins.eval, code), Payload(os.popen, cmd), Payload(sp.call, cmd.split()),
                Payload(builtins.__import__, "antigravity")]
    refused, ran, total = 0, 0, 0
    places = []

    def place(name: str, build, read) -> None:  # noqa: ANN001
        nonlocal refused, total
        for k, pl in enumerate(payloads):
            d = root / f"{name}{k}"
            d.mkdir()
            path = build(d, pl)
            total += 1
            try:
                read(path)
            except (ValueError, FileNotFoundError):
                refused += 1
        places.append(name)

    def cifar(d: Path, pl) -> Path:  # noqa: ANN001
        for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (d / f).write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": pl}))
        return d

    def meta(d: Path, pl) -> Path:  # noqa: ANN001
        for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (d / f).write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}))
        (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": pl}))
        return d

    def pth(d: Path, pl) -> Path:  # noqa: ANN001
        (d / "m.pth").write_bytes(pickle.dumps({"patch_embed.proj.weight": pl}))
        return d / "m.pth"

    def torch_pth(d: Path, pl) -> Path:  # noqa: ANN001
        torch.save({"w": pl}, d / "m.pt")
        return d / "m.pt"

    def hf(d: Path, pl) -> Path:  # noqa: ANN001
        (d / "config.json").write_text(json.dumps({"model_type": "vit"}))
        torch.save({"w": pl}, d / "pytorch_model.bin")
        return d

    def npz(d: Path, pl) -> Path:  # noqa: ANN001
        np.savez(d / "m.npz", **{"embedding/kernel": np.array([pl], dtype=object)})
        return d / "m.npz"

    def state(d: Path, pl) -> Path:  # noqa: ANN001
        torch.save({"step": 1, "model": {}, "optimizer": pl}, d / "train_state.pt")
        return d

    cfg = load_config("digits_pretrain", RECIPE)
    place("cifar_batch", cifar, lambda p: open_splits(DataConfig(name="auto", path=str(p))))
    place("cifar_meta", meta, lambda p: open_splits(DataConfig(name="cifar10", path=str(p))))
    place("timm_pickle", pth, vitkit.load_pretrained)
    place("timm_torch_save", torch_pth, vitkit.load_pretrained)
    place("hf_bin", hf, vitkit.load_pretrained)
    place("npz_object_array", npz, vitkit.load_pretrained)
    place("train_state", state, lambda p: run_experiment(cfg, p, resume=True, force=True, progress=False))
    ran = int(marker.exists())
    return {"files": total, "refused_with_a_message": refused, "payload_ran": ran, "places": places,
            "payloads": [f"{p.fn.__module__}.{p.fn.__name__}" for p in payloads]}


# Round 2: crafted inputs that used to hang vitkit or exhaust memory, each run in its own process under a time
# limit (benchmarks/bounded_input.py); the child reports whether the input was refused, how long it took and its
# peak memory (ru_maxrss).


def bounded(root: Path, limit_s: float = 60.0) -> list[dict]:
    """Each crafted input in its own process: refused, in how many seconds, with what peak memory."""
    rows = []
    for case in BOUNDED_CASES:
        d = root / case
        d.mkdir()
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, str(Path(__file__).with_name("bounded_input.py")), str(d), case],
                               capture_output=True, text=True,
                               timeout=limit_s)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"case": case, "outcome": f"crashed: {r.stderr[-200:]}"}
        except subprocess.TimeoutExpired:
            row = {"case": case, "outcome": f"HUNG (killed after {limit_s:g} s)"}
        row["process_seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        print(row, flush=True)
    return rows


def kill_points(root: Path, tries: int, rng: random.Random) -> dict:
    """SIGKILLs at the points round 2 fixed: right after a run's final test line, in the middle of `data pack`,
    and in the middle of `convert --overwrite`. A resumed run must log exactly what an uninterrupted one does;
    a killed pack must be refused or complete; a killed convert must leave the old or the new checkpoint."""
    ref = root / "ref"
    subprocess.run(_cmd(ref), check=True, capture_output=True)
    end = []
    for i in range(tries):
        out = root / f"end{i}"
        p = subprocess.Popen(_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while p.poll() is None:  # wait for the final test line, then kill at once
            log = out / "metrics.jsonl"
            if log.exists() and '"split": "test"' in log.read_text():
                p.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        killed = p.wait() == -signal.SIGKILL
        r = subprocess.run(_cmd(out, "--resume"), capture_output=True, text=True)
        end.append({"killed": killed, "resume_rc": r.returncode,
                    "log_equal": r.returncode == 0 and _lines(out) == _lines(ref),
                    "temp_files_left": [x.name for x in out.glob(".*.tmp")]})
    packs = []

    def pack_cmd(out: Path) -> list[str]:
        return [sys.executable, "-m", "vitkit", "data", "pack", "digits", str(out), "--shard-size", "50",
                "--channels", "1", "--no-progress"]

    pack_s = _seconds(pack_cmd(root / "pack_timing"))
    for i in range(tries):
        out = root / f"pack{i}"
        killed = _killed_after(pack_cmd(out), rng.uniform(0.5, 0.95) * pack_s)
        try:
            n = len(open_splits(DataConfig(name="auto", path=str(out), channels=1))["train"])
            verdict = f"complete ({n} train samples)"
        except (ValueError, FileNotFoundError) as e:
            verdict = "refused: " + str(e).split(": ", 1)[-1][:80]
        packs.append({"killed_mid_pack": killed, "read_back": verdict})
    converts = []
    src_a, src_b = root / "ca", root / "cb"
    a, b = vitkit.create_model("vit_b16", num_classes=10), vitkit.create_model("vit_b16", num_classes=10)  # 350 MB
    torch.nn.init.normal_(b.head.weight)
    vitkit.save_pretrained(a, src_a)
    vitkit.save_pretrained(b, src_b)
    convert = [sys.executable, "-m", "vitkit", "convert", str(src_b)]
    convert_s = _seconds([*convert, str(root / "conv_timing"), "--to", "hf"])
    for i in range(tries):
        dst = root / f"conv{i}"
        subprocess.run([sys.executable, "-m", "vitkit", "convert", str(src_a), str(dst), "--to", "hf"], check=True,
                       capture_output=True)
        # python and torch start first: the writes come last
        killed = _killed_after([*convert, str(dst), "--to", "hf", "--overwrite"], rng.uniform(0.4, 1.0) * convert_s)
        head = vitkit.load_pretrained(dst).head.weight
        which = "old" if torch.equal(head, a.head.weight) else "new" if torch.equal(head, b.head.weight) else "MIXED"
        converts.append({"killed_mid_convert": killed, "checkpoint": which,
                         "temp_folders_left": [x.name for x in root.glob(f".conv{i}.*.tmp")]})
    return {"end_of_run": end, "mid_pack": packs, "mid_convert": converts}


def _lines(run: Path) -> list:
    return [{k: v for k, v in r.items() if k != "img_per_s"}
            for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-points", type=int, default=6, help="SIGKILLs at each round-2 kill point")
    ap.add_argument("--round2-only", action="store_true", help="only the round-2 payloads and kill points")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "b").mkdir()
        (root / "kp").mkdir()
        round2 = {"bounded": bounded(root / "b"), "kill_points": kill_points(root / "kp", args.kill_points, rng)}
        print(round2["kill_points"], flush=True)
        if args.round2_only:
            out = Path(__file__).parent / "results" / "crash_safety_round2.json"
            out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **round2}, indent=2) + "\n")
            return 0
        (root / "p").mkdir()
        doc = {"date": time.strftime("%Y-%m-%d"), "pickles": pickles(root / "p")}
        print(doc["pickles"], flush=True)
        (root / "k").mkdir()
        doc["kills"] = kills(root / "k", args.kills, rng)
        doc["full_disk"] = full_disk(root / "k")
        print(doc["full_disk"], flush=True)
    doc.update(round2)
    out = Path(__file__).parent / "results" / "crash_safety.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    k = doc["kills"]
    print(f"SIGKILLs: {sum(r['killed_mid_run'] for r in k)}/{len(k)} killed mid-run, "
          f"{sum(r['bitwise'] for r in k)}/{len(k)} resumed bitwise, {sum(r['log_equal'] for r in k)} logs equal; "
          f"pickles: {doc['pickles']['refused_with_a_message']}/{doc['pickles']['files']} refused, "
          f"{doc['pickles']['payload_ran']} ran; full disk: {doc['full_disk']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
