"""Hostile and faulty input, round 2: nothing of the user's is lost, nothing hangs or blows up, nothing is read
that was not asked for. Each test builds the crafted input an audit found a hole with; hangs and blow-ups are
bounded here by a timeout or a memory measurement, so a regression fails instead of stalling CI."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.data.cifar import safe_unpickle
from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.data.folders import image_folder, list_file
from vitkit.data.preprocess import load_image, read_image
from vitkit.data.shards import ShardDataset, check_tar_headers
from vitkit.formats import save_pretrained
from vitkit.utils.files import FolderLock, read_regular_file

TINY = ["--set", "model.width=16", "--set", "model.depth=1", "--set", "model.num_heads=2", "--set",
        "model.mlp_dim=32", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
        "train.batch_size=8", "--set", "train.tensorboard=false", "--set", "data.num_workers=0"]


def _folder(root: Path, n: int = 12, classes: int = 3) -> Path:
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / f"c{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (10, 10), dtype=np.uint8)).save(d / f"{i:03d}.png")
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- 1. never destroy the user's data
def test_export_never_overwrites_its_source(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = tmp_path / "ckpt" / "model.bin"  # a checkpoint named as OpenVINO names its weights
    src.parent.mkdir()
    src.write_bytes(b"the user's only copy of the weights")
    assert main(["export", str(src), "--format", "openvino"]) == 2
    assert "never replaces its input" in capsys.readouterr().err
    assert src.read_bytes() == b"the user's only copy of the weights"
    assert main(["export", str(src), "--format", "onnx", "--out", str(tmp_path / "ckpt" / "model.bin.onnx"),
                 "--no-check"]) == 2  # not a checkpoint vitkit reads, but nothing else was written or lost either
    assert src.read_bytes() == b"the user's only copy of the weights"
    # a vitkit folder holding a file that an OpenVINO export would write over
    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    (folder / "model.bin").write_bytes(b"user data")
    assert main(["export", str(folder), "--format", "openvino"]) == 2
    assert (folder / "model.bin").read_bytes() == b"user data"


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_pack_refuses_a_destination_overlapping_its_source(tmp_path: Path, where: str, capsys) -> None:  # noqa: ANN001
    src = _folder(tmp_path / "data" / "src")
    before = _tree(tmp_path / "data")
    dest = {"same": src, "inside": src / "shards", "contains": tmp_path / "data"}[where]
    assert main(["data", "pack", str(src), str(dest), "--overwrite", "--no-progress"]) == 2
    assert "is, holds or lies inside the source" in capsys.readouterr().err
    assert _tree(tmp_path / "data") == before


def test_pack_of_shards_onto_themselves_keeps_them(tmp_path: Path) -> None:
    src = _folder(tmp_path / "src")
    assert main(["data", "pack", str(src), str(tmp_path / "s"), "--channels", "1", "--no-progress"]) == 0
    before = _tree(tmp_path / "s")
    assert main(["data", "pack", str(tmp_path / "s"), str(tmp_path / "s"), "--overwrite", "--no-progress"]) == 2
    assert main(["data", "pack", str(tmp_path / "s" / "train-*.tar"), str(tmp_path / "s"), "--overwrite",
                 "--no-progress"]) == 2
    assert _tree(tmp_path / "s") == before


def test_overwrite_removes_only_what_vitkit_wrote(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]
    assert main(args) == 0
    assert main([*args, "--overwrite"]) == 0  # a run's own files (model/, metrics, ...) are replaced
    (out / "model" / "notes.txt").write_text("my notes")  # a user's file in a folder named model/
    assert main([*args, "--overwrite"]) == 2
    assert "files vitkit did not write (notes.txt)" in capsys.readouterr().err
    assert (out / "model" / "notes.txt").read_text() == "my notes" and (out / "model" / "config.json").is_file()
    (out / "model" / "notes.txt").unlink()
    (out / "tb").mkdir()
    (out / "tb" / "plan.md").write_text("mine")
    assert main([*args, "--overwrite"]) == 2
    assert (out / "tb" / "plan.md").read_text() == "mine" and (out / "model" / "model.safetensors").is_file()


def test_a_run_folder_and_a_pack_destination_are_locked_while_in_use(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    with FolderLock(out, "run folder"):  # another job holds it (the lock is per open file, as across processes)
        assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]) == 2
        err = capsys.readouterr().err
        assert f"in use by another vitkit job (pid {os.getpid()})" in err
        assert not (out / "run_config.json").exists()
        dest = tmp_path / "shards"
        with FolderLock(dest, "pack destination"):
            assert main(["data", "pack", str(_folder(tmp_path / "src")), str(dest), "--no-progress"]) == 2
            assert f"pid {os.getpid()}" in capsys.readouterr().err
            assert not list(dest.glob("*.tar"))
    assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]) == 0


def test_two_train_jobs_started_together_one_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "vitkit", "train", "--config", "digits_pretrain", "--out", str(out), "--no-progress",
           "--threads", "1", *TINY]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in results)
    assert codes == [0, 2], results
    loser = next(err for c, err in results if c == 2)
    assert "in use by another vitkit job" in loser or "already holds a run" in loser
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines if "loss" in json.loads(x)] == sorted(
        {json.loads(x)["step"] for x in lines if "loss" in json.loads(x)})  # one writer: no interleaved steps


# ----------------------------------------------------------------------------- 2. bounded work for bounded input
def _pickle_bytes(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def test_cifar_pickle_bombs_are_refused_quickly(tmp_path: Path) -> None:
    laughs = bytearray(b"]q\x00")  # one list, then 60 lists each holding the previous one twice: 2^60 leaves
    for i in range(60):
        laughs += b"(h" + bytes([i]) + b"h" + bytes([i]) + b"lq" + bytes([i + 1]) + b"0"
    laughs += b"}(C\x04datah" + bytes([60]) + b"u"
    (tmp_path / "laughs").write_bytes(_pickle_bytes(bytes(laughs)))
    wide = bytearray(b"]q\x00(" + b"h\x00" * 1000 + b"lq\x01(" + b"h\x01" * 1000 + b"lq\x02")
    wide += b"}(C\x04datah\x02u"  # depth 3, but one 1000-list shared 1000 times: 10^6 values from 4 KB
    (tmp_path / "wide").write_bytes(_pickle_bytes(bytes(wide)))
    (tmp_path / "deep").write_bytes(_pickle_bytes(b"}(C\x04data" + b"(" * 200_000 + b"l" * 200_000 + b"u"))
    for name, match in (("laughs", "nested over|referenced twice"), ("wide", "referenced twice"),
                        ("deep", "nested over")):
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=match):
            safe_unpickle(tmp_path / name)
        assert time.perf_counter() - t0 < 5, name


def _pax_bomb(path: Path, size: int) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("a.cls")
        info.pax_headers = {"comment": "x" * size}
        info.size = 1
        tar.addfile(info, io.BytesIO(b"0"))
    return path


def test_tar_shards_with_hostile_headers_are_refused_before_tarfile_parses_them(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="an extended header of 1,000,0.. bytes"):
        ShardDataset(str(_pax_bomb(tmp_path / "pax.tar", 1_000_000)))
    assert time.perf_counter() - t0 < 5
    check_tar_headers(_pax_bomb(tmp_path / "small.tar", 200))  # an ordinary PAX header passes
    # a GNU sparse member announcing 3 GB of label in a tiny file
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("x.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"0"))
    raw = bytearray(buf.getvalue())
    raw[156:157] = b"S"
    raw[148:156] = b" " * 8
    raw[148:155] = f"{sum(raw[:512]):06o}\0".encode()
    (tmp_path / "sparse.tar").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="sparse member"):
        ShardDataset(str(tmp_path / "sparse.tar"))


def _shard(path: Path, members: dict[str, bytes], end: bool = True) -> Path:
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT)
    for name, data in members.items():
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()  # before close(): no end-of-archive blocks yet
    tar.close()
    path.write_bytes(buf.getvalue() if end else raw)
    return path


def _png_bytes(value: int = 100) -> bytes:
    b = io.BytesIO()
    Image.new("L", (8, 8), value).save(b, format="PNG")
    return b.getvalue()


def test_shard_labels_and_truncation_are_refused_by_name(tmp_path: Path) -> None:
    png = _png_bytes()
    good = {"a.png": png, "a.cls": b"0", "b.png": png, "b.cls": b"1"}
    assert len(ShardDataset(str(_shard(tmp_path / "ok.tar", good)), channels=1)) == 2
    for bad, match in ((b"-100", "'-100' is not a class index"), (b"0_1", "'0_1' is not a class index")):
        with pytest.raises(ValueError, match=match):
            ShardDataset(str(_shard(tmp_path / "cls.tar", {**good, "b.cls": bad})), channels=1)
    for label in ("1.9", "true", "-1", "1e999"):
        members = {"a.png": png, "a.json": f'{{"label": {label}}}'.encode()}
        with pytest.raises(ValueError, match="a.json: the label .* is not a class index"):
            ShardDataset(str(_shard(tmp_path / "json.tar", members)), channels=1)
    with pytest.raises(ValueError, match="a label of 5,000 bytes"):
        ShardDataset(str(_shard(tmp_path / "big.tar", {**good, "b.cls": b"0" * 5000})), channels=1)
    with pytest.raises(ValueError, match="without its end-of-archive block"):  # cut at a member boundary
        ShardDataset(str(_shard(tmp_path / "cut.tar", good, end=False)), channels=1)
    cut = tmp_path / "cut2.tar"
    cut.write_bytes((tmp_path / "ok.tar").read_bytes()[:1100])  # cut inside a member
    with pytest.raises(ValueError, match="runs past the end of the file|end-of-archive"):
        ShardDataset(str(cut), channels=1)
    (tmp_path / "classes.json").write_text('["cat", "dog", "cat"]')
    with pytest.raises(ValueError, match="class names appear twice: cat"):
        ShardDataset(str(tmp_path / "ok.tar"), channels=1)
    (tmp_path / "classes.json").write_text('["cat"]')
    with pytest.raises(ValueError, match="1 class names, but the labels go up to 1"):
        ShardDataset(str(tmp_path / "ok.tar"), channels=1)


def test_an_interrupted_or_changed_pack_is_refused(tmp_path: Path) -> None:
    src = _folder(tmp_path / "src")
    assert main(["data", "pack", str(src), str(tmp_path / "p"), "--shard-size", "4", "--channels", "1",
                 "--no-progress"]) == 0
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert sum(manifest["samples"].values()) == 12 and len(manifest["shards"]) == 4
    assert len(open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "p"), "channels": 1}))["train"]) == 10
    last = tmp_path / "p" / "train-000002.tar"
    last.write_bytes(last.read_bytes()[:-1024])  # a truncated copy
    with pytest.raises(ValueError, match="train-000002.tar: .* bytes, the manifest says"):
        open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "p"), "channels": 1}))
    (tmp_path / "p" / "manifest.json").unlink()  # as a pack killed before its end leaves it
    with pytest.raises(ValueError, match="no manifest.json, so its `vitkit data pack` did not finish"):
        open_splits(DataConfig(**{"name": "auto", "path": str(tmp_path / "p"), "channels": 1}))


def test_paths_that_are_not_regular_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    listing = tmp_path / "list.txt"
    listing.write_text(f"/dev/zero 0\n{fifo} 1\n")
    ds = list_file(listing, channels=1)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="/dev/zero: it is a device, not a regular file"):
        ds.get(0)
    with pytest.raises(ValueError, match="pipe.png: it is a FIFO, not a regular file"):
        ds.get(1)
    with pytest.raises(ValueError, match="it is a FIFO"):
        ds.raw(1)
    assert time.perf_counter() - t0 < 5
    big = tmp_path / "big.png"
    big.write_bytes(_png_bytes() + b"\0" * 4096)
    with pytest.raises(ValueError, match="bytes is over the limit of 1,049,...|over the limit"):
        read_regular_file(big, 1024, "image")
    with pytest.raises(ValueError, match="over the limit"):
        read_image(big, 1, max_pixels=1)  # 8 bytes a pixel + 1 MiB: the file is checked before it is read


def test_a_label_far_beyond_the_others_is_refused_not_expanded(tmp_path: Path) -> None:
    png = tmp_path / "a.png"
    png.write_bytes(_png_bytes())
    (tmp_path / "list.txt").write_text(f"{png} 0\n{png} 300000000\n")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="the labels jump \\(max 300000000, but only 2 distinct"):
        list_file(tmp_path / "list.txt", channels=1)
    (tmp_path / "list.txt").write_text(f"{png} 0\n{png} 99999999999999999999999\n")
    with pytest.raises(ValueError, match="too large to be a class index"):
        list_file(tmp_path / "list.txt", channels=1)
    with pytest.raises(ValueError, match="the labels jump"):
        ShardDataset(str(_shard(tmp_path / "j.tar", {"a.png": _png_bytes(), "a.cls": b"0", "b.png": _png_bytes(),
                                                     "b.cls": b"299999999"})), channels=1)
    assert time.perf_counter() - t0 < 5


def _png_header_only(path: Path, side: int, bit_depth: int) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", side, side, bit_depth, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def test_a_high_bit_depth_image_counts_its_bytes_against_the_limit(tmp_path: Path) -> None:
    # 13000 x 13000 16-bit grey: under the default pixel limit (179M) in pixels, over it in samples of 2 bytes
    f = _png_header_only(tmp_path / "deep.png", 13_000, 16)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="169,000,000 pixels of 2 bytes a sample \\(mode I.*\\), counted as 338,000,000, is over the limit"):
        read_image(f, 3)
    assert time.perf_counter() - t0 < 2
    _png_header_only(tmp_path / "ok.png", 13_000, 8)  # the same pixels at 8 bits stay under the byte limit
    with pytest.raises(ValueError) as e:
        read_image(tmp_path / "ok.png", 1)  # (its data is cut short: unreadable, but not for its size)
    assert "over the limit" not in str(e.value)


def test_16_bit_pgm_honours_its_maxval(tmp_path: Path) -> None:
    for maxval in (65535, 1000):
        a = np.array([[0, maxval // 2], [maxval, maxval // 4]])
        (tmp_path / "p5.pgm").write_bytes(f"P5 2 2 {maxval}\n".encode() + a.astype(">u2").tobytes())
        (tmp_path / "p2.pgm").write_text(f"P2 2 2 {maxval}\n" + " ".join(map(str, a.ravel())))
        for name in ("p5.pgm", "p2.pgm"):
            x = read_image(tmp_path / name, 1)[0]
            torch.testing.assert_close(x, torch.tensor(a / maxval, dtype=torch.float32), atol=2e-3, rtol=0)


def test_thread_count_and_pixel_limit_are_checked_up_front(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    img = tmp_path / "x.png"
    img.write_bytes(_png_bytes())
    assert main(["predict", str(img), "--model", str(folder), "--threads", "100000"]) == 2
    assert f"--threads must be a whole number from 1 to {os.cpu_count()}" in capsys.readouterr().err
    assert main(["predict", str(img), "--model", str(folder), "--max-pixels", "0"]) == 2
    assert "pixel limit must be >= 1" in capsys.readouterr().err
    monkeypatch.setenv("VITKIT_MAX_IMAGE_PIXELS", "abc")
    assert main(["eval", "--model", str(folder), "--data", str(_folder(tmp_path / "data"))]) == 2
    assert "VITKIT_MAX_IMAGE_PIXELS='abc' is not a whole number" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 3. read only what was asked for
def test_symlinks_out_of_an_image_folder_are_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png_bytes())
    (root / "c0" / "leak.png").symlink_to(secret)
    with pytest.raises(ValueError, match="leak.png is a symlink to .*secret.png, outside the data folder"):
        image_folder(root, 1)
    (root / "c0" / "leak.png").unlink()
    (root / "c0" / "inside.png").symlink_to(root / "c1" / "001.png")  # a link inside the folder is fine
    outside = tmp_path / "elsewhere"
    _folder(outside, n=3, classes=1)
    (root / "c9").symlink_to(outside / "c0", target_is_directory=True)
    with pytest.raises(ValueError, match="c9 is a symlink to .*elsewhere/c0, outside the data folder"):
        image_folder(root, 1)
    (root / "c9").unlink()
    assert len(image_folder(root, 1)[0]) == 13


def test_hf_dataset_paths_resolve_inside_the_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png_bytes(7))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "inside.png").write_bytes(_png_bytes(9))
    rows = {"image": [{"bytes": None, "path": str(secret)}, {"bytes": None, "path": "../secret.png"},
                      {"bytes": None, "path": "inside.png"}], "label": [0, 1, 0]}
    feats = datasets.Features({"image": datasets.Image(decode=False), "label": datasets.ClassLabel(names=["a", "b"])})
    import pyarrow.parquet as pq

    pq.write_table(datasets.Dataset.from_dict(rows, features=feats).data.table, tmp_path / "hf" / "d.parquet")
    cfg = {"name": "hf", "path": str(tmp_path / "hf" / "d.parquet"), "channels": 1, "hf_cache": str(tmp_path / "c"),
           "holdout": 0.0}
    from vitkit.data.hfdatasets import HFImageDataset

    ds = HFImageDataset(cfg["path"], channels=1, cache_dir=cfg["hf_cache"])
    for i in (0, 1):
        with pytest.raises(ValueError, match="lies outside the dataset's folder"):
            ds.get(i)
    assert ds.get(2)[0].mul(255).round().max().item() == 9
    assert main(["data", "pack", cfg["path"], str(tmp_path / "out"), "--channels", "1", "--no-progress"]) == 1
    packed = b"".join(p.read_bytes() for p in (tmp_path / "out").glob("*.tar"))
    assert _png_bytes(7) not in packed and _png_bytes(9) in packed


def test_checkpoint_and_config_bombs_are_refused_before_anything_is_built(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import zipfile

    from vitkit.formats.npz import check_npz_sizes

    bomb = tmp_path / "bomb.npz"  # one member that unpacks to 16 GB of zeros, a few MB on disk
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False, "shape": (4 << 30,)})
        with z.open("embedding/kernel.npy", "w", force_zip64=True) as f:
            f.write(hdr.getvalue())
            chunk = b"\0" * (64 << 20)
            for _ in range(2):  # (only 128 MB written: the header's claim is what is checked)
                f.write(chunk)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="announces shape \\(4294967296,\\) float32 \\(17,179,869,312 bytes\\)"):
        check_npz_sizes(bomb)
    with pytest.raises(ValueError, match="unpack to 134,217,856 bytes, over the limit of 1,000"):
        check_npz_sizes(bomb, limit=1000)
    assert time.perf_counter() - t0 < 10
    text = tmp_path / "notes.npz"
    text.write_text("just text")
    with pytest.raises(ValueError, match="not an .npz archive .* another file type") as e:
        torch_free = __import__("vitkit").load_pretrained(text)
        del torch_free
    assert "allow_pickle" not in str(e.value)
    folder = tmp_path / "nested"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    (folder / "model.safetensors").write_bytes(b"")
    assert main(["predict", str(tmp_path / "x.png"), "--model", str(folder)]) == 2
    assert "nested too deep" in capsys.readouterr().err
    from vitkit.models.vit import ViTConfig

    t0 = time.perf_counter()
    for key, value in (("depth", 100_000), ("depth", 10_000), ("width", 10**7), ("num_classes", 10**9)):
        with pytest.raises(ValueError, match=f"{key} must be at most"):
            ViTConfig(**{key: value, "num_heads": 1})
    with pytest.raises(ValueError, match="sanity bound"):
        ViTConfig(depth=1000, width=16384, num_heads=16, mlp_dim=65536)
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("override, match", [
    ("model.depth=10000", "depth must be at most 1,024"),
    ("data.randaugment=[1000000, 10]", "data.randaugment\\[0\\] must be at most 16"),
    ("data.glyph_images=1000000000", "data.glyph_images = 1,000,000,000 images .* over the"),
    ("data.crop_pct=0.0001", "data.crop_pct must be 0 \\(no crop\\) or in \\[0.05, 1\\]"),
])
def test_run_config_bounds_are_checked_in_moments(tmp_path: Path, override: str, match: str, capsys) -> None:  # noqa: ANN001
    t0 = time.perf_counter()
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "r"), "--set", override]) == 2
    assert __import__("re").search(match, capsys.readouterr().err)
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "r" / "run_config.json").exists()


# ----------------------------------------------------------------------------- 4. no silent wrong results
def test_non_finite_or_foreign_weights_and_preprocessing_are_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import vitkit
    from vitkit.formats.native import CONFIG_NAME, WEIGHTS_NAME

    model = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    good = tmp_path / "good"
    save_pretrained(model, good)
    from safetensors.torch import load_file, save_file

    weights = load_file(good / WEIGHTS_NAME)
    for name, value in (("nan", float("nan")), ("inf", float("inf"))):
        bad = tmp_path / name
        save_pretrained(model, bad)
        w = dict(weights)
        w["head.weight"] = w["head.weight"].clone()
        w["head.weight"][0, 0] = value
        save_file(w, str(bad / WEIGHTS_NAME))
        with pytest.raises(ValueError, match="'head.weight' holds 1 non-finite value"):
            vitkit.load_pretrained(bad)
    for dtype in (torch.int32, torch.bool, torch.complex64):
        w = dict(weights)
        w["head.bias"] = w["head.bias"].to(dtype)
        save_file(w, str(tmp_path / "typed.safetensors"))
        save_pretrained(model, tmp_path / "typed")
        (tmp_path / "typed.safetensors").replace(tmp_path / "typed" / WEIGHTS_NAME)
        with pytest.raises(ValueError, match=f"'head.bias' is {str(dtype)}"):
            vitkit.load_pretrained(tmp_path / "typed")
    for std in ("NaN", "0.0"):
        doc = json.loads((good / CONFIG_NAME).read_text())
        doc["preprocess"]["std"] = [float(std)]
        save_pretrained(model, tmp_path / "std")
        (tmp_path / "std" / CONFIG_NAME).write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="every std a finite number > 0"):
            vitkit.load_pretrained(tmp_path / "std")
    img = tmp_path / "x.png"
    img.write_bytes(_png_bytes())
    from vitkit.evaluate import check_finite

    with pytest.raises(FloatingPointError, match="non-finite logits .* for 1 of the inputs"):
        check_finite(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]), "logits")
    assert main(["predict", str(img), "--model", str(good), "--output", str(tmp_path / "p.jsonl")]) == 0
    for line in (tmp_path / "p.jsonl").read_text().splitlines():
        json.loads(line)  # strict JSON (no bare NaN)


def test_a_hostile_training_state_is_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]
    assert main(args) == 0
    state = torch.load(out / "train_state.pt", weights_only=True)
    for change, match in ((lambda s: s.update(step=10**18), "step 1000000000000000000 is not a step of this run"),
                          (lambda s: s["model"].update({"head.weight": s["model"]["head.weight"].to(torch.int8)}),
                           "'head.weight' is torch.int8")):
        st = {**state, "model": dict(state["model"])}
        change(st)
        torch.save(st, out / "train_state.pt")
        assert main([*args, "--resume"]) == 2
        assert __import__("re").search(match, capsys.readouterr().err)


def test_a_finished_run_resumed_changes_nothing_and_the_final_lines_are_written_once(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]
    assert main(args) == 0
    log = (out / "metrics.jsonl").read_bytes()
    assert main([*args, "--resume"]) == 0
    assert "this run already finished" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == log
    (out / "result.json").unlink()  # as a SIGKILL right after the final test line leaves it
    assert main([*args, "--resume"]) == 0
    assert (out / "metrics.jsonl").read_bytes() == log  # the final evaluation logged once, the same bytes
    (out / ".model.killed.tmp").mkdir()  # a model folder being written when a SIGKILL came
    (out / "result.json").unlink()
    assert main([*args, "--resume"]) == 0
    assert not list(out.glob(".*.tmp"))


def test_a_resume_on_changed_data_is_refused_unless_forced(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    data = _folder(tmp_path / "data", n=40, classes=2)
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY,
            "--set", f'data.path="{data}"',
            "--set", 'data.name="folder"', "--set", "data.channels=1", "--set", "model.img_size=8",
            "--set", "model.patch_size=4"]
    assert main(args) == 0
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(data / "c0" / "new.png")
    assert main([*args, "--resume"]) == 2
    assert __import__("re").search(r"the training data changed since this state was saved \((\d+ examples then, \d+ now|the same number of "
                                   r"examples, but other files, sizes or labels)\)",
                                   capsys.readouterr().err)
    assert main([*args, "--resume", "--force"]) == 0


def test_num_classes_below_the_data_is_refused_before_the_run_folder_is_written(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    args = ["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY]
    assert main([*args, "--set", "model.num_classes=3"]) == 2
    assert "model.num_classes = 3, but the data has 10 classes" in capsys.readouterr().err
    assert not (out / "run_config.json").exists()
    assert main(args) == 0  # no --overwrite needed after the refusal


def test_a_checkpoint_folder_is_replaced_as_a_whole(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import vitkit
    import vitkit.formats as formats

    a = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    b = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    torch.nn.init.normal_(b.head.weight)
    b.preprocess.labels = [f"other{i}" for i in range(10)]
    for fmt in ("vitkit", "hf", "timm"):
        dest = tmp_path / fmt
        save_pretrained(a, dest, format=fmt)
        (dest / "notes.txt").write_text("mine")
        before = _tree(dest)
        real = formats.SAVERS[fmt]

        def killed(model, out, real=real):  # noqa: ANN001, ANN202 - writes the weights, then dies
            real(model, out)
            raise KeyboardInterrupt("killed between the writes")

        monkeypatch.setitem(formats.SAVERS, fmt, killed)
        with pytest.raises(KeyboardInterrupt):
            save_pretrained(b, dest, format=fmt)
        assert _tree(dest) == before  # the old checkpoint, whole (and the user's file)
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # (cleaned up on the way out)
        (tmp_path / f".{fmt}.stale.tmp").mkdir()  # as a SIGKILL mid-write leaves it
        monkeypatch.setitem(formats.SAVERS, fmt, real)
        save_pretrained(b, dest, format=fmt)
        assert (dest / "notes.txt").read_text() == "mine"
        assert not (tmp_path / f".{fmt}.stale.tmp").exists()  # the next write of the folder removes it
        torch.testing.assert_close(vitkit.load_pretrained(dest).head.weight, b.head.weight)


# ----------------------------------------------------------------------------- 5. the error boundary
@pytest.mark.parametrize("override, match", [
    ('train.bf16="yes"', "bf16 must be true or false"),
    ('train.compile="banana"', "compile must be true, false or a torch.compile backend"),
    ("train.seed=1e14", "train.seed must be a whole number"),
    ("train.seed=100000000000000", "train.seed must be at most 4,294,967,295"),
    ("optim.lr=1e300", "optim.lr must be a number in \\(0, 100\\]"),
    ("model.width=" + "[" * 5000 + "]" * 5000, "nested too deep|model.width"),
])
def test_user_mistakes_exit_2_naming_the_key_before_any_file_is_written(tmp_path: Path, override: str, match: str,
                                                                        capsys) -> None:  # noqa: ANN001
    assert main(["train", "--config", "digits_pretrain", "--out", str(tmp_path / "r"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(match, err) and "vitkit's own failure" not in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_broken_npz_files_are_user_errors(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    (tmp_path / "x.png").write_bytes(_png_bytes())
    for name, data in (("empty.npz", b""), ("cut.npz", b"PK\x03\x04" + b"\0" * 20), ("arr.npz", None)):
        f = tmp_path / name
        if data is None:
            np.save(tmp_path / "arr.npy", np.zeros(3))
            (tmp_path / "arr.npy").replace(f)
        else:
            f.write_bytes(data)
        assert main(["predict", str(tmp_path / "x.png"), "--model", str(f)]) == 2, name
        err = capsys.readouterr().err
        assert name in err and "allow_pickle" not in err and "own failure" not in err, err
    del folder


def test_a_loader_worker_error_is_one_line_naming_the_original_error(capsys) -> None:  # noqa: ANN001
    from torch.utils.data._utils import ExceptionWrapper

    import vitkit.commands.eval as ev

    def failing(args):  # noqa: ANN001, ANN202 - what torch raises in the main process for a worker's error
        try:
            raise ValueError("cannot read image /data/a.png: broken data stream")
        except ValueError:
            ExceptionWrapper(where="in DataLoader worker process 0").reraise()

    mp = pytest.MonkeyPatch()
    mp.setattr(ev, "run", failing)
    try:
        assert main(["eval", "--model", "x"]) == 2
    finally:
        mp.undo()
    err = capsys.readouterr().err.strip()
    assert err == ("vitkit eval: error: ValueError: cannot read image /data/a.png: broken data stream (caught "
                   "valueerror in dataloader worker process 0)"), err
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- a timm user's habits (round 2)
def test_timm_names_keep_their_resolution_and_gelu_and_timm_keywords_mean_the_same() -> None:
    import vitkit

    m = vitkit.create_model("vit_base_patch16_384", num_classes=0)
    assert m.config.img_size == (384, 384) and m.config.gelu == "exact" and m.config.grid_size == (24, 24)
    assert vitkit.create_model("vit_tiny_patch16_224").config.gelu == "exact"
    assert vitkit.create_model("ViT-Ti/16").config.gelu == "tanh"  # the paper's names: the original code's GELU
    m = vitkit.create_model("vit_tiny_patch16_224", drop_path_rate=0.1, drop_rate=0.2, attn_drop_rate=0.05,
                            global_pool="avg", class_token=False, in_chans=1, num_classes=7, img_size=32)
    c = m.config
    assert (c.drop_path, c.dropout, c.attn_dropout, c.pooling, c.in_chans, c.num_classes, c.img_size) == (
        0.1, 0.2, 0.05, "gap", 1, 7, (32, 32))
    for kw, match in ((dict(pretrained=True), "downloads no weights; load a file you have with vitkit.load_pretrained"),
                      (dict(pos_embed="rope"), "unknown keyword 'pos_embed'"),
                      (dict(global_pool="avg"), "beside a class token is not a model vitkit builds")):
        with pytest.raises(ValueError, match=match):
            vitkit.create_model("vit_tiny_patch16_224", **kw)
    for name, match in (("vit_base_patch16_224_in21k", "without further suffixes"),
                        ("vit_base_patch16_224.augreg_in21k", "names pretrained weights")):
        with pytest.raises(ValueError, match=match):
            vitkit.create_model(name)


def test_integer_images_get_vitkits_own_message() -> None:
    m = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    with pytest.raises(ValueError, match="expected normalised float images, got a torch.uint8 tensor"):
        m(torch.zeros(1, 1, 16, 16, dtype=torch.uint8))


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    from PIL import ImageOps

    a = np.zeros((200, 300, 3), np.uint8)
    a[:20, :50] = 255
    for orient in (3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = orient
        f = tmp_path / f"o{orient}.jpg"
        Image.fromarray(a).save(f, exif=exif.tobytes(), quality=95)
        want = np.asarray(ImageOps.exif_transpose(Image.open(f)).convert("RGB"), np.float32) / 255
        got = read_image(f, 3).permute(1, 2, 0).numpy()
        assert got.shape == want.shape and np.abs(got - want).max() == 0, orient
        small = read_image(f, 3, min_size=(50, 50))  # reduced decoding keeps the turned size >= min_size
        assert small.shape[1] >= 50 and small.shape[2] >= 50 and (small.shape[1] > small.shape[2]) == (orient != 3)


def test_eval_scores_a_folder_without_splits_whole(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    model = digits_model(depth=1, width=16, num_heads=2, mlp_dim=32)
    model.preprocess.labels = ["c0", "c1", "c2"] + [f"x{i}" for i in range(7)]
    save_pretrained(model, folder)
    data = _folder(tmp_path / "data", n=30, classes=3)
    (data / "c3").mkdir()  # an empty class folder is named
    with pytest.warns(UserWarning, match="class folder\\(s\\) c3 hold no image files"):
        assert main(["eval", "--model", str(folder), "--data", str(data)]) == 2  # c3 is no class of the model
    (data / "c3").rmdir()
    assert main(["eval", "--model", str(folder), "--data", str(data)]) == 0
    assert "scored 30 images, all of it (it has no test split of its own)" in capsys.readouterr().out
    assert main(["eval", "--model", str(folder), "--data", str(data), "--split", "test"]) == 0
    assert "its test split (a holdout vitkit carved" in capsys.readouterr().out


def test_demo_into_an_existing_folder_names_only_its_own_flags(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "result.json").write_text("{}")
    assert main(["demo", "--out", str(tmp_path / "d"), "--steps", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "vitkit demo --overwrite" in err and "--resume" not in err


def test_formats_without_a_place_for_preprocessing_carry_it_beside_or_inside(tmp_path: Path) -> None:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(32, 32), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                                    labels=["cat", "dog", "eel"], crop_pct=0.875)
    for out in (tmp_path / "m.npz", tmp_path / "folder"):
        f = save_pretrained(m, out, format="npz")
        assert vitkit.load_pretrained(f).preprocess == m.preprocess  # ImageNet mean/std and labels kept
    (tmp_path / "m.vitkit.json").unlink()
    bare = vitkit.load_pretrained(tmp_path / "m.npz")  # an .npz from elsewhere: the documented default, stated
    assert bare.preprocess.mean == (0.5, 0.5, 0.5) and not bare.preprocess.labels
    assert "an .npz stores no preprocessing" in bare.config.extra["assumed"]["preprocess"]
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from vitkit.export import export_onnx, export_openvino, exported_preprocess, quantize_int8

    onnx_file = export_onnx(m, tmp_path / "m.onnx")
    assert exported_preprocess(onnx_file) == m.preprocess
    assert exported_preprocess(quantize_int8(onnx_file, tmp_path / "m.int8.onnx")) == m.preprocess
    try:
        import openvino  # noqa: F401
    except ImportError:
        pass
    else:
        assert exported_preprocess(export_openvino(onnx_file, tmp_path / "m.xml")) == m.preprocess
    import onnx

    proto = onnx.load(str(onnx_file))
    del proto.metadata_props[:]
    onnx.save(proto, str(tmp_path / "other.onnx"))
    with pytest.warns(UserWarning, match="holds no preprocessing"):
        assert exported_preprocess(tmp_path / "other.onnx") is None


# ----------------------------------------------------------------------------- same file, same answer (HF)
def _photo_files(root: Path) -> list[Path]:
    """Non-square, large, small, grey, RGBA and EXIF-rotated files made from scikit-image's photos."""
    skd = pytest.importorskip("skimage.data")
    root.mkdir()
    coffee, chelsea, astro = skd.coffee(), skd.chelsea(), skd.astronaut()
    files = []
    f = root / "wide.jpg"
    Image.fromarray(coffee).save(f, quality=92)  # 600 x 400
    files.append(f)
    f = root / "large.png"  # 2048 x 2048: far larger than the model, where reduced decoding could act
    Image.fromarray(astro).resize((2048, 2048), Image.BICUBIC).save(f)
    files.append(f)
    f = root / "small.png"
    Image.fromarray(chelsea).resize((20, 13), Image.BILINEAR).save(f)
    files.append(f)
    f = root / "grey.png"
    Image.fromarray(chelsea).convert("L").save(f)
    files.append(f)
    rgba = Image.fromarray(chelsea).convert("RGBA")
    alpha = np.full(rgba.size[::-1], 255, np.uint8)
    alpha[:, : alpha.shape[1] // 2] = 0  # half transparent
    rgba.putalpha(Image.fromarray(alpha))
    f = root / "rgba.png"
    rgba.save(f)
    files.append(f)
    exif = Image.Exif()
    exif[0x0112] = 6
    f = root / "rotated.jpg"
    Image.fromarray(coffee).save(f, exif=exif.tobytes(), quality=92)
    files.append(f)
    return files


def test_hf_folder_predictions_from_files_match_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from PIL import ImageOps

    import vitkit

    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 patch_size=8, image_size=32, num_labels=6)
    torch.manual_seed(0)
    hf = transformers.ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        hf.classifier.weight.normal_(0, 1.0)  # logits that move with the input
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    proc = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=mean, image_std=std,
                                          resample=2)
    hf.save_pretrained(tmp_path / "hf")
    proc.save_pretrained(tmp_path / "hf")
    files = _photo_files(tmp_path / "img")
    model = vitkit.load_pretrained(tmp_path / "hf")
    assert model.preprocess.mean == tuple(mean) and model.preprocess.std == tuple(std)
    assert main(["predict", *map(str, files), "--model", str(tmp_path / "hf"), "--topk", "6", "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    got = {Path(r["path"]).name: dict(zip(r["labels"], r["probs"]))
           for r in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())}
    for f in files:
        im = ImageOps.exif_transpose(Image.open(f)).convert("RGB")  # transformers' load_image
        ref_in = torch.from_numpy(proc(im, return_tensors="np")["pixel_values"])
        ours_in = model.preprocess.normalize(load_image(model.preprocess, f)[None])
        assert ours_in.shape == ref_in.shape
        d = (ours_in - ref_in).abs()  # resampling noise: HF rounds the resized image to uint8, vitkit does not
        assert d.mean() < 0.01 and d.max() < 0.1, (f.name, float(d.mean()), float(d.max()))
        with torch.no_grad():
            ref = hf(pixel_values=ref_in).logits.softmax(-1)[0]
        for i, p in enumerate(ref.tolist()):
            assert abs(got[f.name][cfg.id2label[i]] - p) < 0.01, (f.name, i, got[f.name][cfg.id2label[i]], p)


