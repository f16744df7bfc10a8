"""Hostile and broken input: no code runs from data, no traceback for a user's mistake, nothing corrupted.

Each test crafts the input an audit found a hole with: pickles planted wherever vitkit reads files,
decompression bombs and 16-bit / float / huge images, errors of every kind at the command line, bad
config values, training states that do not fit, torn logs, and file modes."""

from __future__ import annotations

import json
import os
import pickle
import resource
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import digits_model
from PIL import Image

import vitkit
from vitkit.cli import main
from vitkit.data.config import DataConfig
from vitkit.data.datasets import detect_kind, open_splits
from vitkit.data.preprocess import DEFAULT_MAX_PIXELS, read_image
from vitkit.train.config import load_config
from vitkit.train.run import run_experiment


class Payload:
    """Unpickling this writes the marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _png(path: Path, value: int = 128, size=(12, 12), mode: str = "L") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def _bomb_png(path: Path, side: int = 40_000) -> Path:
    """A valid PNG header announcing side x side pixels (1.6 gigapixels), with a few bytes of data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                     + chunk(b"IEND", b""))
    return path


TINY = ["model.width=16", "model.depth=1", "model.num_heads=2", "model.mlp_dim=32", "schedule.steps=3",
        "schedule.warmup_steps=1", "train.batch_size=8", "train.tensorboard=false", "data.num_workers=0",
        "train.log_every=1"]


# ----------------------------------------------------------------------------- 1. code from data
def test_payloads_planted_wherever_data_is_read_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(Payload(marker))
    # CIFAR-10 batches: every file present, the first one a payload -> refused, naming the file
    c10 = tmp_path / "c10"
    c10.mkdir()
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (c10 / f).write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}))
    (c10 / "batches.meta").write_bytes(evil)
    with pytest.raises(ValueError, match=r"batches\.meta.*refusing to unpickle posix\.system"):
        open_splits(DataConfig(**{"name": "cifar10", "path": str(c10)}))
    (c10 / "data_batch_3").write_bytes(pickle.dumps({b"data": Payload(marker), b"labels": [0]}))
    (c10 / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"c%d" % i for i in range(10)]}))
    with pytest.raises(ValueError, match=r"data_batch_3.*refusing to unpickle"):
        open_splits(DataConfig(**{"name": "auto", "path": str(c10)}))
    # a payload dressed with CIFAR's keys in the first batch, read through every command that takes --data
    (c10 / "data_batch_1").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": Payload(marker)}))
    for cmd in (["eval", "--model", "M"], ["fewshot", "--model", "M"]):
        model_dir = tmp_path / "m"
        if not model_dir.exists():
            vitkit.save_pretrained(vitkit.create_model("vit", img_size=32, patch_size=16, width=16, depth=1,
                                                       num_heads=2, mlp_dim=32, num_classes=10), model_dir)
        cmd = [str(model_dir) if a == "M" else a for a in cmd]
        assert main([*cmd, "--data", str(c10)]) == 2
    cfg = load_config("digits_pretrain", TINY + ["data.name=\"auto\"", f"data.path=\"{c10}\"", "data.channels=3",
                                                 "model.in_chans=3", "model.img_size=32", "model.patch_size=16"])
    with pytest.raises(ValueError, match="refusing to unpickle"):
        run_experiment(cfg, tmp_path / "run", progress=False)
    # an object array in a CIFAR batch is refused too (its elements could be anything)
    (c10 / "data_batch_1").write_bytes(pickle.dumps({b"data": np.array([1, "x"], dtype=object), b"labels": [0]}))
    with pytest.raises(ValueError, match=r"data_batch_1.*(refusing|Python objects)"):
        open_splits(DataConfig(**{"name": "cifar10", "path": str(c10)}))
    # checkpoints: timm .pth, an HF folder's pytorch_model.bin, a training state to resume
    (tmp_path / "evil.pth").write_bytes(evil)
    with pytest.raises(ValueError, match="never unpickles"):
        vitkit.load_pretrained(tmp_path / "evil.pth")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "vit"}))
    torch.save({"x": Payload(marker)}, hf / "pytorch_model.bin")
    with pytest.raises(ValueError, match="never unpickles"):
        vitkit.load_pretrained(hf)
    run = tmp_path / "resume"
    run.mkdir()
    torch.save({"step": 1, "model": {}, "optimizer": Payload(marker)}, run / "train_state.pt")
    cfg = load_config("digits_pretrain", TINY)
    with pytest.raises(ValueError, match=r"train_state\.pt.*never unpickles"):
        run_experiment(cfg, run, resume=True, force=True, progress=False)
    # an .npz with a pickled object array
    np.savez(tmp_path / "evil.npz", **{"embedding/kernel": np.array([Payload(marker)], dtype=object)})
    with pytest.raises(ValueError, match="never unpickles"):
        vitkit.load_pretrained(tmp_path / "evil.npz")
    # an EPS file named .png in an image folder: Pillow would hand it to Ghostscript; vitkit never opens it
    eps = tmp_path / "folder" / "a" / "x.png"
    eps.parent.mkdir(parents=True)
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    with pytest.raises(ValueError, match="cannot read image"):
        read_image(eps)
    assert not marker.exists(), "a planted payload ran"


