"""What a checkpoint's metadata says is read exactly or refused by name: a bare timm file keeps the preprocessing and
labels (and says that timm will not see them), config.json / preprocessor_config.json values that do not fit are
named, and what a file cannot hold is logged as assumed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.cli import main
from vitkit.formats import save_pretrained
from vitkit.models.preprocess import PreprocessConfig


def _imagenet_model() -> vitkit.VisionTransformer:
    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(32, 32), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                                    interpolation="bicubic", labels=["cat", "dog", "eel"], crop_pct=0.875)
    return m


def test_a_bare_timm_file_keeps_the_preprocessing_and_says_timm_will_not_see_it(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    src = save_pretrained(_imagenet_model(), tmp_path / "src")
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        assert main(["convert", str(src), str(tmp_path / "m.safetensors"), "--to", "timm"]) == 0
    assert "has no place timm reads preprocessing or labels from" in caplog.text
    back = vitkit.load_pretrained(tmp_path / "m.safetensors")
    assert back.preprocess == _imagenet_model().preprocess  # not mean = std = 0.5, bilinear, no crop
    assert "preprocess" not in back.config.extra.get("assumed", {})
    # a bare file without it (another writer's, or an older vitkit's): the default is assumed, and said
    with safe_open(str(tmp_path / "m.safetensors"), "pt") as f:
        meta = {k: v for k, v in f.metadata().items() if k != "vitkit_preprocess"}
    save_file(load_file(tmp_path / "m.safetensors"), str(tmp_path / "old.safetensors"), metadata=meta)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        old = vitkit.load_pretrained(tmp_path / "old.safetensors")
    assert old.preprocess.mean == (0.5, 0.5, 0.5) and old.preprocess.labels == []
    assert "preprocess is not in the file; assumed mean = std = 0.5" in caplog.text
    assert "preprocess" in old.config.extra["assumed"]
    torch.testing.assert_close(old.head.weight, back.head.weight)


def test_preprocessor_values_are_read_as_transformers_does_or_refused_by_name(tmp_path: Path) -> None:
    hf = save_pretrained(_imagenet_model(), tmp_path / "hf", format="hf")
    proc_file = hf / "preprocessor_config.json"
    proc = json.loads(proc_file.read_text())
    for value, why in ((1, "resample 1 is not an interpolation vitkit reproduces"),
                       (99, "resample 99"), ("bicubic", "resample 'bicubic'"), (True, "resample True")):
        proc_file.write_text(json.dumps({**proc, "resample": value}))
        with pytest.raises(ValueError, match=f"preprocessor_config.json: {why}"):
            vitkit.load_pretrained(hf)
    plain = {**proc, "do_center_crop": False, "resample": 3}
    proc_file.write_text(json.dumps({**plain, "size": [32, 32]}))  # transformers' get_size_dict: (height, width)
    m = vitkit.load_pretrained(hf)
    assert m.preprocess.crop_pct is None and m.preprocess.interpolation == "bicubic"
    # a processor size other than config.json's image_size runs the model at the processor's size (a hub DINOv2
    # ships 518 and crops 224: tests/formats/test_hub_folders.py); sizes that are not sizes are refused by name
    for size, why in (({"longest_edge": 32}, "expected a number of pixels or"),
                      ({"height": "big", "width": 32}, "expected a number of pixels or"), ([0, 32], "size is \\(0, 32\\)")):
        proc_file.write_text(json.dumps({**plain, "size": size}))
        with pytest.raises(ValueError, match=why):
            vitkit.load_pretrained(hf)


def test_a_timm_checkpoint_with_an_ema_copy_says_which_copy_it_read(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    m = _imagenet_model()
    ema = {k: v + 1 for k, v in m.state_dict().items()}
    torch.save({"state_dict": m.state_dict(), "state_dict_ema": ema, "epoch": 3}, tmp_path / "ckpt.pth")
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        got = vitkit.load_pretrained(tmp_path / "ckpt.pth", num_heads=2)
    assert "read the EMA copy of the weights ('state_dict_ema'), as timm's load_checkpoint does by default; the " \
           "file also holds 'state_dict'" in caplog.text
    torch.testing.assert_close(got.head.weight, ema["head.weight"])  # timm's preference: the EMA weights


def test_an_npz_sidecar_of_another_write_is_refused(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import vitkit.formats.npz as npz

    a = _imagenet_model()
    f = save_pretrained(a, tmp_path / "m.npz", format="npz")
    assert vitkit.load_pretrained(f).preprocess.labels == ["cat", "dog", "eel"]
    b = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8,
                            num_classes=3)
    torch.nn.init.normal_(b.head.weight)

    def killed(path, text):  # noqa: ANN001, ANN202 - the .npz is written, the sidecar never
        raise KeyboardInterrupt

    monkeypatch.setattr(npz, "atomic_write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        save_pretrained(b, f, format="npz")
    with pytest.raises(ValueError, match=r"m.vitkit.json belongs to another m.npz \(the SHA-256 it records differs\)"):
        vitkit.load_pretrained(f)
    monkeypatch.undo()
    save_pretrained(b, f, format="npz")
    torch.testing.assert_close(vitkit.load_pretrained(f).head.weight, b.head.weight)


def test_a_replace_killed_between_its_renames_is_named_and_restored(tmp_path: Path, caplog, monkeypatch) -> None:  # noqa: ANN001
    import os

    import vitkit.formats as formats

    a, b = _imagenet_model(), _imagenet_model()
    torch.nn.init.normal_(b.head.weight)
    dest = save_pretrained(a, tmp_path / "dest")
    os.rename(dest, tmp_path / ".dest.k1ll3d.old.tmp")  # what a kill between `out -> old` and `tmp -> out` left
    with pytest.raises(FileNotFoundError, match=r"a replace of it was interrupted: the old checkpoint is in .*"
                                                r"\.dest\.k1ll3d\.old\.tmp"):
        vitkit.load_pretrained(dest)
    src = save_pretrained(b, tmp_path / "src")
    assert main(["convert", str(src), str(dest), "--to", "vitkit"]) == 2  # restored, so protected: no --overwrite
    torch.testing.assert_close(vitkit.load_pretrained(dest).head.weight, a.head.weight)
    os.rename(dest, tmp_path / ".dest.k1ll3d.old.tmp")
    with caplog.at_level(logging.WARNING, logger="vitkit"):
        save_pretrained(b, dest)
    assert "restored the checkpoint an interrupted replace left in .dest.k1ll3d.old.tmp" in caplog.text
    torch.testing.assert_close(vitkit.load_pretrained(dest).head.weight, b.head.weight)
    assert not list(tmp_path.glob(".dest.*"))
    # the swap itself is one step: a kill right after it finds the new checkpoint whole
    real = formats._exchange

    def swap_then_die(x: Path, y: Path) -> bool:
        if not real(x, y):
            pytest.skip("no renameat2 RENAME_EXCHANGE on this file system")
        raise KeyboardInterrupt

    monkeypatch.setattr(formats, "_exchange", swap_then_die)
    with pytest.raises(KeyboardInterrupt):
        save_pretrained(a, dest)
    torch.testing.assert_close(vitkit.load_pretrained(dest).head.weight, a.head.weight)


def test_config_files_that_are_not_regular_or_hold_strings_for_numbers_are_named(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import os
    import signal

    img = tmp_path / "x.png"
    img.write_bytes(b"")
    for name, make in (("fifo", lambda f: os.mkfifo(f)), ("zero", lambda f: os.symlink("/dev/zero", f))):
        d = tmp_path / name
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"")
        make(d / "config.json")
        def hung(*_: object) -> None:
            raise TimeoutError("hung on a config.json that is not a regular file")

        old = signal.signal(signal.SIGALRM, hung)
        signal.alarm(60)  # (before the fix: a FIFO hung here)
        try:
            for argv in (["convert", str(d), str(tmp_path / "out"), "--to", "vitkit"],
                         ["predict", str(img), "--model", str(d)]):
                capsys.readouterr()
                assert main(argv) == 2
                assert "config.json: it is a " in capsys.readouterr().err
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    transformers = pytest.importorskip("transformers")
    for cls, cfg_cls in (("ViTModel", "ViTConfig"), ("Dinov2Model", "Dinov2Config")):
        hf = tmp_path / cls
        getattr(transformers, cls)(getattr(transformers, cfg_cls)(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
            patch_size=8)).save_pretrained(hf)
        doc = json.loads((hf / "config.json").read_text())
        for key, value in (("layer_norm_eps", "tiny"), ("num_attention_heads", "two"), ("hidden_size", 0),
                           ("num_attention_heads", True), ("layer_norm_eps", float("nan"))):
            (hf / "config.json").write_text(json.dumps({**doc, key: value}))
            with pytest.raises(ValueError, match=f"config.json {key} is {value!r}, expected a"):
                vitkit.load_pretrained(hf)
