"""Serving: `predict` over folders and list files in batches with CSV / JSONL output, and the inference
precision chosen by the hardware (`auto`), checked against fp32 eager.

`vitkit predict --native` (vitkit/inference/predict.py's `predict_native`, NaViT): each image at its own aspect
ratio, at most --max-patches patches, no crop, packed with the others, on an ordinary (fixed-size) checkpoint."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import NATIVE_SIZES, digits_model, native_images, tiny_labelled_vit
from vitkit.cli import main
from vitkit.data.digits import load_digits_split
from vitkit.data.preprocess import load_image, read_image
from vitkit.inference.runtime import inference_model
from vitkit.models.packing import native_grid
from vitkit.utils.precision import input_dtype
from vitkit.utils.precision import resolve as resolve_precision


def test_auto_precision_follows_the_cpu_flags() -> None:
    assert resolve_precision("auto", "cpu", flags={"avx2", "avx512f", "avx512_bf16"})[0] == "bf16"
    assert resolve_precision("auto", "cpu", flags={"avx2", "amx_bf16"})[0] == "bf16"
    p, why = resolve_precision("auto", "cpu", flags={"avx2", "avx512f", "avx512_vnni"})
    assert p == "fp32" and "emulated" in why
    assert resolve_precision("bf16", "cpu", flags=set()) == ("bf16", "asked for")
    with pytest.raises(ValueError, match="--precision must be one of auto, fp32, bf16, bf16-autocast, int8"):
        resolve_precision("fp8")


def test_bf16_inference_agrees_with_fp32_eager() -> None:
    """bf16 weights and inputs keep 8 bits of mantissa: logits within 5% of their scale (mean error < 1%) and
    top-1 agreement >= 95% on the digits test images through a trained-like (non-zero) head."""
    torch.manual_seed(0)
    m = digits_model(width=32, depth=2, num_heads=2, mlp_dim=64)
    torch.nn.init.normal_(m.head.weight, std=0.5)
    _, test = load_digits_split()
    x = m.preprocess(test.images[:200])
    with torch.inference_mode():
        ref = m(x)
        got = inference_model(vitkit.formats.adapt(m), "bf16")(x.to(input_dtype("bf16"))).float()
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    scale = ref.abs().max()
    d = (got - ref).abs()
    assert agree >= 0.95 and d.max() < 0.05 * scale and d.mean() < 0.01 * scale, (agree, d.max(), scale)


def _digits(root: Path, n: int = 12) -> list[Path]:
    _, test = load_digits_split()
    files = []
    for i in range(n):
        f = root / f"{int(test.labels[i])}" / f"{i:03d}.png"
        f.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.round(test.images[i, 0].numpy() * 255).astype(np.uint8)).save(f)
        files.append(f)
    return files


def test_predict_streams_folders_and_lists_to_csv_and_jsonl(tmp_path: Path, capsys, monkeypatch) -> None:
    m = digits_model(width=32, depth=1, num_heads=2, mlp_dim=32)
    torch.nn.init.normal_(m.head.weight, std=0.5)
    vitkit.save_pretrained(m, tmp_path / "m")
    files = _digits(tmp_path / "imgs")
    (tmp_path / "imgs" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    lst = tmp_path / "some.txt"
    lst.write_text("# path label\nimgs/" + "\nimgs/".join(str(f.relative_to(tmp_path / "imgs")) for f in files[:3]) + "\n")
    args = ["predict", str(tmp_path / "imgs"), str(lst), "--model", str(tmp_path / "m"), "--batch-size", "5",
            "--topk", "3", "--precision", "fp32", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "p.csv")]) == 1  # the broken file is named, the rest run
    err = capsys.readouterr().err
    assert "zz_broken.png" in err and "1 of 16 images could not be read" in err and "precision: fp32" in err
    rows = list(csv.reader((tmp_path / "p.csv").open()))
    assert rows[0] == ["path", "label_1", "prob_1", "label_2", "prob_2", "label_3", "prob_3"]
    expected = sorted(str(f) for f in files) + [str(tmp_path / "imgs" / f.relative_to(tmp_path / "imgs"))
                                                 for f in files[:3]]
    assert [r[0] for r in rows[1:]] == expected  # input order: the folder (sorted), then the list
    pp = m.preprocess
    with torch.inference_mode():
        x = torch.stack([load_image(pp, p) for p in expected])
        ref = torch.softmax(m.eval()(pp.normalize(x)), -1).topk(3)
    for r, vals, idx in zip(rows[1:], ref.values.tolist(), ref.indices.tolist()):
        assert [r[1], r[3], r[5]] == [str(i) for i in idx]
        assert [float(r[2]), float(r[4]), float(r[6])] == pytest.approx(vals, abs=1e-5)
    assert main([*args[:-1], "--output", str(tmp_path / "p.jsonl")]) == 1
    recs = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["path"] for r in recs] == expected and all(len(r["labels"]) == 3 for r in recs)
    # --compile goes through torch.compile (stubbed here: compiling is timed in the benchmarks, not tests)
    seen = []
    monkeypatch.setattr(torch, "compile", lambda mod, **kw: seen.append(mod) or mod)
    assert main(["predict", str(files[0]), "--model", str(tmp_path / "m"), "--compile", "--precision", "fp32"]) == 0
    assert len(seen) == 1
    assert main(["predict", str(files[0]), "--model", str(tmp_path / "m"), "--output", str(tmp_path / "x.txt")]) == 2


def test_eval_takes_a_precision(tmp_path: Path, capsys) -> None:
    m = digits_model(width=32, depth=1, num_heads=2, mlp_dim=32)
    torch.nn.init.normal_(m.head.weight, std=0.5)
    vitkit.save_pretrained(m, tmp_path / "m")
    top1 = {}
    for prec in ("fp32", "bf16"):
        assert main(["eval", "--model", str(tmp_path / "m"), "--precision", prec]) == 0
        top1[prec] = float(capsys.readouterr().out.split("top-1: ")[1].split("%")[0])
    assert abs(top1["fp32"] - top1["bf16"]) <= 2.0, top1


def test_predict_native_runs_each_image_at_its_own_aspect(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The top-k of each image is the model's answer on that image resized (aspect kept, no crop) to its native
    grid under --max-patches, the model moved to that size by the §3.2 resampling (`set_img_size`)."""
    m = tiny_labelled_vit()
    vitkit.save_pretrained(m, tmp_path / "m")
    files = native_images(tmp_path)
    out = tmp_path / "p.jsonl"
    assert main(["predict", *map(str, files), "--model", str(tmp_path / "m"), "--native", "--max-patches", "16",
                 "--topk", "5", "--batch-size", "3", "--output", str(out), "--no-progress"]) == 0
    assert "at most 16 patches per image" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["path"] for r in rows] == list(map(str, files))
    assert native_grid(40, 160, 8, 16) == (2, 8)  # the 4:1 strip keeps its aspect: 2 x 8 patches
    for f, (h, w), r in zip(files, NATIVE_SIZES, rows):
        x = m.preprocess.native(read_image(str(f), 3)[None], 8, 16)
        gh, gw = native_grid(h, w, 8, 16)
        assert x.shape[-2:] == (8 * gh, 8 * gw)
        alone = copy.deepcopy(m)
        alone.set_img_size((8 * gh, 8 * gw))
        with torch.no_grad():
            probs = alone(x).softmax(-1)[0]
        top = probs.topk(5)
        assert r["labels"] == [m.preprocess.labels[i] for i in top.indices.tolist()]
        assert r["probs"] == pytest.approx(top.values.tolist(), abs=1e-5)


@pytest.mark.parametrize(("extra", "pattern"), [
    (["--native", "--runtime", "onnxruntime"], "--native runs in torch: an exported onnxruntime graph has one fixed"),
    (["--native", "--precision", "int8"], "int8 runs in onnxruntime at a fixed input size"),
    (["--native", "--compile"], "every packed batch has its own shape"),
    (["--max-patches", "16"], "--max-patches applies to --native"),
    (["--native", "--merge", "2"], "token merging"),
])
def test_predict_native_refuses_what_cannot_run_packed(tmp_path: Path, capsys, extra: list[str],  # noqa: ANN001
                                                       pattern: str) -> None:
    vitkit.save_pretrained(tiny_labelled_vit(), tmp_path / "m")
    f = tmp_path / "a.png"
    Image.fromarray(np.zeros((40, 160, 3), dtype=np.uint8)).save(f)
    assert main(["predict", str(f), "--model", str(tmp_path / "m"), *extra]) == 2
    assert pattern in capsys.readouterr().err
