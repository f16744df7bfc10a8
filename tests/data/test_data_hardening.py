"""Hostile and odd data: planted payloads, decompression and pickle bombs, tar headers, shard labels, symlinks, bit depths, EXIF, packing."""

from __future__ import annotations

import io
import json
import os
import pickle
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import digits_model
from tests.inputs import (
    TINY_LOGGED,
    Payload,
    assert_one_line_error,
    bomb_png,
    file_tree,
    noise_folder,
    pax_bomb,
    pickle_bytes,
    png_bytes,
    png_file,
    png_header_only,
    run_main,
    shard_file,
)
from vitkit.cli import main
from vitkit.data.cifar import safe_unpickle
from vitkit.data.config import DataConfig
from vitkit.data.datasets import detect_kind, open_splits
from vitkit.data.folders import image_folder, list_file
from vitkit.data.preprocess import DEFAULT_MAX_PIXELS, read_image
from vitkit.data.shards import ShardDataset, check_tar_headers
from vitkit.train.config import load_config
from vitkit.train.run import run_experiment
from vitkit.utils.files import read_regular_file


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
    cfg = load_config("digits_pretrain", TINY_LOGGED + ["data.name=\"auto\"", f"data.path=\"{c10}\"", "data.channels=3",
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
    cfg = load_config("digits_pretrain", TINY_LOGGED)
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
            png_file(root / c / f"{i}.png", 40 * i)
    for name in ("train", "test", "meta"):
        (root / name).write_bytes(b"just some notes\n")
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (root / name).write_text("not a pickle")
    assert detect_kind(str(root)) == "folder"
    assert open_splits(DataConfig(**{"name": "auto", "path": str(root)}))["train"].classes == ["cat", "dog"]


@pytest.mark.usefixtures("figures_not_encoded")  # its run's curves.png: drawn, not encoded (not read)
def test_decompression_bomb_is_skipped_and_named_with_a_configurable_limit(tmp_path: Path, monkeypatch) -> None:
    bomb = bomb_png(tmp_path / "bomb.png")
    with pytest.raises(ValueError, match=r"bomb\.png: 40000x40000 = 1,600,000,000 pixels is over the limit"):
        read_image(bomb)
    small = png_file(tmp_path / "small.png", size=(100, 100))
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
    good = png_file(tmp_path / "digit.png", 200, (8, 8))
    r = run_main("predict", str(good), str(bomb), "--model", str(model_dir))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "bomb.png" in r.stderr and "over the limit" in r.stderr and r.stdout.startswith(str(good))
    # training on a folder holding the bomb: skipped, counted and named, the run finishes
    root = tmp_path / "digits"
    for i in range(20):
        png_file(root / str(i % 2) / f"{i}.png", 10 * i, (8, 8))
    bomb_png(root / "1" / "zz_bomb.png")
    cfg = load_config("digits_pretrain", TINY_LOGGED + ["data.name=\"folder\"", f"data.path=\"{root}\"", "data.holdout=0.2",
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
    yy, xx = np.ogrid[0:3000, 0:4000]  # (the same pixels as full mgrid planes, without 12-million-entry temporaries)
    arr = np.empty((3000, 4000, 3), np.uint8)
    arr[..., 0], arr[..., 1], arr[..., 2] = (xx / 16) % 256, (yy / 12) % 256, ((xx + yy) / 28) % 256
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


def test_loader_messages(tmp_path: Path) -> None:
    m = vitkit.create_model("vit", img_size=32, patch_size=16, width=32, depth=1, num_heads=2, mlp_dim=64,
                            num_classes=5, gelu="exact")
    state = {k.replace("pre_logits.0.", "pre_logits.fc."): v for k, v in m.state_dict().items()}
    qk = dict(state, **{"blocks.0.attn.q_norm.weight": torch.ones(16)})  # qk-norm: a part vitkit's ViT does not have
    torch.save(qk, tmp_path / "qknorm.pth")
    with pytest.raises(ValueError, match=r"qknorm\.pth: unrecognised tensor\(s\) 'blocks\.0\.attn\.q_norm\.weight' "
                       r"\(qk-norm\)"):
        vitkit.load_pretrained(tmp_path / "qknorm.pth", num_heads=2)
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
    img = png_file(tmp_path / "d.png", 100, (8, 8))
    for cmd in (["predict", str(img)], ["eval"]):
        r = run_main(*cmd, "--model", str(headless))
        assert_one_line_error(r, "no classifier head", "fewshot")


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


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_pack_refuses_a_destination_overlapping_its_source(tmp_path: Path, where: str, capsys) -> None:  # noqa: ANN001
    src = noise_folder(tmp_path / "data" / "src")
    before = file_tree(tmp_path / "data")
    dest = {"same": src, "inside": src / "shards", "contains": tmp_path / "data"}[where]
    assert main(["data", "pack", str(src), str(dest), "--overwrite", "--no-progress"]) == 2
    assert "is, holds or lies inside the source" in capsys.readouterr().err
    assert file_tree(tmp_path / "data") == before


def test_pack_of_shards_onto_themselves_keeps_them(tmp_path: Path) -> None:
    src = noise_folder(tmp_path / "src")
    assert main(["data", "pack", str(src), str(tmp_path / "s"), "--channels", "1", "--no-progress"]) == 0
    before = file_tree(tmp_path / "s")
    assert main(["data", "pack", str(tmp_path / "s"), str(tmp_path / "s"), "--overwrite", "--no-progress"]) == 2
    assert main(["data", "pack", str(tmp_path / "s" / "train-*.tar"), str(tmp_path / "s"), "--overwrite",
                 "--no-progress"]) == 2
    assert file_tree(tmp_path / "s") == before


def test_cifar_pickle_bombs_are_refused_quickly(tmp_path: Path) -> None:
    laughs = bytearray(b"]q\x00")  # one list, then 60 lists each holding the previous one twice: 2^60 leaves
    for i in range(60):
        laughs += b"(h" + bytes([i]) + b"h" + bytes([i]) + b"lq" + bytes([i + 1]) + b"0"
    laughs += b"}(C\x04datah" + bytes([60]) + b"u"
    (tmp_path / "laughs").write_bytes(pickle_bytes(bytes(laughs)))
    wide = bytearray(b"]q\x00(" + b"h\x00" * 1000 + b"lq\x01(" + b"h\x01" * 1000 + b"lq\x02")
    wide += b"}(C\x04datah\x02u"  # depth 3, but one 1000-list shared 1000 times: 10^6 values from 4 KB
    (tmp_path / "wide").write_bytes(pickle_bytes(bytes(wide)))
    (tmp_path / "deep").write_bytes(pickle_bytes(b"}(C\x04data" + b"(" * 200_000 + b"l" * 200_000 + b"u"))
    for name, match in (("laughs", "nested over|referenced twice"), ("wide", "referenced twice"),
                        ("deep", "nested over")):
        t0 = time.process_time()
        with pytest.raises(ValueError, match=match):
            safe_unpickle(tmp_path / name)
        assert time.process_time() - t0 < 5, name


def test_tar_shards_with_hostile_headers_are_refused_before_tarfile_parses_them(tmp_path: Path) -> None:
    t0 = time.process_time()
    with pytest.raises(ValueError, match="an extended header of 1,000,0.. bytes"):
        ShardDataset(str(pax_bomb(tmp_path / "pax.tar", 1_000_000)))
    assert time.process_time() - t0 < 5
    check_tar_headers(pax_bomb(tmp_path / "small.tar", 200))  # an ordinary PAX header passes
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


def test_shard_labels_and_truncation_are_refused_by_name(tmp_path: Path) -> None:
    png = png_bytes()
    good = {"a.png": png, "a.cls": b"0", "b.png": png, "b.cls": b"1"}
    assert len(ShardDataset(str(shard_file(tmp_path / "ok.tar", good)), channels=1)) == 2
    for bad, match in ((b"-100", "'-100' is not a class index"), (b"0_1", "'0_1' is not a class index")):
        with pytest.raises(ValueError, match=match):
            ShardDataset(str(shard_file(tmp_path / "cls.tar", {**good, "b.cls": bad})), channels=1)
    for label in ("1.9", "true", "-1", "1e999"):
        members = {"a.png": png, "a.json": f'{{"label": {label}}}'.encode()}
        with pytest.raises(ValueError, match="a.json: the label .* is not a class index"):
            ShardDataset(str(shard_file(tmp_path / "json.tar", members)), channels=1)
    with pytest.raises(ValueError, match="a label of 5,000 bytes"):
        ShardDataset(str(shard_file(tmp_path / "big.tar", {**good, "b.cls": b"0" * 5000})), channels=1)
    with pytest.raises(ValueError, match="without its end-of-archive block"):  # cut at a member boundary
        ShardDataset(str(shard_file(tmp_path / "cut.tar", good, end=False)), channels=1)
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
    src = noise_folder(tmp_path / "src")
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
    t0 = time.process_time()
    with pytest.raises(ValueError, match="/dev/zero: it is a device, not a regular file"):
        ds.get(0)
    with pytest.raises(ValueError, match="pipe.png: it is a FIFO, not a regular file"):
        ds.get(1)
    with pytest.raises(ValueError, match="it is a FIFO"):
        ds.raw(1)
    assert time.process_time() - t0 < 5
    big = tmp_path / "big.png"
    big.write_bytes(png_bytes() + b"\0" * 4096)
    with pytest.raises(ValueError, match="bytes is over the limit of 1,049,...|over the limit"):
        read_regular_file(big, 1024, "image")
    with pytest.raises(ValueError, match="over the limit"):
        read_image(big, 1, max_pixels=1)  # 8 bytes a pixel + 1 MiB: the file is checked before it is read


def test_a_label_far_beyond_the_others_is_refused_not_expanded(tmp_path: Path) -> None:
    png = tmp_path / "a.png"
    png.write_bytes(png_bytes())
    (tmp_path / "list.txt").write_text(f"{png} 0\n{png} 300000000\n")
    t0 = time.process_time()
    with pytest.raises(ValueError, match="the labels jump \\(max 300000000, but only 2 distinct"):
        list_file(tmp_path / "list.txt", channels=1)
    (tmp_path / "list.txt").write_text(f"{png} 0\n{png} 99999999999999999999999\n")
    with pytest.raises(ValueError, match="too large to be a class index"):
        list_file(tmp_path / "list.txt", channels=1)
    with pytest.raises(ValueError, match="the labels jump"):
        ShardDataset(str(shard_file(tmp_path / "j.tar", {"a.png": png_bytes(), "a.cls": b"0", "b.png": png_bytes(),
                                                     "b.cls": b"299999999"})), channels=1)
    assert time.process_time() - t0 < 5


def test_a_high_bit_depth_image_counts_its_bytes_against_the_limit(tmp_path: Path) -> None:
    # 13000 x 13000 16-bit grey: under the default pixel limit (179M) in pixels, over it in samples of 2 bytes
    f = png_header_only(tmp_path / "deep.png", 13_000, 16)
    t0 = time.process_time()
    with pytest.raises(ValueError, match="169,000,000 pixels of 2 bytes a sample \\(mode I.*\\), counted as 338,000,000, is over the limit"):
        read_image(f, 3)
    assert time.process_time() - t0 < 2
    png_header_only(tmp_path / "ok.png", 13_000, 8)  # the same pixels at 8 bits stay under the byte limit
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


def test_symlinks_out_of_an_image_folder_are_refused(tmp_path: Path) -> None:
    root = noise_folder(tmp_path / "data")
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes())
    (root / "c0" / "leak.png").symlink_to(secret)
    with pytest.raises(ValueError, match="leak.png is a symlink to .*secret.png, outside the data folder"):
        image_folder(root, 1)
    (root / "c0" / "leak.png").unlink()
    (root / "c0" / "inside.png").symlink_to(root / "c1" / "001.png")  # a link inside the folder is fine
    outside = tmp_path / "elsewhere"
    noise_folder(outside, n=3, classes=1)
    (root / "c9").symlink_to(outside / "c0", target_is_directory=True)
    with pytest.raises(ValueError, match="c9 is a symlink to .*elsewhere/c0, outside the data folder"):
        image_folder(root, 1)
    (root / "c9").unlink()
    assert len(image_folder(root, 1)[0]) == 13


def test_hf_dataset_paths_resolve_inside_the_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes(7))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "inside.png").write_bytes(png_bytes(9))
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
    assert png_bytes(7) not in packed and png_bytes(9) in packed


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
