"""Work bounded by the output, checked before anything is allocated: an image whose resize before the centre crop
would be gigabytes is skipped and named (the rest of the batch goes on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vitkit
from tests.inputs import peak_memory, png_bytes
from vitkit.cli import main
from vitkit.data.preprocess import read_image
from vitkit.models.preprocess import PreprocessConfig


def test_an_extreme_aspect_ratio_is_skipped_and_named_not_a_crash(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=224, patch_size=16,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.875,
                                    labels=["a", "b", "c"])
    model = vitkit.save_pretrained(m, tmp_path / "m")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(np.zeros((1, 100_000), np.uint8)).save(photos / "wide.png")  # 177 bytes: 78 GB to resize before
    Image.fromarray(np.zeros((1_000_000, 1), np.uint8)).save(photos / "tall.png")
    (photos / "ok.png").write_bytes(png_bytes())
    capsys.readouterr()
    assert main(["predict", str(photos), "--model", str(model), "--runtime", "torch"]) == 1  # (skipped files: 1)
    out = capsys.readouterr()
    assert "wide.png: a 100000x1 image would be resized to 25,600,000x256 before its centre crop" in out.err
    assert "tall.png: a 1x1000000 image would be resized to 256x256,000,000" in out.err
    assert "ok.png" in out.out and "2 of 3 images could not be read" in out.err
    assert m.preprocess.resized_size(300, 400) == (256, 341)  # an ordinary photo: resized as before
    m.preprocess.check_input_size(256, 256 * 32)  # a 32:1 panorama still goes through


def test_a_huge_shard_range_is_refused_before_its_paths_are_built(tmp_path: Path) -> None:
    import time

    import pytest

    from vitkit.data.shards import expand_pattern

    t0 = time.process_time()
    with pytest.raises(ValueError, match=r"100,000,000 shards, over the limit of 1,048,576"):
        expand_pattern(str(tmp_path / "train-{000000..099999999}.tar"))
    assert time.process_time() - t0 < 1


def test_more_loader_workers_than_cores_are_capped_and_said(caplog) -> None:  # noqa: ANN001
    import logging
    import os

    from vitkit.data.base import synthetic
    from vitkit.data.loader import StepLoader
    from vitkit.data.transforms import EvalTransform

    ds = synthetic(3, (8, 8), 1, n=8)
    tf = EvalTransform(PreprocessConfig(img_size=(8, 8), mean=(0.5,), std=(0.5,)))
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        loaders = [StepLoader(ds, 4, tf, num_workers=200) for _ in range(3)]  # a run's train, dev and test loaders
    cores = len(os.sched_getaffinity(0))
    assert all(ld.num_workers == cores for ld in loaders)
    assert caplog.text.count(f"200 data-loading workers asked for on {cores} cores") == 1, caplog.text


def test_a_tiny_pth_of_stride_0_views_and_a_zip_bomb_are_refused_before_a_model_is_built(tmp_path: Path) -> None:
    import io
    import time
    import zipfile

    import pytest
    import torch

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    state = m.state_dict()
    state["pos_embed"] = torch.zeros(1, 1, 1).expand(1, 10**6, 16)  # 4 bytes stored, 64 MB announced
    torch.save(state, tmp_path / "views.pth")
    assert (tmp_path / "views.pth").stat().st_size < 100_000
    with pytest.raises(ValueError, match=r"tensor 'pos_embed' of shape \(1, 1000000, 16\) is a view of only 4 bytes"):
        vitkit.load_pretrained(tmp_path / "views.pth", num_heads=2)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    bomb = tmp_path / "bomb.pth"
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(bomb, "w") as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info.filename))
        # 256 MiB of zeros deflated to ~250 KB (torch.save stores its members uncompressed)
        z.writestr(zipfile.ZipInfo("archive/data/998"), b"\0" * (256 << 20), compress_type=zipfile.ZIP_DEFLATED)
    t0 = time.process_time()
    with pytest.raises(ValueError, match=r"bomb.pth: member archive/data/998 unpacks 268,435,456 bytes from"):
        vitkit.load_pretrained(bomb, num_heads=2)
    assert time.process_time() - t0 < 5


def test_a_config_asking_for_far_more_than_its_weights_is_refused_before_building(tmp_path: Path) -> None:
    import json
    import time

    import pytest

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    d = vitkit.save_pretrained(m, tmp_path / "m")
    doc = json.loads((d / "config.json").read_text())
    for key, value in (("num_classes", 16_000_000), ("depth", 1000), ("width", 8192)):
        (d / "config.json").write_text(json.dumps({**doc, "model": {**doc["model"], key: value}}))
        t0 = time.process_time()
        with pytest.raises(ValueError, match=r"config.json: describes a model of ~[\d,]+ parameters .* but "
                                             r"its weights hold 5,683 values"):
            vitkit.load_pretrained(d)
        assert time.process_time() - t0 < 2, key


def test_a_16_bit_png_is_read_with_a_peak_that_follows_its_output(tmp_path: Path) -> None:
    """A 16-bit grey PNG is converted in strips straight into its output (and box-reduced while converted when the
    model needs far fewer pixels): before, the uint16 copy, the float32 copy, the 3-channel repeat and its
    contiguous copy made 32 bytes a pixel (9400^2 under the pixel limit: 2.2 GB); now Pillow's 2 bytes a pixel
    plus the output."""

    side, reduced = 4000, -(-4000 // (4000 // 224))
    Image.fromarray(np.tile(np.arange(side, dtype=np.uint16) * 7, (side, 1))).save(tmp_path / "deep.png",
                                                                                     compress_level=1)
    setup = f"from vitkit.data.preprocess import read_image\npath = {str(tmp_path / 'deep.png')!r}"
    full = peak_memory(setup, f"x = read_image(path, 3)\nassert x.shape == (3, {side}, {side})")
    assert full < 3 * 4 * side**2 + 3 * side**2 + (64 << 20), full / 2**20  # output + decoded image (+ slack)
    small = peak_memory(setup, f"x = read_image(path, 3, (224, 224))\nassert x.shape == (3, {reduced}, {reduced})")
    assert small < 3 * side**2 + (64 << 20), small / 2**20  # the decoded image alone

    # the values: rescaled by 65535, box-averaged by the decode factor (partial boxes at the edges average what
    # they hold, as Pillow's reduce does), the same in every channel
    ramp = np.arange(50 * 64, dtype=np.uint16).reshape(50, 64) * 20
    Image.fromarray(ramp).save(tmp_path / "ramp.png")
    x = read_image(tmp_path / "ramp.png", 3, (16, 16))  # factor min(64 // 16, 50 // 16) = 3
    unit = ramp / 65535.0
    want = np.array([[unit[i:i + 3, j:j + 3].mean() for j in range(0, 64, 3)] for i in range(0, 50, 3)])
    assert x.shape == (3, 17, 22) and torch.equal(x[0], x[2])
    np.testing.assert_allclose(x[1].numpy(), want, atol=1e-6)
    np.testing.assert_array_equal(read_image(tmp_path / "ramp.png", 1)[0].numpy(),
                                  np.multiply(ramp, np.float32(1 / 65535.0), dtype=np.float32))  # exact as before


def test_config_sizes_larger_than_the_weights_are_compared_before_allocating(tmp_path: Path) -> None:
    """Before: a transformers config.json's intermediate_size 262144 and a timm file's vitkit metadata asking for
    64 layers of a 262144-wide MLP built the model (gigabytes) before any tensor was compared."""
    import json

    import pytest
    from safetensors.torch import load_file, save_file

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    hf = vitkit.save_pretrained(m, tmp_path / "hf", format="hf")
    doc = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**doc, "intermediate_size": 262144}))
    with pytest.raises(ValueError, match=r"hf/config.json: describes a model of ~[\d,]+ parameters .*MLP 262,144"):
        vitkit.load_pretrained(hf)
    f = vitkit.save_pretrained(m, tmp_path / "m.safetensors", format="timm")
    big = {**m.config.to_dict(), "depth": 64, "mlp_dim": 262144}
    save_file(load_file(f), str(f), metadata={"format": "pt", "vitkit_config": json.dumps(big)})
    with pytest.raises(ValueError, match=r"m.safetensors: describes a model of ~[\d,]+ parameters \(depth 64"):
        vitkit.load_pretrained(f)


def test_a_model_or_glyph_set_past_the_machine_is_refused_before_the_allocator(capsys) -> None:  # noqa: ANN001
    """Before: model.width 65536 (within the sanity bound) reached torch's allocator ("[enforce fail at
    alloc_cpu.cpp]"); 10^6 glyph classes and a glyph stream at 1,024 px ran on for minutes."""
    import pytest

    from vitkit.data.config import DataConfig

    run = ["train", "--config", "digits_pretrain", "--no-progress", "--set", "model.depth=1", "--set",
           "model.num_heads=2", "--set", "model.mlp_dim=32", "--set", "schedule.steps=1"]
    assert main([*run, "--set", "model.width=65536"]) == 2
    err = capsys.readouterr().err
    assert "parameters need ~" in err and "more than this machine's" in err and "lower model.width" in err, err
    with pytest.raises(ValueError, match="data.glyph_classes must be at most 100,000"):
        DataConfig(name="glyphs", glyph_classes=1_000_000, glyph_images=2_000_000, glyph_stream=True)
    with pytest.raises(ValueError, match="data.glyph_classes = 5,000 is more than data.glyph_images = 1,000"):
        DataConfig(name="glyphs", glyph_classes=5000, glyph_images=1000)
    with pytest.raises(ValueError, match="data.glyph_size must be at most 256, got 1024"):
        DataConfig(name="glyphs", glyph_size=1024, glyph_stream=True)
