"""Stock hub folders (config.json and preprocessor_config.json as the hub ships them, random weights from
transformers' classes) give, from image files through `vitkit embed`, transformers' own pipeline's features:
`AutoImageProcessor` + the model's pooled output, on non-square, large, small, grey, RGBA and EXIF-rotated photos."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from tests.hub_folders import hub_folder, transformers_features
from vitkit.cli import main

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

pytest.importorskip("transformers")


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_a_stock_dinov2_small_folder_embeds_files_as_transformers_pipeline(tmp_path: Path, photos: list[Path]) -> None:
    """facebook/dinov2-small as shipped: a 518 config (37 x 37 E_pos) and a processor cropping 224. It used to be
    refused; it runs at 224 with E_pos resampled to 16 x 16 as transformers' Dinov2Model does, and says so. Its
    width, heads, geometry and processor as shipped; 2 of its 12 blocks (the table enters before the first)."""
    folder = hub_folder(tmp_path, "dinov2", small=False, layers=2)
    model = vitkit.load_pretrained(folder)
    assert model.config.img_size == (224, 224) and model.config.grid_size == (16, 16)
    assert model.config.posemb_resample == "bicubic"
    assert "518x518" in model.config.extra["resampled_for_input"]
    pre = model.preprocess
    assert (pre.img_size, int(224 / pre.crop_pct), pre.interpolation, pre.crop_offset) == ((224, 224), 256,
                                                                                             "bicubic", "floor")
    photos = [p for p in photos if p.stem in ("wide", "grey", "rotated")]  # full size: a few files (all: below)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    out = tmp_path / "f.npz"
    assert main(["embed", *map(str, photos), str(broken), "--model", str(folder), "-o", str(out),
                 "--runtime", "torch"]) == 1  # the unreadable file is named and skipped, the rest written
    with np.load(out, allow_pickle=False) as z:
        paths, feats = list(z["paths"]), z["features"]
    assert paths == list(map(str, photos)) and feats.dtype == np.float32 and feats.shape == (len(photos), 384)
    ref = transformers_features(folder, photos, "dinov2").numpy()
    cos = _cos(feats, ref)
    assert cos.min() >= 0.9999, dict(zip([p.name for p in photos], cos))
    # saved, the choice stays: the vitkit folder runs at 224 with the resampled table and the same preprocessing
    vitkit.save_pretrained(model, tmp_path / "saved")
    again = vitkit.load_pretrained(tmp_path / "saved")
    assert again.config.img_size == (224, 224) and again.preprocess == model.preprocess
    torch.testing.assert_close(again.pos_embed, model.pos_embed)


@pytest.mark.parametrize("family", ["dinov2_reg", "clip", "siglip", "deit", "vit", "mae"])
def test_stock_hub_folders_of_every_family_embed_files_as_transformers_pipeline(tmp_path: Path, photos: list[Path],
                                                                                family: str) -> None:
    """Each family's hub processor as shipped (CLIP's and DeiT's legacy bare-number sizes included), width and
    depth shrunk; the default feature is the family's pooled output (CLIP: the projected image embedding, DeiT:
    DeiTModel's pooler_output)."""
    folder = hub_folder(tmp_path, family)
    emb = vitkit.embed(folder, [str(p) for p in photos])
    assert emb.paths == list(map(str, photos)) and not emb.skipped
    ref = transformers_features(folder, photos, family).numpy()
    assert emb.features.shape == ref.shape
    cos = _cos(emb.features, ref)
    assert cos.min() >= 0.9999, dict(zip([p.name for p in photos], cos))
    if family == "dinov2_reg":  # antialiased bicubic E_pos, as Dinov2WithRegistersModel resamples it
        model = vitkit.load_pretrained(folder)
        assert model.config.posemb_resample == "bicubic_antialias" and model.config.img_size == (224, 224)


