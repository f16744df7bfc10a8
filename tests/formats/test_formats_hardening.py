"""Checkpoint files: refused when hostile or broken (bombs, non-finite weights, foreign keys), named on error, written atomically."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from tests.helpers import digits_model
from tests.inputs import file_tree, png_bytes
from vitkit.cli import main
from vitkit.formats import save_pretrained


def test_timm_export_of_a_tanh_gelu_model_warns(tmp_path: Path) -> None:
    tanh = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    with pytest.warns(UserWarning, match="tanh GELU .* timm's VisionTransformer runs exact GELU"):
        vitkit.save_pretrained(tanh, tmp_path / "t.safetensors", format="timm")
    exact = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32, gelu="exact")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vitkit.save_pretrained(exact, tmp_path / "e.safetensors", format="timm")


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
    t0 = time.process_time()
    with pytest.raises(ValueError, match="announces shape \\(4294967296,\\) float32 \\(17,179,869,312 bytes\\)"):
        check_npz_sizes(bomb)
    with pytest.raises(ValueError, match="unpack to 134,217,856 bytes, over the limit of 1,000"):
        check_npz_sizes(bomb, limit=1000)
    assert time.process_time() - t0 < 10
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

    t0 = time.process_time()
    for key, value in (("depth", 100_000), ("depth", 10_000), ("width", 10**7), ("num_classes", 10**9)):
        with pytest.raises(ValueError, match=f"{key} must be at most"):
            ViTConfig(**{key: value, "num_heads": 1})
    with pytest.raises(ValueError, match="sanity bound"):
        ViTConfig(depth=1000, width=16384, num_heads=16, mlp_dim=65536)
    assert time.process_time() - t0 < 2


def test_non_finite_or_foreign_weights_and_preprocessing_are_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import vitkit
    from vitkit.formats.native import CONFIG_NAME
    from vitkit.formats.sharded import WEIGHTS_NAME

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
        save_pretrained(model, tmp_path / "std")
        doc = json.loads((tmp_path / "std" / CONFIG_NAME).read_text())  # its own config (another save's is refused)
        doc["preprocess"]["std"] = [float(std)]
        (tmp_path / "std" / CONFIG_NAME).write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="every std a finite number > 0"):
            vitkit.load_pretrained(tmp_path / "std")
    img = tmp_path / "x.png"
    img.write_bytes(png_bytes())
    from vitkit.inference.evaluate import check_finite

    with pytest.raises(FloatingPointError, match="non-finite logits .* for 1 of the inputs"):
        check_finite(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]), "logits")
    assert main(["predict", str(img), "--model", str(good), "--output", str(tmp_path / "p.jsonl")]) == 0
    for line in (tmp_path / "p.jsonl").read_text().splitlines():
        json.loads(line)  # strict JSON (no bare NaN)


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
        before = file_tree(dest)
        real = formats.SAVERS[fmt]

        def killed(model, out, real=real):  # noqa: ANN001, ANN202 - writes the weights, then dies
            real(model, out)
            raise KeyboardInterrupt("killed between the writes")

        monkeypatch.setitem(formats.SAVERS, fmt, killed)
        with pytest.raises(KeyboardInterrupt):
            save_pretrained(b, dest, format=fmt)
        assert file_tree(dest) == before  # the old checkpoint, whole (and the user's file)
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # (cleaned up on the way out)
        (tmp_path / f".{fmt}.stale.tmp").mkdir()  # as a SIGKILL mid-write leaves it
        monkeypatch.setitem(formats.SAVERS, fmt, real)
        save_pretrained(b, dest, format=fmt)
        assert (dest / "notes.txt").read_text() == "mine"
        assert not (tmp_path / f".{fmt}.stale.tmp").exists()  # the next write of the folder removes it
        torch.testing.assert_close(vitkit.load_pretrained(dest).head.weight, b.head.weight)


def test_broken_npz_files_are_user_errors(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder = tmp_path / "vk"
    (tmp_path / "x.png").write_bytes(png_bytes())
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
    from vitkit.inference.export import export_onnx, export_openvino, exported_preprocess, quantize_int8

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


def test_two_writers_of_one_folder_and_a_symlinked_folder(tmp_path: Path) -> None:
    """Before: two save_pretrained / convert into one folder at once each deleted the other's temporary folder as a
    killed write's, and one failed with a raw "[Errno 2] ... .m.XXXX.tmp"; a save onto a symlinked folder wrote,
    then raised "Cannot call rmtree on a symbolic link" and left a temporary link."""
    from vitkit.utils.files import claim_lock, release_lock

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=8)
    lock = tmp_path / ".m.lock"
    fd = claim_lock(lock, "another writer")  # a save of tmp_path/m in progress, in another process
    stale = tmp_path / ".m.abcd1234.tmp"  # ... and its temporary folder
    stale.mkdir()
    try:
        with pytest.raises(BlockingIOError, match=r"checkpoint folder .*/m is in use by another vitkit job \(pid "
                                                  f"{os.getpid()}\\)"):
            vitkit.save_pretrained(m, tmp_path / "m")
        assert stale.is_dir()  # the other writer's temporary folder is left alone
    finally:
        release_lock(lock, fd)
    vitkit.save_pretrained(m, tmp_path / "m")  # no writer: a killed write's temporary folder is removed
    assert not stale.exists() and not lock.exists()
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    for _ in range(2):
        vitkit.save_pretrained(m, tmp_path / "link", format="hf")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    vitkit.load_pretrained(tmp_path / "link")


def _save_holding(model: torch.nn.Module, out: Path, inside: object, go: object) -> None:
    """A writer process: `save_pretrained(model, out)` that stops inside the folder's lock until `go` is set."""
    import vitkit.formats as formats

    real = formats._replace_folder

    def held(*a: object) -> Path:
        inside.set()  # type: ignore[attr-defined]
        assert go.wait(60)  # type: ignore[attr-defined]
        return real(*a)

    formats._replace_folder = held
    vitkit.save_pretrained(model, out)