def test_cifar_is_detected_by_content_not_by_names(tmp_path: Path) -> None:
    """A stray file named `train` or `data_batch_1` in an image folder does not make it CIFAR."""
    root = tmp_path / "imgs"
    for c in ("cat", "dog"):
        for i in range(3):
            _png(root / c / f"{i}.png", 40 * i)
    for name in ("train", "test", "meta"):
        (root / name).write_bytes(b"just some notes\n")
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (root / name).write_text("not a pickle")
    assert detect_kind(str(root)) == "folder"
    assert open_splits(DataConfig(**{"name": "auto", "path": str(root)}))["train"].classes == ["cat", "dog"]


# ----------------------------------------------------------------------------- 2. images
def test_decompression_bomb_is_skipped_and_named_with_a_configurable_limit(tmp_path: Path, monkeypatch) -> None:
    bomb = _bomb_png(tmp_path / "bomb.png")
    with pytest.raises(ValueError, match=r"bomb\.png: 40000x40000 = 1,600,000,000 pixels is over the limit"):
        read_image(bomb)
    small = _png(tmp_path / "small.png", size=(100, 100))
    assert read_image(small).shape == (3, 100, 100)
    with pytest.raises(ValueError, match="over the limit of 5,000"):
        read_image(small, max_pixels=5000)
    monkeypatch.setenv("VITKIT_MAX_IMAGE_PIXELS", "5000")
    with pytest.raises(ValueError, match="over the limit of 5,000"):
        read_image(small)
    monkeypatch.delenv("VITKIT_MAX_IMAGE_PIXELS")
    assert DEFAULT_MAX_PIXELS == 2 * Image.MAX_IMAGE_PIXELS  # Pillow's own refusal point
    # predict: the bomb is named and skipped, the other file still predicted, exit code 1
    model_dir = tmp_path / "m"
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), model_dir)
    good = _png(tmp_path / "digit.png", 200, (8, 8))
    r = subprocess.run([sys.executable, "-m", "vitkit", "predict", str(good), str(bomb), "--model", str(model_dir)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "bomb.png" in r.stderr and "over the limit" in r.stderr and r.stdout.startswith(str(good))
    # training on a folder holding the bomb: skipped, counted and named, the run finishes
    root = tmp_path / "digits"
    for i in range(20):
        _png(root / str(i % 2) / f"{i}.png", 10 * i, (8, 8))
    _bomb_png(root / "1" / "zz_bomb.png")
    cfg = load_config("digits_pretrain", TINY + ["data.name=\"folder\"", f"data.path=\"{root}\"", "data.holdout=0.2",
                                                 "data.dev_fraction=0", "train.batch_size=8"])
    res = run_experiment(cfg, tmp_path / "run", progress=False)
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert res["skipped_images"] >= 1 and any("zz_bomb.png" in m for r in recs for m in r.get("skipped_images", []))


def test_high_bit_depth_images_are_rescaled_not_clipped(tmp_path: Path) -> None:
    ramp = np.linspace(0, 65535, 64 * 64).round().astype(np.uint16).reshape(64, 64)
    Image.fromarray(ramp).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    x = read_image(tmp_path / "g16.png", channels=1)
    np.testing.assert_allclose(x[0].numpy(), ramp / 65535.0, atol=1e-6)
    assert (x == 1.0).float().mean() < 0.01  # Pillow's own 8-bit conversion made 99.5% of it white
    rgb = read_image(tmp_path / "g16.png", channels=3)
    assert rgb.shape == (3, 64, 64) and torch.equal(rgb[0], rgb[2])
    # 32-bit integer TIFF (full int32 range) and float TIFF in [0, 1]
    i32 = (ramp.astype(np.int64) * 32768).astype(np.int32)
    Image.fromarray(i32).save(tmp_path / "i32.tif")
    np.testing.assert_allclose(read_image(tmp_path / "i32.tif", 1)[0].numpy(), i32 / (2**31 - 1), atol=1e-6)
    f = (ramp / 65535.0).astype(np.float32)
    Image.fromarray(f).save(tmp_path / "f.tif")
    np.testing.assert_allclose(read_image(tmp_path / "f.tif", 1)[0].numpy(), f, atol=1e-7)


def test_huge_images_are_decoded_small(tmp_path: Path) -> None:
    """A JPEG far larger than the model's input is decoded at 1/2..1/8 scale (JPEG draft), a PNG is reduced
    by an integer factor; both stay at least the requested size and look the same after the final resize."""
    yy, xx = np.mgrid[0:3000, 0:4000]
    arr = np.stack([(xx / 16) % 256, (yy / 12) % 256, ((xx + yy) / 28) % 256], -1).astype(np.uint8)
    Image.fromarray(arr).save(tmp_path / "big.jpg", quality=95)
    Image.fromarray(arr).save(tmp_path / "big.png")
    for name in ("big.jpg", "big.png"):
        full = read_image(tmp_path / name)
        small = read_image(tmp_path / name, min_size=(224, 224))
        assert full.shape == (3, 3000, 4000)
        assert 224 <= small.shape[1] < 600 and 224 <= small.shape[2] < 800, small.shape
        pp = vitkit.PreprocessConfig(img_size=(224, 224))
        d = (pp.resize(full[None]) - pp.resize(small[None])).abs().mean().item()
        assert d < 0.02, (name, d)


def test_eval_split_images_skipped_in_training_are_named(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for split in ("train", "val"):
        for i in range(16):
            _png(root / split / str(i % 2) / f"{i}.png", 15 * i, (8, 8))
    (root / "val" / "1" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    cfg = load_config("digits_pretrain", TINY + ["data.name=\"folder\"", f"data.path=\"{root}\"", "data.dev_fraction=0",
                                                 "data.eval_split=\"test\"", "train.eval_every=3"])
    run_experiment(cfg, tmp_path / "run", progress=False)
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    named = [m for r in recs for m in r.get("eval_skipped_images", [])]
    assert named and all("zz_broken.png" in m for m in named)


# ----------------------------------------------------------------------------- 3. the CLI's error boundary
def _cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vitkit", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kw)


def _one_line_error(r: subprocess.CompletedProcess, *must: str) -> None:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-1500:]
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, r.stderr[-1500:]
    for m in must:
        assert m in errors[0], (m, errors[0])


def test_cli_errors_are_one_line_without_traceback(tmp_path: Path, monkeypatch, capsys) -> None:
    # an existing file where a run folder is wanted
    (tmp_path / "afile").write_text("x")
    _one_line_error(_cli("train", "--config", "digits_pretrain", "--out", str(tmp_path / "afile"), "--dry-run", "1"),
                    "afile", "not a folder")
    # NaN loss from an absurd learning rate
    _one_line_error(_cli("train", "--config", "digits_pretrain", "--out", str(tmp_path / "nan"), "--no-progress",
                         *[x for s in TINY + ["optim.lr=100", "optim.clip_norm=0", "schedule.steps=30"]
                           for x in ("--set", s)]), "NaN", "optim.lr")
    _one_line_error(_cli("train", "--config", "digits_pretrain", "--out", str(tmp_path / "nan2"), "--set",
                         "optim.lr=1e300"), "optim.lr must be a number in (0, 100]", "1e+300")
    # a full disk while saving (the file-size limit makes every write past 64 KiB fail with EFBIG)
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    r = _cli("demo", "--steps", "2", "--out", str(tmp_path / "full"), "--no-progress", preexec_fn=limit)
    _one_line_error(r, "could not write", "disk full")
    # permission denied and other OS errors, raised anywhere in a command
    import vitkit.commands.eval as ev

    def denied(args):
        raise PermissionError(13, "Permission denied", "/data/secret.png")

    monkeypatch.setattr(ev, "run", denied)
    assert main(["eval", "--model", "x"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "vitkit eval: error: /data/secret.png: permission denied (Permission denied)"
    # an internal failure: one line that says so, and --debug / VITKIT_DEBUG shows the traceback
    monkeypatch.setattr(ev, "run", lambda args: {}["missing"])
    assert main(["eval", "--model", "x"]) == 1
    assert "vitkit's own failure" in capsys.readouterr().err
    with pytest.raises(KeyError):
        main(["--debug", "eval", "--model", "x"])
    monkeypatch.setenv("VITKIT_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["eval", "--model", "x"])


# ----------------------------------------------------------------------------- 4. configs checked before work
@pytest.mark.parametrize("override, key", [
    ("model.num_heads=0", "num_heads"), ("model.patch_size=0", "patch_size"), ("model.in_chans=0", "in_chans"),
    ("model.width=-8", "width"), ("model.width=16.5", "width"), ("model.depth=-1", "depth"),
    ("model.img_size=0", "img_size"), ("model.mlp_dim=0", "mlp_dim"), ("model.num_classes=-1", "num_classes"),
    ("train.grad_accum=0", "train.grad_accum"), ("train.log_every=0", "train.log_every"),
    ("optim.label_smoothing=1.0", "optim.label_smoothing"), ("optim.betas=[0.9]", "optim.betas"),
    ("schedule.steps=-5", "schedule.steps"), ("schedule.decay=\"cosnie\"", "schedule.decay"),
    ("train.device=\"cuda\"", "device"), ("train.batch_size=0", "train.batch_size"),
    ("data.holdout=0", "data.holdout"), ("data.augment=\"heavy\"", "data.augment"),
    ("optim.lr=0", "optim.lr"), ("data.num_workers=-1", "data.num_workers"),
])
def test_bad_config_values_are_refused_before_any_data_is_read(tmp_path: Path, override: str, key: str) -> None:
    if "cuda" in override and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    # the data path does not exist: reading data first would raise FileNotFoundError instead. A value a section
    # checks fails when the config is built; one only the architecture can check, when the run builds it
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        cfg = load_config("digits_pretrain", TINY + ["data.name=\"folder\"", "data.path=\"/nonexistent/data\"", override])
        run_experiment(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing written either


def test_model_config_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    d = tmp_path / "m"
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), d)
    doc = json.loads((d / "config.json").read_text())
    doc["model"]["num_heads"] = 0
    (d / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"m/config\.json: num_heads must be a positive whole number, got 0"):
        vitkit.load_pretrained(d)
    (d / "config.json").write_text('{"format": "vitkit", "model": {')
    with pytest.raises(ValueError, match=r"config\.json: cannot read the checkpoint's config \(Expecting"):
        vitkit.load_pretrained(d)


# ----------------------------------------------------------------------------- 5. resume checks what it loads
def test_resume_validates_the_state_the_recipe_and_the_log(tmp_path: Path, capsys) -> None:
    cfg = load_config("digits_pretrain", TINY + ["schedule.steps=4", "train.ckpt_every=2"])
    run = tmp_path / "run"
    run_experiment(cfg, run, progress=False)
    # another recipe: named, refused; --force accepts
    other = load_config("digits_pretrain", TINY + ["schedule.steps=6", "train.ckpt_every=2", "optim.lr=0.01"])
    with pytest.raises(ValueError, match=r"another recipe \(optim\.lr: 0\.002 -> 0\.01; schedule\.steps: 4 -> 6"):
        run_experiment(other, run, resume=True, progress=False)
    # a torn last line (a kill mid-append) and a temp file left by a kill mid-write
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')
    (run / ".train_state.pt.abc123.tmp").write_bytes(b"half a checkpoint")
    res = run_experiment(other, run, resume=True, force=True, progress=False)
    assert res["steps"] == 6 and not (run / ".train_state.pt.abc123.tmp").exists()
    out = capsys.readouterr()
    assert "dropped a torn log line" in out.out + out.err
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(x) for x in lines)  # every line parses
    # another architecture: the differing tensors are named
    wide = load_config("digits_pretrain", TINY + ["schedule.steps=6", "train.ckpt_every=2", "optim.lr=0.01",
                                                  "model.width=32", "model.mlp_dim=64"])
    with pytest.raises(ValueError, match=r"weights of another architecture .*cls_token is \(1, 1, 16\), this model has "
                                         r"\(1, 1, 32\)"):
        run_experiment(wide, run, resume=True, force=True, progress=False)
    # a state missing keys
    torch.save({"step": 2, "model": {}}, run / "train_state.pt")
    with pytest.raises(ValueError, match=r"not a complete vitkit training state: missing \['optimizer'\]"):
        run_experiment(other, run, resume=True, force=True, progress=False)
    # metrics.jsonl is rewritten atomically (no temp file left, mode of a normal file)
    assert not list(run.glob(".*.tmp"))


# ----------------------------------------------------------------------------- 6. loaders
def test_loader_messages(tmp_path: Path) -> None:
    m = vitkit.create_model("vit", img_size=32, patch_size=16, width=32, depth=1, num_heads=2, mlp_dim=64,
                            num_classes=5, gelu="exact")
    state = {k.replace("pre_logits.0.", "pre_logits.fc."): v for k, v in m.state_dict().items()}
    ls = dict(state, **{"blocks.0.ls1.gamma": torch.ones(32)})  # LayerScale: a part vitkit's ViT does not have
    torch.save(ls, tmp_path / "deit3.pth")
    with pytest.raises(ValueError, match=r"deit3\.pth: unrecognised tensor\(s\) 'blocks\.0\.ls1\.gamma' \(LayerScale\)"):
        vitkit.load_pretrained(tmp_path / "deit3.pth")
    torch.save({"w": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match=r"other\.pth.*missing tensor 'patch_embed\.proj\.weight'"):
        vitkit.load_pretrained(tmp_path / "other.pth")
    (tmp_path / "obj.pth").write_bytes(pickle.dumps({"a": Payload(tmp_path / "x")}))
    with pytest.raises(ValueError) as e:
        vitkit.load_pretrained(tmp_path / "obj.pth")
    assert "weights_only=False" not in str(e.value) and "never unpickles" in str(e.value)
    # a headless model (num_classes=0, e.g. an HF ViTModel): predict and eval refuse, pointing to fewshot
    headless = tmp_path / "headless"
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, num_classes=0), headless)
    img = _png(tmp_path / "d.png", 100, (8, 8))
    for cmd in (["predict", str(img)], ["eval"]):
        r = _cli(*cmd, "--model", str(headless))
        _one_line_error(r, "no classifier head", "fewshot")


# ----------------------------------------------------------------------------- 7. files
def test_saved_files_get_the_users_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "m")
    finally:
        os.umask(old)
    for f in ("config.json", "model.safetensors"):
        assert (tmp_path / "m" / f).stat().st_mode & 0o777 == 0o640, f


def test_convert_refuses_to_overwrite(tmp_path: Path) -> None:
    src = tmp_path / "src"
    vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), src)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert main(["convert", str(src), str(tmp_path / "taken"), "--to", "hf"]) == 2
    assert main(["convert", str(src), str(src), "--to", "vitkit"]) == 2
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["keep.txt"]
    assert main(["convert", str(src), str(tmp_path / "taken"), "--to", "hf", "--overwrite"]) == 0
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"


