"""Run configs and the shipped recipes: the paper's numbers (appendix B) load and dry-run; overrides;
gradient accumulation equals one big batch; Polyak averaging; the lr sweep picks on dev."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import digits_model, digits_trainer
from vitkit.train.config import TrainConfig, load_config, recipe_names
from vitkit.train.engine import Trainer
from vitkit.train.run import run_experiment, run_sweep

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

TINY = ["model.img_size=16", "model.patch_size=8", "model.width=16", "model.depth=1", "model.num_heads=2",
        "model.mlp_dim=32", "train.tensorboard=false"]

PRETRAIN = {  # recipe: (lr, weight decay, decay, dropout, classes)
    "pretrain_jft_b16": (8e-4, 0.1, "linear", 0.0, 18291),
    "pretrain_i21k_b16": (1e-3, 0.03, "linear", 0.1, 21843),
    "pretrain_i1k_b16": (3e-3, 0.3, "cosine", 0.1, 1000),
}
FINETUNE = {  # recipe: (steps, dev fraction, classes)
    "finetune_cifar10": (10000, 0.02, 10), "finetune_cifar100": (10000, 0.02, 100), "finetune_pets": (500, 0.1, 37),
    "finetune_flowers": (500, 0.1, 102), "finetune_imagenet": (20000, 0.01, 1000),
}


def test_paper_recipes_carry_the_papers_numbers() -> None:
    assert set(PRETRAIN) | set(FINETUNE) | {"digits_pretrain", "digits_finetune"} <= set(recipe_names())
    for name, (lr, wd, decay, dropout, k) in PRETRAIN.items():
        c = load_config(name)
        t = c.train
        assert (t.optimizer, t.betas, t.lr, t.weight_decay, t.schedule) == ("adamw", (0.9, 0.999), lr, wd, decay)
        assert (t.warmup_steps, t.clip_norm, t.batch_size, c.model.img_size) == (10000, 1.0, 4096, 224)
        assert (c.model.arch["dropout"], c.model.num_classes) == (dropout, k)
    for name, (steps, dev, k) in FINETUNE.items():
        c = load_config(f"recipes/{name}.toml")  # the repo-root spelling works too
        t = c.train
        assert (t.optimizer, t.momentum, t.weight_decay, t.clip_norm, t.schedule) == ("sgd", 0.9, 0.0, 1.0, "cosine")
        assert (t.batch_size, t.steps, c.model.img_size, c.data.dev_fraction) == (512, steps, 384, dev)
        assert c.sweep.lrs == [0.001, 0.003, 0.01, 0.03] and c.model.num_classes == k and t.warmup_steps > 0
    assert load_config("finetune_imagenet").train.ema_decay == 0.9999


@pytest.mark.parametrize("name", sorted(PRETRAIN) + sorted(FINETUNE))
def test_recipe_dry_runs(name: str, tmp_path: Path) -> None:
    cfg = load_config(name, TINY + ["model.representation_size=16", "train.grad_accum=4"])
    res = run_experiment(cfg, tmp_path, dry_run=2, progress=False, save=True)  # a dry run saves only when asked
    assert res["steps"] == 2 and (tmp_path / "model" / "model.safetensors").exists()
    recs = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r] == [1, 2]


def test_overrides_and_errors() -> None:
    c = load_config("digits_pretrain", ["optim.lr=0.003", "optim.betas=[0.8, 0.9]", "data.name=lfw"])
    assert c.train.lr == 0.003 and c.train.betas == (0.8, 0.9) and c.data.name == "lfw"
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lrr'\] in \[optim\] \(did you mean lr\?\)"):
        load_config("digits_pretrain", ["optim.lrr=1"])
    with pytest.raises(ValueError, match=r"unknown section \[optimm\] \(did you mean optim\?\)"):
        load_config("digits_pretrain", ["optimm.lr=1"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['widht'\] in \[model\] \(did you mean width\?\)"):
        load_config(None, values={"model.widht": 8})
    # a bad value fails when the config is built, naming its recipe key; typed values need no TOML quoting
    with pytest.raises(ValueError, match="optim.lr must be"):
        load_config("digits_pretrain", values={"optim.lr": -1.0})
    odd = load_config("digits_pretrain", values={"data.path": "it's \"quoted\"", "data.name": "folder"})
    assert odd.data.path == "it's \"quoted\"" and odd.updated({"optim.lr": 0.5}).train.lr == 0.5
    # the nested dict run_config.json holds reads back to an equal config; --set wins over typed values
    assert type(c).from_sections(c.sections()) == c
    assert load_config("digits_pretrain", ["optim.lr=0.5"], values={"optim.lr": 0.1}).train.lr == 0.5
    with pytest.raises(ValueError, match="section.key=value"):
        load_config("digits_pretrain", ["lr=1"])
    with pytest.raises(FileNotFoundError, match="no config file or recipe 'nope'"):
        load_config("nope")


def _digits_trainer(out: Path, **cfg) -> Trainer:
    torch.manual_seed(0)
    model = digits_model(width=32, depth=2, num_heads=2, mlp_dim=64)
    tc = TrainConfig(**{"steps": 3, "batch_size": 16, "warmup_steps": 1, "log_every": 2, **cfg})
    return digits_trainer(model, tc, out)


def test_gradient_accumulation_equals_one_big_batch(tmp_path: Path) -> None:
    for opt in ("sgd", "adamw"):
        ref = _digits_trainer(tmp_path / "a", optimizer=opt, lr=0.05 if opt == "sgd" else 1e-3)
        ref.fit()
        acc = _digits_trainer(tmp_path / "b", optimizer=opt, lr=0.05 if opt == "sgd" else 1e-3, grad_accum=4)
        acc.fit()
        for (k, v), w in zip(ref.model.state_dict().items(), acc.model.state_dict().values()):
            torch.testing.assert_close(v, w, rtol=0, atol=1e-4 if opt == "adamw" else 1e-6, msg=k)


def test_polyak_averaging_is_evaluated_and_kept(tmp_path: Path) -> None:
    seen = []
    t = _digits_trainer(tmp_path, optimizer="sgd", lr=0.1, ema_decay=0.5, eval_every=3)
    t.eval_fn = lambda m: seen.append({k: v.clone() for k, v in m.state_dict().items()}) or {"top1": 0.0}
    t.fit()
    raw = {k: v.clone() for k, v in t.model.state_dict().items()}  # after fit: the EMA weights
    for k, v in t.ema.shadow.items():
        assert torch.equal(seen[0][k], v) and torch.equal(raw[k], v)


def test_sweep_picks_on_dev_never_on_test(tmp_path: Path) -> None:
    cfg = load_config("digits_pretrain", ["model.width=16", "model.depth=1", "model.num_heads=2", "model.mlp_dim=32",
                                          "schedule.steps=6", "schedule.warmup_steps=1", "train.batch_size=32",
                                          "train.tensorboard=false", "data.num_workers=0", "train.eval_every=0"])
    res = run_sweep(cfg, tmp_path, [1e-4, 3e-3], progress=False)
    assert [r["lr"] for r in res["runs"]] == [1e-4, 3e-3]
    best = max(res["runs"], key=lambda r: r["dev_top1"])
    assert res["best_lr"] == best["lr"] and json.loads((tmp_path / "sweep.json").read_text())["best_lr"] == best["lr"]
    for r in res["runs"]:
        result = json.loads((Path(r["out"]) / "result.json").read_text())
        assert "dev" in result and "test" not in result
    with pytest.raises(ValueError, match="dev split"):
        run_sweep(load_config("digits_pretrain", ["data.dev_fraction=0"]), tmp_path / "x", [0.1])


def test_finetune_reads_its_checkpoint_once_and_passes_typed_values(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """`vitkit finetune` loads --model once (its channels set the data's, then it is the model trained), and a
    path with quotes reaches the run config as it is (no TOML text in between)."""
    import vitkit.formats
    from vitkit.cli import main

    odd = tmp_path / "it's \"odd\""
    vitkit.formats.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), odd)
    reads = []
    real = vitkit.formats.load_pretrained
    monkeypatch.setattr(vitkit.formats, "load_pretrained", lambda p, **kw: reads.append(str(p)) or real(p, **kw))
    assert main(["finetune", "--model", str(odd), "--config", "digits_finetune", "--img-size", "16", "--steps", "2",
                 "--set", "train.batch_size=8", "--set", "data.num_workers=0", "--set", "train.tensorboard=false",
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert reads == [str(odd)]
    saved = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert saved["model"]["pretrained"] == str(odd) and saved["data"]["channels"] == 1