def test_two_processes_writing_one_folder_at_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A real race: one process is inside `save_pretrained(m, out)` while this one calls `save_pretrained` and
    `vitkit convert ... out --overwrite` into the same folder: both are refused naming the first one's pid (before
    the lock, one deleted the other's temporary folder and failed with a raw [Errno 2]); the first ends, and the
    folder holds its model whole, with nothing left beside it."""
    import multiprocessing

    mk = lambda w: vitkit.create_model("vit", width=w, depth=1, num_heads=2, mlp_dim=32, img_size=16,  # noqa: E731
                                       patch_size=8)
    first, second = mk(16), mk(32)
    src = save_pretrained(second, tmp_path / "src")
    out = tmp_path / "out"
    ctx = multiprocessing.get_context("fork")
    inside, go = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_save_holding, args=(first, out, inside, go))
    writer.start()
    try:
        assert inside.wait(60), "the first writer never took the folder's lock"
        held = f"checkpoint folder {out} is in use by another vitkit job \\(pid {writer.pid}\\)"
        with pytest.raises(BlockingIOError, match=held):
            vitkit.save_pretrained(second, out)
        assert main(["convert", str(src), str(out), "--to", "vitkit", "--overwrite"]) == 2
        assert f"in use by another vitkit job (pid {writer.pid})" in capsys.readouterr().err
    finally:
        go.set()
        writer.join(60)
    assert writer.exitcode == 0
    got = vitkit.load_pretrained(out)
    assert got.config.width == 16
    torch.testing.assert_close(got.state_dict(), first.state_dict(), atol=0, rtol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_a_killed_convert_to_a_bare_file_leaves_nothing_after_the_next_write(tmp_path: Path) -> None:
    """Before: a `convert --to timm t.safetensors` killed mid-write left its hidden `.t.safetensors.XXXX.tmp`
    behind for good; now the next write of the file removes it (holding the file's lock: never a live writer's)."""
    from vitkit.utils.files import claim_lock, release_lock

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=8)
    killed = tmp_path / ".t.safetensors.k1ll3d.tmp"
    killed.write_bytes(b"half a file")
    fd = claim_lock(tmp_path / ".t.safetensors.lock", "another writer")
    with pytest.raises(BlockingIOError, match="checkpoint file .*t.safetensors is in use by another vitkit job"):
        save_pretrained(m, tmp_path / "t.safetensors", format="timm")
    release_lock(tmp_path / ".t.safetensors.lock", fd)
    assert killed.exists()
    assert main(["convert", str(save_pretrained(m, tmp_path / "m")), str(tmp_path / "t.safetensors"), "--to",
                 "timm"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "t.safetensors"]