def test_deit_pooled_is_deitmodels_pooler_output_where_the_folder_has_its_weights(tmp_path: Path,
                                                                                  photos: list[Path]) -> None:
    """transformers' DeiTModel(add_pooling_layer=True): `embed`'s default is its pooler_output (dense + tanh on the
    class token), saved back with the pooler; without the pooler's weights (add_pooling_layer=False, or the
    classifier with teacher) the class token, and the log says so."""
    transformers = pytest.importorskip("transformers")
    folder = hub_folder(tmp_path, "deit")
    files = [str(p) for p in photos[:3]]
    ref = transformers_features(folder, photos[:3], "deit")
    hf = transformers.DeiTModel.from_pretrained(folder).eval()
    assert hf.pooler is not None
    model = vitkit.load_pretrained(folder)
    assert model.config.representation_size == 48 and model.config.distill_token
    logs: list[str] = []
    emb = vitkit.embed(model, files, log=logs.append)
    assert emb.feature == "pre_logits" and any("pooler_output" in m for m in logs)
    assert _cos(emb.features, ref.numpy()).min() >= 0.9999  # the same files through transformers' pipeline
    np.testing.assert_allclose(emb.features, ref.numpy(), atol=5e-4)
    cls = vitkit.embed(model, files, feature="cls").features
    assert np.abs(cls - emb.features).max() > 0.1  # the pooler changed the class token
    # saved as transformers' DeiTModel, the pooler goes with it
    vitkit.save_pretrained(model, tmp_path / "saved", format="hf")
    again = transformers.DeiTModel.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        x = torch.randn(2, 3, 224, 224)
        torch.testing.assert_close(again(pixel_values=x).pooler_output, hf(pixel_values=x).pooler_output)
    with pytest.raises(ValueError, match="timm"):
        vitkit.save_pretrained(model, tmp_path / "t", format="timm")
    tuned = vitkit.load_pretrained(folder)
    tuned.reset_head(3)  # fine-tuning: DeiT's two heads read the tokens; the pooler goes
    assert tuned.pre_logits is None and tuned.config.representation_size is None and tuned.config.num_classes == 3
    # no pooler weights in the folder: the class token, said
    bare = transformers.DeiTModel(hf.config, add_pooling_layer=False)
    bare.load_state_dict({k: v for k, v in hf.state_dict().items() if not k.startswith("pooler.")})
    bare.save_pretrained(tmp_path / "nopool")
    (tmp_path / "nopool" / "preprocessor_config.json").write_text((folder / "preprocessor_config.json").read_text())
    logs = []
    emb = vitkit.embed(tmp_path / "nopool", files, log=logs.append)
    assert emb.feature == "cls" and any("no DeiTModel pooler" in m for m in logs)
    np.testing.assert_allclose(emb.features, cls, atol=1e-5)
    out = tmp_path / "nopool.npz"
    assert main(["embed", *files, "--model", str(tmp_path / "nopool"), "-o", str(out), "--runtime", "torch"]) == 0


