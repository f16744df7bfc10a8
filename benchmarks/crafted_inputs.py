"""Crafted bad inputs through the command line, one subprocess each, and the verdict of each run: refused by name
(exit 2, one error line), skipped and named (exit 1, a `skipped:` line), ran (exit 0), hung (killed at the timeout),
or crashed (any other ending). Covers issue #39's classes: silently wrong answers, hangs and memory, data loss, errors.

    python benchmarks/crafted_inputs.py [--code PATH] [--timeout 60] [--markdown]

Cases run in this process by default (seconds in all); `--subprocess` runs each as `python -m vitkit` (`--code`: another
checkout). To compare with the code before a fix, run this file with that checkout first on PYTHONPATH. Prints one
line per case and the counts per verdict (BENCHMARKS.md "Crafted inputs").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

Case = tuple[str, str, Callable[[Path], list[str]], str]  # (name, class, argv builder, the verdict wanted)


def _model(root: Path, fmt: str = "vitkit", **kw: object) -> Path:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", **{"width": 16, "depth": 1, "num_heads": 2, "mlp_dim": 32, "img_size": 32,
                                      "patch_size": 8, "num_classes": 3, **kw})
    m.preprocess = PreprocessConfig(img_size=m.config.img_size, mean=(0.5,) * 3, std=(0.5,) * 3,
                                    labels=["a", "b", "c"][: m.config.num_classes] if m.config.num_classes == 3 else [])
    return vitkit.save_pretrained(m, root, format=fmt)


def _png(path: Path, shape: tuple[int, int] = (12, 12)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full(shape, 100, np.uint8)).save(path)
    return path


def _spoil_safetensors(f: Path, dtype: torch.dtype | None = None, value: float | None = None) -> None:
    state = load_file(f)
    key = sorted(k for k in state if "bias" in k)[-1]
    t = state[key].clone()
    if value is not None:
        t.view(-1)[0] = value
    state[key] = t.to(dtype) if dtype is not None else t
    save_file(state, str(f), metadata={"format": "pt"})


def c_int_hf(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    _spoil_safetensors(m / "model.safetensors", torch.int32)
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_bool_timm(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    _spoil_safetensors(f, torch.bool)
    return ["convert", str(f), str(d / "out"), "--to", "vitkit", "--num-heads", "2"]


def c_complex_npz(d: Path) -> list[str]:
    f = _model(d / "m.npz", "npz")
    with np.load(f) as z:
        a = {k: z[k] for k in z.files}
    a["head/bias"] = a["head/bias"].astype(np.complex64)
    np.savez(f, **a)
    (d / "m.vitkit.json").unlink()  # (a bare .npz: its sidecar would name the rewrite first)
    return ["predict", str(_png(d / "x.png")), "--model", str(f)]


def c_nan_pth(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    state = load_file(f)
    state["head.bias"][0] = float("nan")
    torch.save({"state_dict": state}, d / "m.pth")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_one_class(d: Path) -> list[str]:
    for i in range(4):
        _png(d / "data" / "cat" / f"{i}.png")
    return ["fewshot", "--model", str(_model(d / "m")), "--data", str(d / "data")]


def _gray(root: Path) -> Path:  # a 1-channel model, for the digits fewshot defaults to
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=4, in_chans=1,
                            num_classes=10)
    m.preprocess = PreprocessConfig(img_size=(16, 16), mean=(0.5,), std=(0.5,))
    return vitkit.save_pretrained(m, root)


def c_shots(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--shots", "-5"]


def c_l2(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--l2", "nan"]


def c_negative_head(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--num-classes", "-1"]


def c_three_sides(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--img-size", "32", "32", "32"]


def c_labels(d: Path) -> list[str]:
    m = _model(d / "m", num_classes=10)
    doc = json.loads((m / "config.json").read_text())
    doc["preprocess"]["labels"] = ["a", "b", "c"]
    (m / "config.json").write_text(json.dumps(doc))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_resample(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    p = m / "preprocessor_config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "resample": 99}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_sidecar(d: Path) -> list[str]:
    f = _model(d / "m.npz", "npz")
    side = json.loads((d / "m.vitkit.json").read_text())
    _model(d / "m.npz", "npz", width=32)  # another model's weights ...
    (d / "m.vitkit.json").write_text(json.dumps(side))  # ... beside the first one's sidecar (a kill between writes)
    return ["predict", str(_png(d / "x.png")), "--model", str(f)]


def c_fifo_config(d: Path) -> list[str]:
    (d / "m").mkdir()
    (d / "m" / "model.safetensors").write_bytes(b"")
    os.mkfifo(d / "m" / "config.json")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m")]


def c_zero_config(d: Path) -> list[str]:
    (d / "m").mkdir()
    (d / "m" / "model.safetensors").write_bytes(b"")
    os.symlink("/dev/zero", d / "m" / "config.json")
    return ["convert", str(d / "m"), str(d / "out"), "--to", "vitkit"]


def c_string_number(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    doc = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps({**doc, "layer_norm_eps": "tiny"}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_wide_png(d: Path) -> list[str]:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=224, patch_size=16,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(224, 224), crop_pct=0.875)
    vitkit.save_pretrained(m, d / "m")
    return ["predict", str(_png(d / "wide.png", (1, 100_000))), "--model", str(d / "m"), "--runtime", "torch"]


def c_shard_range(d: Path) -> list[str]:
    return ["eval", "--model", str(_model(d / "m")), "--data", str(d / "train-{000000..099999999}.tar")]


def c_stride0(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    state = load_file(f)
    state["pos_embed"] = torch.zeros(1, 1, 1).expand(1, 10**7, 16)
    torch.save(state, d / "m.pth")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_zip_bomb(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    torch.save(load_file(f), d / "m.pth")
    with zipfile.ZipFile(d / "m.pth", "a") as z:
        z.writestr(zipfile.ZipInfo("m/data/999"), b"\0" * (512 << 20), compress_type=zipfile.ZIP_DEFLATED)
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_huge_config(d: Path) -> list[str]:
    m = _model(d / "m")
    doc = json.loads((m / "config.json").read_text())
    doc["model"]["num_classes"] = 16_000_000
    (m / "config.json").write_text(json.dumps(doc))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_lock_link(d: Path) -> list[str]:
    (d / "notes.txt").write_text("mine")
    (d / "out").mkdir()
    os.symlink(d / "notes.txt", d / "out" / ".vitkit.lock")
    for i in range(4):
        _png(d / "src" / f"c{i % 2}" / f"{i}.png")
    return ["data", "pack", str(d / "src"), str(d / "out"), "--no-progress"]


def c_export_over(d: Path) -> list[str]:
    (d / "notes.onnx").write_text("mine")
    return ["export", str(_model(d / "m")), "--out", str(d / "notes.onnx"), "--no-check"]


def c_inspect_over(d: Path) -> list[str]:
    (d / "figs").mkdir()
    (d / "figs" / "mine.txt").write_text("mine")
    return ["inspect", "--model", str(_model(d / "m")), "--images", str(_png(d / "x.png")), "--out", str(d / "figs"),
            "--no-progress"]


def c_link_out(d: Path) -> list[str]:
    _png(d / "photos" / "a.png")
    os.symlink(_png(d / "private.png"), d / "photos" / "b.png")
    return ["predict", str(d / "photos"), "--model", str(_model(d / "m"))]


def c_sharded_hf(d: Path) -> list[str]:
    import transformers

    transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8,
        num_labels=3)).save_pretrained(d / "hf", max_shard_size="20KB")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "hf")]


def c_weightless(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    (m / "model.safetensors").unlink()
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


CASES: list[Case] = [
    ("int32 tensor, HF folder", "silently wrong", c_int_hf, "refused"),
    ("bool tensor, bare timm .safetensors", "silently wrong", c_bool_timm, "refused"),
    ("complex tensor, .npz", "silently wrong", c_complex_npz, "refused"),
    ("NaN tensor, timm .pth", "silently wrong", c_nan_pth, "refused"),
    ("one-class folder, fewshot", "silently wrong", c_one_class, "refused"),
    ("fewshot --shots -5", "silently wrong", c_shots, "refused"),
    ("fewshot --l2 nan", "silently wrong", c_l2, "refused"),
    ("convert --num-classes -1", "silently wrong", c_negative_head, "refused"),
    ("convert --img-size 32 32 32", "silently wrong", c_three_sides, "refused"),
    ("3 labels for a 10-way head", "silently wrong", c_labels, "refused"),
    ("preprocessor resample 99", "silently wrong", c_resample, "refused"),
    (".npz beside another model's sidecar", "silently wrong", c_sidecar, "refused"),
    ("FIFO as config.json", "hangs and memory", c_fifo_config, "refused"),
    ("/dev/zero as config.json", "hangs and memory", c_zero_config, "refused"),
    ("100000x1 PNG, centre-crop model", "hangs and memory", c_wide_png, "skipped"),
    ("shard range of 10^8", "hangs and memory", c_shard_range, "refused"),
    ("10 KB .pth of stride-0 views", "hangs and memory", c_stride0, "refused"),
    ("zip-bomb .pth", "hangs and memory", c_zip_bomb, "refused"),
    ("config.json asking for 16M classes", "hangs and memory", c_huge_config, "refused"),
    ("lock file symlinked to a user's file", "data loss", c_lock_link, "refused"),
    ("export onto a user's notes.onnx", "data loss", c_export_over, "refused"),
    ("inspect into a non-empty folder", "data loss", c_inspect_over, "refused"),
    ("predict folder with a link outside", "data loss", c_link_out, "refused"),
    ("layer_norm_eps: \"tiny\"", "errors", c_string_number, "refused"),
    ("HF folder without weights", "errors", c_weightless, "refused"),
    ("sharded HF save", "held checkpoints", c_sharded_hf, "ran"),
]


def _in_process(argv: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess | None:
    """`vitkit ARGV` in this process (no torch import per case: seconds for the whole set), stderr captured; None
    when it ran past `timeout` (SIGALRM interrupts a blocking open of a FIFO)."""
    import contextlib
    import io
    import signal

    from vitkit.cli import main as cli

    def hung(*_: object) -> None:
        raise TimeoutError

    err, out = io.StringIO(), io.StringIO()
    old, here = signal.signal(signal.SIGALRM, hung), os.getcwd()
    signal.alarm(max(1, int(timeout)))
    try:
        os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = cli(argv)
            except TimeoutError:
                return None
            except BaseException as e:  # noqa: BLE001 - a crash is a verdict here
                print(f"crash: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 3
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(here)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def verdict(r: subprocess.CompletedProcess | None) -> str:
    if r is None:
        return "hung"
    errors = [ln for ln in r.stderr.splitlines() if " error: " in ln]
    if r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr:
        return "refused"
    if r.returncode == 1 and "skipped:" in r.stderr and "own failure" not in r.stderr:
        return "skipped"
    if r.returncode == 0:
        return "ran"
    return "crashed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", default=None, help="with --subprocess: a vitkit checkout to run instead of this one "
                    "(in-process, put it first on PYTHONPATH instead)")
    ap.add_argument("--subprocess", action="store_true", help="one `python -m vitkit` process a case (~3 s each)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as hung")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--only", nargs="+", default=None, help="run only these classes (e.g. 'silently wrong')")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    code = str(Path(args.code).resolve()) if args.code else here
    env = {**os.environ, "PYTHONPATH": code, "HOME": tempfile.mkdtemp(prefix="vitkit-home-")}
    rows, counts = [], Counter()
    for name, group, build, want in CASES:
        if args.only and group not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            argv = build(d)
            t0 = time.perf_counter()
            if args.subprocess:
                try:
                    r = subprocess.run([sys.executable, "-m", "vitkit", *argv], capture_output=True, text=True,
                                       timeout=args.timeout, env=env, cwd=d)
                except subprocess.TimeoutExpired:
                    r = None
            else:
                r = _in_process(argv, args.timeout, d)
            v, took = verdict(r), time.perf_counter() - t0
            kept = all(p.read_bytes() == b"mine" for p in d.rglob("*") if p.name in ("notes.txt", "notes.onnx",
                                                                                     "mine.txt"))
            if not kept:
                v = "data lost"
        counts[v] += 1
        line = ([ln for ln in (r.stderr if r else "").splitlines() if "error:" in ln or "skipped:" in ln] or [""])[0]
        rows.append((group, name, want, v, took, line[:150]))
        print(f"{'ok ' if v == want else 'BAD'} {group:17s} {name:40s} {v:9s} {took:5.1f}s  {line[:110]}", flush=True)
    print(f"verdicts: {dict(counts)}; as wanted: {sum(r[2] == r[3] for r in rows)}/{len(rows)}")
    if args.markdown:
        print("\n| class | input | wanted | verdict |\n|---|---|---|---|")
        for group, name, want, v, _, _ in rows:
            print(f"| {group} | {name} | {want} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