TIMM_FIXTURE = Path(__file__).parent / "fixtures" / "timm_preprocess"  # tests/reference/make_timm_preprocess_reference.py


def test_timm_hub_folder_predictions_from_files_match_timms_own_pipeline(tmp_path: Path) -> None:
    """The same files through `vitkit predict` and through timm's resolve_data_config + create_transform (bicubic,
    crop_pct 0.875, centre crop of the shorter side resized to 36 px): the same inputs within resampling noise
    (timm's torchvision resizes uint8 PIL images, vitkit floats) and the same probabilities within 0.01."""
    import vitkit

    ref = json.loads((TIMM_FIXTURE / "reference.json").read_text())
    inputs = np.load(TIMM_FIXTURE / "inputs.npz", allow_pickle=False)
    model = vitkit.load_pretrained(TIMM_FIXTURE / "hub")
    pre = model.preprocess
    assert (pre.crop_pct, pre.crop_mode, pre.interpolation, pre.mean) == (0.875, "center", "bicubic",
                                                                          (0.485, 0.456, 0.406))
    files = sorted((TIMM_FIXTURE / "images").iterdir())
    assert len(files) == len(ref["probs"]) == 7
    for f in files:
        ours = pre.normalize(load_image(pre, f)[None])[0]
        theirs = torch.from_numpy(inputs[f.name])
        assert ours.shape == theirs.shape, f.name
        d = (ours - theirs).abs() * torch.tensor(pre.std).view(-1, 1, 1)  # on the [0, 1] pixel scale
        assert d.mean() < 0.01 and d.max() < 0.1, (f.name, float(d.mean()), float(d.max()))
    assert main(["predict", *map(str, files), "--model", str(TIMM_FIXTURE / "hub"), "--topk", "6", "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    for row in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines()):
        got = dict(zip(row["labels"], row["probs"]))
        want = ref["probs"][Path(row["path"]).name]
        assert max(abs(got[str(i)] - p) for i, p in enumerate(want)) < 0.01, (row["path"], got, want)
        assert row["labels"][0] == str(int(np.argmax(want)))


def test_a_non_square_photo_with_crop_pct_is_centre_cropped_not_squashed() -> None:
    from vitkit.models.preprocess import PreprocessConfig

    x = torch.rand(1, 3, 400, 600)
    pre = PreprocessConfig(img_size=(224, 224), crop_pct=0.9, interpolation="bilinear")
    # timm: the shorter side to floor(224 / 0.9) = 248 (so 248 x 372), then the centre 224 x 224
    want = torch.nn.functional.interpolate(x, size=(248, 372), mode="bilinear", antialias=True, align_corners=False)
    want = want.clamp(0, 1)[..., 12:236, 74:298]
    torch.testing.assert_close(pre.resize(x), want)
    squash = PreprocessConfig(img_size=(224, 224), crop_pct=0.9, crop_mode="squash")
    assert squash.resize(x).shape == (1, 3, 224, 224)
    with pytest.raises(ValueError, match="crop_mode must be one of center, squash"):
        PreprocessConfig(crop_pct=0.9, crop_mode="border")


def test_timm_api_methods_match_timms_outputs_on_the_same_weights() -> None:
    import vitkit

    api = json.loads((TIMM_FIXTURE / "api.json").read_text())
    ref = np.load(TIMM_FIXTURE / "api.npz", allow_pickle=False)
    m = vitkit.load_pretrained(TIMM_FIXTURE / "hub")
    x = torch.from_numpy(ref["x"])

    def close(a: torch.Tensor, key: str) -> None:
        torch.testing.assert_close(a, torch.from_numpy(ref[key]), rtol=2e-5, atol=2e-5, msg=key)

    with torch.no_grad():
        feats = m.forward_features(x)
        close(feats, "forward_features")
        close(m.forward_head(feats, pre_logits=True), "forward_head_pre_logits")
        close(m(x), "logits")
        for name, kw in {"all_nchw": {}, "last1_nlc_norm": dict(indices=1, output_fmt="NLC", norm=True),
                         "first_nchw": dict(indices=[0])}.items():
            inter = m.forward_intermediates(x, intermediates_only=True, **kw)
            assert len(inter) == len([k for k in ref.files if k.startswith(f"inter_{name}_")])
            for i, t in enumerate(inter):
                close(t, f"inter_{name}_{i}")
        final, inter = m.forward_intermediates(x, indices=[-1], return_prefix_tokens=True)
        close(final, "inter_final")
        close(inter[0][0], "inter_prefix_spatial")
        close(inter[0][1], "inter_prefix_tokens")
    assert (m.num_features, m.num_classes) == (api["num_features"], api["num_classes"])
    assert json.loads(json.dumps(m.group_matcher())) == api["group_matcher"]
    assert m.no_weight_decay() <= set(api["no_weight_decay"])  # timm also names tokens this model does not have
    m.reset_classifier(3)
    assert m.num_classes == api["after_reset"]["num_classes"]
    assert list(m.get_classifier().weight.shape) == api["after_reset"]["classifier"]
    assert m.get_classifier().weight.abs().sum() > 0  # timm's default init, not the paper's zero head
    m.reset_classifier(0)
    assert m.num_classes == 0 and type(m.get_classifier()).__name__ == api["after_reset_0"]["classifier"]
    with pytest.raises(ValueError, match="pools with 'token'"):
        m.reset_classifier(3, global_pool="avg")
    m.set_input_size(48)
    assert m.config.img_size == (48, 48)
    with pytest.raises(ValueError, match="does not resample the patch embedding"):
        m.set_input_size(patch_size=16)


def test_export_bench_reports_spread_and_flags_noisy_timings(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("onnxruntime")
    import vitkit.bench.exports as bx
    from vitkit.bench.timing import Timing

    def noisy(model, paths, batch=8, warmup=1, repeats=5):  # noqa: ANN001, ANN202 - a contended machine's samples
        return {"pytorch": Timing([0.010, 0.011, 0.60]), **{n: Timing([0.0001, 0.0002, 0.0001]) for n in paths}}

    folder = tmp_path / "vk"
    save_pretrained(digits_model(depth=1, width=16, num_heads=2, mlp_dim=32), folder)
    monkeypatch.setattr(bx, "bench_exports", noisy)
    assert main(["export", str(folder), "--no-check", "--bench", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "onnx fp32" in out and "UNRELIABLE: repeats spread" in out and "spread" in out
    assert main(["export", str(folder), "--no-check", "--bench", "--repeats", "1"]) == 2


def test_a_tar_named_pth_never_shows_unpickling_advice(tmp_path: Path) -> None:
    import vitkit

    f = tmp_path / "m.pth"
    with tarfile.open(f, "w") as tar:
        info = tarfile.TarInfo("storages")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(ValueError) as e:
        vitkit.load_pretrained(f)
    msg = str(e.value)
    assert "m.pth" in msg and "weights_only" not in msg and "allow_pickle" not in msg and "unpickl" not in msg.replace(
        "never unpickles", "")


def test_a_head_larger_than_the_data_keeps_the_class_names(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import vitkit

    out = tmp_path / "run"
    assert main(["train", "--config", "digits_pretrain", "--out", str(out), "--no-progress", *TINY,
                 "--set", "model.num_classes=12"]) == 0
    assert "outputs 10..11 have no data" in capsys.readouterr().out
    labels = vitkit.load_pretrained(out / "model").preprocess.labels
    assert labels[:10] == [str(i) for i in range(10)] and labels[10:] == ["unused_10", "unused_11"]


# ----------------------------------------------------------------------------- checkpoint families (timm-written)
FAMILIES = Path(__file__).parent / "fixtures" / "timm_families"  # tests/reference/make_timm_family_reference.py


def test_deit_distilled_checkpoints_written_by_timm_load_with_timms_outputs(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import vitkit

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    for path, hints in ((FAMILIES / "deit_distilled_hub", {}), (FAMILIES / "deit_distilled.safetensors",
                                                                {"num_heads": 4})):
        m = vitkit.load_pretrained(path, **hints)
        assert m.config.distill_token and m.config.num_class_tokens == 2
        with torch.no_grad():  # eval mode: the two heads averaged, as timm does
            torch.testing.assert_close(m(x), torch.from_numpy(ref["deit_distilled_logits"]), rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(m.forward_features(x), torch.from_numpy(ref["deit_distilled_features"]),
                                       rtol=2e-5, atol=2e-5)
    # saved back where the format can hold it (timm: deit_*_distilled; vitkit), refused by name where not
    back = save_pretrained(m, tmp_path / "back_timm", format="timm")
    assert json.loads((back / "config.json").read_text())["architecture"].startswith("deit_")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["deit_distilled_logits"]),
                                   rtol=2e-5, atol=2e-5)
    for fmt in ("hf", "npz"):
        with pytest.raises(ValueError, match="distill_token=True"):
            save_pretrained(m, tmp_path / f"back_{fmt}", format=fmt)
    # the CLI paths: predict, finetune, eval on the fine-tuned model
    data = _folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "deit_distilled_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    tuned = vitkit.load_pretrained(tmp_path / "ft" / "model")
    assert tuned.config.distill_token and tuned.config.num_classes == 3
    assert main(["eval", "--model", str(tmp_path / "ft" / "model"), "--data", str(data)]) == 0


def test_siglip_style_towers_written_by_timm_load_with_timms_outputs(tmp_path: Path) -> None:
    import vitkit

    ref = np.load(FAMILIES / "outputs.npz", allow_pickle=False)
    x = torch.from_numpy(ref["x"])
    m = vitkit.load_pretrained(FAMILIES / "siglip_hub")
    assert m.config.pooling == "map" and m.config.num_class_tokens == 0
    with torch.no_grad():
        z = m.forward_features(x)
        for got, key in ((m(x), "siglip_logits"), (z, "siglip_features"),
                         (m.forward_head(z, pre_logits=True), "siglip_pooled")):
            torch.testing.assert_close(got, torch.from_numpy(ref[key]), rtol=2e-5, atol=2e-5, msg=key)
    back = save_pretrained(m, tmp_path / "back", format="timm")  # timm's attn_pool names again
    doc = json.loads((back / "config.json").read_text())
    assert doc["model_args"]["global_pool"] == "map" and doc["model_args"]["class_token"] is False
    from safetensors.torch import load_file

    assert "attn_pool.latent" in load_file(back / "model.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), torch.from_numpy(ref["siglip_logits"]),
                                   rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="pooling='map'"):
        save_pretrained(m, tmp_path / "hf", format="hf")
    data = _folder(tmp_path / "data", n=24, classes=3)
    hub = str(FAMILIES / "siglip_hub")
    assert main(["predict", str(data / "c0" / "000.png"), "--model", hub]) == 0
    assert main(["fewshot", "--model", hub, "--data", str(data), "--shots", "2"]) == 0  # features of the MAP head
    assert main(["finetune", "--model", hub, "--data", str(data), "--out", str(tmp_path / "ft"), "--no-progress",
                 "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
                 "--set", "data.num_workers=0", "--set", "train.tensorboard=false"]) == 0
    assert vitkit.load_pretrained(tmp_path / "ft" / "model").config.pooling == "map"