def test_embed_pools_normalises_and_writes_parquet_and_jsonl(tmp_path: Path, photos: list[Path]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    folder = hub_folder(tmp_path, "dinov2_reg")
    model = vitkit.load_pretrained(folder)
    files = [str(p) for p in photos[:3]]
    tokens = {f: vitkit.embed(model, [f], feature="patch").features[0] for f in files}
    cm = vitkit.embed(model, files, feature="cls_mean", normalize=True)
    onnx = vitkit.embed(model, files, feature="cls_mean", normalize=True, runtime="onnxruntime")  # exported alike
    np.testing.assert_allclose(onnx.features, cm.features, atol=1e-5)
    for f, row in zip(files, cm.features):
        assert tokens[f].shape == (256, 48)  # 16 x 16 patches, class token and 4 registers left out
        mean = tokens[f].mean(0)
        assert np.isclose(np.linalg.norm(row), 1, atol=1e-5)
        np.testing.assert_allclose(row[48:] / np.linalg.norm(row[48:]), mean / np.linalg.norm(mean), atol=1e-5)
    assert main(["embed", *files, "--model", str(folder), "-o", str(tmp_path / "f.parquet"), "--pool", "mean",
                 "--no-progress", "--runtime", "torch"]) == 0
    table = pq.read_table(tmp_path / "f.parquet")
    assert table.column("path").to_pylist() == files
    got = np.asarray(table.column("feature").to_pylist(), np.float32)
    np.testing.assert_allclose(got, np.stack([tokens[f].mean(0) for f in files]), atol=1e-4)
    assert json.loads(table.schema.metadata[b"vitkit.shape"]) == [48]
    assert main(["embed", *files, "--model", str(folder), "-o", str(tmp_path / "f.jsonl"), "--pool", "mean",
                 "--runtime", "torch"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(np.asarray([r["feature"] for r in rows]), got, atol=1e-6)
    # an existing output is not overwritten without --overwrite; an unknown suffix is refused before any work
    assert main(["embed", *files, "--model", str(folder), "-o", str(tmp_path / "f.jsonl")]) == 2
    assert main(["embed", *files, "--model", str(folder), "-o", str(tmp_path / "f.csv")]) == 2



def test_embed_merge_gives_the_token_merged_models_features(tmp_path: Path, photos: list[Path]) -> None:
    """`embed --merge R` is `set_token_merging(R)` on the loaded model (ToMe: registers never merged)."""
    folder = hub_folder(tmp_path, "dinov2_reg")
    files = [str(p) for p in photos[:2]]
    model = vitkit.load_pretrained(folder)
    x = torch.randn(1, 3, *model.config.img_size)
    full = model.tokens(x).z.shape[1]
    model.set_token_merging(8)
    merged = vitkit.embed(model, files, feature="mean").features
    t = model.tokens(x)
    assert t.z.shape[1] < full and t.sizes is not None  # merging ran (the size-weighted mean stays near the full one)
    assert main(["embed", *files, "--model", str(folder), "-o", str(tmp_path / "m.npz"), "--merge", "8",
                 "--pool", "mean", "--runtime", "torch", "--no-progress"]) == 0
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        np.testing.assert_allclose(z["features"], merged, atol=1e-5)

TINY_RUN = ["--no-progress", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set",
            "train.batch_size=8", "--set", "data.num_workers=0", "--set", "train.tensorboard=false", "--set",
            "data.eval_batch_size=64"]


def test_a_finetuned_stock_dinov2_keeps_the_checkpoints_preprocessing(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A stock DINOv2 folder fine-tuned on grey lfw (converted to RGB, said): trained, evaluated and saved with the
    checkpoint's shorter side 256 -> centre crop 224, bicubic, ImageNet mean/std, not a plain bilinear resize; a
    folder without a processor file keeps the loader's assumption as a line of the run, not as a stale note."""
    folder = hub_folder(tmp_path, "dinov2")
    src = vitkit.load_pretrained(folder).preprocess
    assert main(["finetune", "--model", str(folder), "--data", "lfw", "--img-size", "112", "--out",
                 str(tmp_path / "ft"), *TINY_RUN]) == 0
    out = capsys.readouterr()
    assert "converted to RGB" in out.out + out.err
    ft = vitkit.load_pretrained(tmp_path / "ft" / "model")
    pre = ft.preprocess
    assert (pre.crop_pct, pre.crop_mode, pre.crop_offset, pre.interpolation, pre.mean, pre.std) == (
        src.crop_pct, "center", "floor", "bicubic", src.mean, src.std)
    assert int(112 / pre.crop_pct) == 128 and ft.config.num_classes == 2 and pre.labels
    (folder / "preprocessor_config.json").unlink()
    assumed = vitkit.load_pretrained(folder).config.extra["assumed"]
    assert "preprocess" in assumed
    assert main(["finetune", "--model", str(folder), "--data", "lfw", "--img-size", "112", "--out",
                 str(tmp_path / "ft2"), *TINY_RUN]) == 0
    assert "assumed when it was read" in capsys.readouterr().out
    ft2 = vitkit.load_pretrained(tmp_path / "ft2" / "model")
    assert "preprocess" not in ft2.config.extra.get("assumed", {})
    saved = json.loads((tmp_path / "ft2" / "model" / "config.json").read_text())
    assert "0.5 assumed" not in json.dumps(saved) and "absent" not in json.dumps(saved)


def test_prefetched_batches_come_in_order_and_errors_and_early_exits_reach_the_consumer() -> None:
    from vitkit.inference.features import prefetched

    assert list(prefetched(iter(range(10)), depth=2)) == list(range(10))

    def failing():  # noqa: ANN202
        yield 1
        raise ValueError("cannot read image x.jpg")

    got = []
    with pytest.raises(ValueError, match="x.jpg"):
        for b in prefetched(failing()):
            got.append(b)
    assert got == [1]
    for b in prefetched(iter(range(1000)), depth=1):  # leaving early ends the producer (no hang)
        if b == 3:
            break


def test_uint8_resize_is_the_float_resize_rounded_to_whole_levels(photos: list[Path]) -> None:
    """embed's 8-bit path (torch's uint8 antialiased kernels, as Pillow resizes: each pass rounded) stays within a few levels of the
    float path: the same geometry, rounding apart."""
    from vitkit.data.preprocess import read_image
    from vitkit.models.preprocess import PreprocessConfig

    pre = PreprocessConfig(img_size=(224, 224), crop_pct=224 / 256, interpolation="bicubic", crop_offset="floor")
    for f in photos:
        a = pre.resize(read_image(f, 3, pre.decode_size())[None])
        b = pre.resize(read_image(f, 3, pre.decode_size(), keep_uint8=True)[None])
        assert b.dtype == torch.float32 and a.shape == b.shape
        d = (a - b).abs() * 255
        assert d.mean() < 0.5 and d.max() <= 8, (f.name, float(d.mean()), float(d.max()))


def test_a_timm_folder_whose_pretrained_cfg_input_size_differs_runs_at_it(tmp_path: Path) -> None:
    """timm builds the model at the hub config's size and resamples the stored E_pos at load (antialiased
    bicubic, resample_abs_pos_embed); vitkit does the same instead of refusing the folder."""
    from vitkit.models.posemb import resample_posemb

    torch.manual_seed(0)
    m = vitkit.create_model("vit", img_size=32, patch_size=8, width=32, depth=1, num_heads=2, mlp_dim=64,
                            num_classes=3, posemb_resample="bicubic_antialias")  # as timm's own models
    vitkit.save_pretrained(m, tmp_path / "t", format="timm")
    doc = json.loads((tmp_path / "t" / "config.json").read_text())
    assert doc["pretrained_cfg"]["input_size"] == [3, 32, 32]
    doc["pretrained_cfg"]["input_size"] = [3, 48, 48]
    (tmp_path / "t" / "config.json").write_text(json.dumps(doc))
    got = vitkit.load_pretrained(tmp_path / "t")
    assert got.config.img_size == (48, 48) and got.preprocess.img_size == (48, 48)
    assert got.config.posemb_resample == "bicubic_antialias" and "32x32" in got.config.extra["resampled_for_input"]
    want = resample_posemb(m.pos_embed.detach(), (6, 6), (4, 4), 1, antialias=True)
    torch.testing.assert_close(got.position_embedding((6, 6)).detach(), want)  # E_pos at the input size, once
    torch.testing.assert_close(got.pos_embed.detach(), m.pos_embed.detach())  # the stored table kept as it came
