"""The run config's user-facing names: train.precision (train.bf16 deprecated but still read, saved runs too) and
model.img_size, whose default is the size a model name implies (a timm `_384` name trains at 384 px)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.inputs import noise_folder
from vitkit.cli import main
from vitkit.formats import load_pretrained
from vitkit.train.config import TrainConfig, load_config
from vitkit.train.run import _saved_flat

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read


def test_train_precision_replaces_bf16_which_still_reads_with_a_deprecation(tmp_path: Path) -> None:
    assert load_config(None).train.precision == "fp32"
    assert load_config("pretrain_base").train.precision == "bf16-autocast"  # shipped recipes use the new key
    old = tmp_path / "old.toml"
    old.write_text('[train]\nbf16 = true\n')
    with pytest.warns(FutureWarning, match=r'train.bf16 is deprecated: write train.precision = "bf16-autocast"'):
        assert load_config(str(old)).train.precision == "bf16-autocast"
    with pytest.warns(FutureWarning, match=r'--set: train.bf16 is deprecated: write train.precision = "fp32"'):
        assert load_config("pretrain_base", ["train.bf16=false"]).train.precision == "fp32"
    both = tmp_path / "both.toml"
    both.write_text('[train]\nbf16 = true\nprecision = "fp32"\n')
    with pytest.raises(ValueError, match=r"train.bf16 = true disagrees with train.precision = 'fp32'"):
        load_config(str(both))
    with pytest.raises(ValueError, match=r"train.precision must be one of fp32, bf16-autocast \(training keeps fp32 "
                                         r"master weights: bf16-autocast\); got 'bf16'"):
        load_config(None, ["train.precision=bf16"])
    with pytest.raises(ValueError, match="train.bf16 must be true or false"):
        load_config(None, ['train.bf16="yes"'])


def test_runs_saved_with_bf16_read_back_as_the_same_run(tmp_path: Path) -> None:
    """A train_config.json / training state and a run_config.json written before the rename read as the same
    settings (a resume sees no difference)."""
    now = load_config(None, ['train.precision="bf16-autocast"'])
    saved = now.train.to_dict()
    saved["bf16"] = True
    del saved["precision"]
    assert TrainConfig.from_dict(saved) == now.train
    sections = now.sections()
    del sections["train"]["precision"]
    sections["train"]["bf16"] = True
    (tmp_path / "run_config.json").write_text(json.dumps(sections))
    with pytest.warns(FutureWarning):
        assert _saved_flat(tmp_path / "run_config.json") == now.flat()


def test_model_img_size_defaults_to_what_the_name_implies() -> None:
    assert load_config(None, ['model.name="vit_base_patch16_384"']).model.img_size == 384
    assert load_config(None, ['model.name="vit_b16"']).model.img_size == 224
    assert load_config(None, ['model.img_size="64x48"']).model.size == (64, 48)  # the one syntax, also in recipes
    explicit = load_config(None, ['model.name="vit_base_patch16_384"', "model.img_size=224"]).model
    assert explicit.size == (224, 224)  # applied, and said
    assert explicit.size_note() == ("note: model.img_size = 224x224 overrides the 384 px that vit_base_patch16_384 "
                                    "implies (E_pos built for 224x224)")
    with pytest.raises(ValueError, match=r"model.img_size: expected a size S or HxW in pixels .*got '384y'"):
        load_config(None, ['model.img_size="384y"'])


def test_train_with_a_384_timm_name_builds_and_trains_at_384(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`vitkit train` with model.name = vit_tiny_patch16_384 and no model.img_size: a 384-px model (24x24 patches)
    is built, trained and saved (narrow and shallow, so that it takes seconds); an explicit size is applied and
    said. The data: a folder of 12 small grey images (its holdout, 2 of them, the final test: the digits' 450 test
    images at 384 px took 2.5 of the test's 3.8 CPU s)."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[model]\nname = "vit_tiny_patch16_384"\nin_chans = 1\nwidth = 16\ndepth = 1\nnum_heads = 2\nmlp_dim = 32\n'
        f'[data]\nname = "folder"\npath = "{noise_folder(tmp_path / "data")}"\nchannels = 1\naugment = "affine"\n'
        'flip = false\neval_split = "test"\nnum_workers = 0\n[schedule]\nsteps = 2\nwarmup_steps = 1\n'
        '[train]\nbatch_size = 4\neval_every = 0\ntensorboard = false\n')
    assert main(["train", "--config", str(recipe), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "16 px" not in out and "384x384 px" in out
    model = load_pretrained(tmp_path / "run" / "model")
    assert model.config.img_size == (384, 384) and model.config.grid_size == (24, 24)
    assert model.preprocess.img_size == (384, 384)
    assert model.config.gelu == "exact"  # the rest of what a timm name implies
    saved = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert saved["model"]["img_size"] == 384
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in m for m in metrics)
    assert main(["train", "--config", str(recipe), "--out", str(tmp_path / "run2"), "--no-progress",
                 "--set", "model.img_size=32", "--set", "schedule.steps=1"]) == 0
    assert "model.img_size = 32x32 overrides the 384 px that vit_tiny_patch16_384 implies" in capsys.readouterr().out
    assert load_pretrained(tmp_path / "run2" / "model").config.img_size == (32, 32)