def test_fast_jpeg_decoding_gives_pillows_pixels(tmp_path: Path, monkeypatch) -> None:
    """With simplejpeg installed, JPEGs are decoded by it: bit for bit the pixels of the Pillow path (colour, grey,
    grey read as colour), with Pillow still used where they would differ (colour read as grey, CMYK, reduced-size
    decoding); truncated files and pixel bombs are refused and named as before."""
    from vitkit.data import preprocess

    if preprocess._simplejpeg() is None:
        pytest.skip("simplejpeg is not installed")
    from skimage import data

    Image.fromarray(data.astronaut()[:300, :400]).save(tmp_path / "rgb.jpg", quality=90)
    Image.fromarray(data.camera()[:300, :400]).save(tmp_path / "grey.jpg", quality=90)
    Image.fromarray(data.astronaut()[:300, :400]).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=90)
    Image.fromarray(data.astronaut()).save(tmp_path / "big.jpg", quality=90)  # 512 px: reduced for 224 / 2
    cases = [("rgb.jpg", 3, None), ("rgb.jpg", 1, None), ("grey.jpg", 1, None), ("grey.jpg", 3, None),
             ("cmyk.jpg", 3, None), ("big.jpg", 3, (128, 128)), ("rgb.jpg", 3, (224, 224))]
    fast = {c: read_image(tmp_path / c[0], c[1], c[2]) for c in cases}
    real = preprocess._fast_jpeg
    # which cases the fast path takes (the rest fall back to Pillow)
    took = [real((tmp_path / n).read_bytes(), ch, ms, 10**9, n) is not None for n, ch, ms in cases]
    assert took == [True, False, True, True, False, False, True]
    data_ = (tmp_path / "rgb.jpg").read_bytes()
    with pytest.raises(ValueError, match="cannot read image cut.jpg"):
        real(data_[: len(data_) // 2], 3, None, 10**9, "cut.jpg")
    with pytest.raises(ValueError, match=r"x.jpg: 400x300 = 120,000 pixels is over the limit of 5,000"):
        real(data_, 3, None, 5000, "x.jpg")
    used = []
    monkeypatch.setattr(preprocess, "_fast_jpeg", lambda *a: used.append(a[1:3]) or real(*a))
    with open(tmp_path / "rgb.jpg", "rb") as f:  # a file object (a tar member) goes the same way
        assert torch.equal(read_image(f, 3, name="shard.tar:rgb.jpg"), fast[("rgb.jpg", 3, None)])
    monkeypatch.setattr(preprocess, "_simplejpeg", lambda: None)  # Pillow alone
    for c in cases:
        assert torch.equal(read_image(tmp_path / c[0], c[1], c[2]), fast[c]), c
    assert used == [(3, None)]
