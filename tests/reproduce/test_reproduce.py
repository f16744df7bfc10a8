"""`vitkit reproduce` and what it stands on: the procedural glyph set, nested subsets, FLOPs on one axis
for ViTs and ResNets, evaluators during training, few-shot transfer, and the resumable smoke run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import check_reproduction
from vitkit.cli import main
from vitkit.data.config import DataConfig
from vitkit.data.datasets import open_splits
from vitkit.data.glyphs import glyph_test_size, glyphs
from vitkit.inference.evaluate import eval_loader
from vitkit.inference.fewshot import extract_features, fewshot_table
from vitkit.models import create_model
from vitkit.models.flops import model_flops, vit_flops
from vitkit.reproduce import CROSSOVER_SCALES, EXPERIMENTS, SMOKE, runs
from vitkit.reproduce.crossover import FAMILIES, grid_runs
from vitkit.reproduce.plan import MODELS, TINY_MODELS, Pretrain, pretrain_config
from vitkit.reproduce.runs import UNIT_FILE, Workbench
from vitkit.reproduce.transfer import FewShotEvaluator, transfer_sets
from vitkit.train.config import config_from_dict, load_config
from vitkit.train.metrics import read_metrics
from vitkit.train.run import check_config, run_experiment


def test_glyphs_are_a_pure_function_of_seed_split_and_index() -> None:
    small, large = glyphs(1500, 50, 16, seed=3), glyphs(2500, 50, 16, seed=3)
    assert small.images.shape == (1500, 1, 16, 16) and small.images.dtype == torch.uint8
    assert torch.equal(small.images, large.images[:1500])  # subsets nest
    assert np.array_equal(small.labels, large.labels[:1500])
    other_seed, test = glyphs(1500, 50, 16, seed=4), glyphs(1500, 50, 16, seed=3, split="test")
    assert not torch.equal(small.images, other_seed.images)
    assert not torch.equal(small.images, test.images)
    counts = np.bincount(large.labels, minlength=50)
    assert counts.min() > 20 and counts.max() < 80  # every class drawn, none dominant (expected 50)
    # images of one class resemble each other more than images of two classes (a learnable task)
    x = large.images.float().reshape(len(large), -1)
    x = F.normalize(x - x.mean(1, keepdim=True), dim=1)
    proto = torch.stack([x[torch.from_numpy(large.labels == c)].mean(0) for c in range(50)])
    nearest = (x @ proto.T).argmax(1).numpy()
    assert (nearest == large.labels).mean() > 0.3  # nearest class mean: far above chance (0.02)
    assert glyph_test_size(100_000) == 10_000 and glyph_test_size(500) == 1_000
    with pytest.raises(ValueError, match="glyph split"):
        glyphs(10, split="dev")


def test_glyphs_and_nested_subsets_through_the_data_config() -> None:
    base = {"name": "glyphs", "glyph_images": 2000, "glyph_classes": 20, "glyph_size": 12, "glyph_seed": 0}
    full = open_splits(DataConfig(**base))
    assert len(full["train"]) == 2000 and len(full["test"]) == 1000 and full["train"].classes[3] == "glyph0003"
    a = open_splits(DataConfig(**{**base, "subset": 300}))["train"]
    b = open_splits(DataConfig(**{**base, "subset": 900}))["train"]
    assert len(a) == 300 and set(a.indices) < set(b.indices)  # the smaller subset inside the larger
    with_dev = open_splits(DataConfig(**{**base, "subset": 300, "dev_fraction": 0.1}))  # the dev split comes out of the subset
    assert len(with_dev["train"]) + len(with_dev["dev"]) == 300
    with pytest.raises(ValueError, match="data.subset is 5000 but the training split has only 2000"):
        open_splits(DataConfig(**{**base, "subset": 5000}))
    with pytest.raises(ValueError, match="data.glyph_classes must be a whole number >= 2, got 1"):
        check_config(config_from_dict({"data": {"name": "glyphs", "glyph_classes": 1}}))
    with pytest.raises(ValueError, match="unknown key"):
        config_from_dict({"data": {"glyph_count": 10}})


def _conv_linear_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Independent count: 2 x multiply-adds of every Conv2d and Linear, from forward hooks."""
    total = [0]

    def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        if isinstance(m, nn.Conv2d):
            k = m.weight.shape[1] * m.weight.shape[2] * m.weight.shape[3]
            total[0] += 2 * out.numel() * k
        else:
            total[0] += 2 * out.numel() * m.in_features

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model.eval()(x)
    for h in hs:
        h.remove()
    return total[0]


def test_model_flops_put_vits_hybrids_and_resnets_on_one_axis() -> None:
    vit = create_model("vit", img_size=16, in_chans=1, num_classes=1000, **{k: v for k, v in MODELS["ViT"]["B"].items()
                                                                             if k != "name"})
    assert model_flops(vit) == vit_flops(vit.config).forward
    bit = create_model("bit", img_size=16, in_chans=1, num_classes=1000, layers=[2, 2], width_factor=0.5)
    assert model_flops(bit) == _conv_linear_flops(bit, torch.zeros(1, 1, 16, 16))
    hyb_cfg = {k: v for k, v in MODELS["Hybrid"]["B"].items() if k != "name"}
    hybrid = create_model("vit", img_size=16, in_chans=1, num_classes=1000, **hyb_cfg)
    stem = _conv_linear_flops(hybrid.patch_embed.backbone, torch.zeros(1, 1, 16, 16))
    assert model_flops(hybrid) == vit_flops(hybrid.config).forward + stem and stem > 0
    # the families of the data-size sweep are matched in compute (within 1.7x of each other)
    flops = [model_flops(m) for m in (vit, bit, hybrid)]
    assert max(flops) / min(flops) < 1.7


def test_a_reproduction_counts_each_architectures_flops_once(monkeypatch) -> None:  # noqa: ANN001
    """Workbench.pretrain's summary counts FLOPs once per architecture (a ResNet's count traces a forward pass): the
    same count for every model of it, another architecture counted anew."""
    counted: list[nn.Module] = []
    monkeypatch.setattr(runs, "model_flops", lambda m: counted.append(m) or model_flops(m))
    a, b = (create_model("bit", img_size=16, in_chans=1, num_classes=997, layers=[2, 2], width_factor=0.5)
            for _ in range(2))
    wide = create_model("bit", img_size=16, in_chans=1, num_classes=997, layers=[2, 2], width_factor=1.0)
    assert runs._forward_flops(a) == runs._forward_flops(b) == model_flops(b) and counted == [a]
    assert runs._forward_flops(wide) == model_flops(wide) > model_flops(a) and counted == [a, wide]


def test_evaluators_run_during_training_on_the_model_itself(tmp_path: Path) -> None:
    seen: list[tuple[int, type]] = []

    def probe(model: nn.Module) -> dict[str, float]:
        seen.append((len(seen), type(model)))
        assert not model.training  # evaluated in eval mode, then put back
        return {"norm": float(sum(p.detach().abs().sum() for p in model.parameters()))}

    cfg = config_from_dict(pretrain_config(Pretrain("ViT", "S", steps=6, objective="mpp"), SMOKE))
    cfg = cfg.updated({"train.eval_every": 3})
    run_experiment(cfg, tmp_path / "run", progress=False, evaluators={"probe": probe})
    from vitkit.models.vit import VisionTransformer

    assert [t for _, t in seen] == [VisionTransformer, VisionTransformer]  # the ViT, not its MPP wrapper
    logged = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval_probe_norm" in r]
    assert [r["step"] for r in logged] == [3, 6]
    assert logged[0]["eval_probe_norm"] != logged[1]["eval_probe_norm"]  # the weights changed in between


def test_fewshot_evaluator_equals_the_protocol_by_hand() -> None:
    torch.manual_seed(0)
    model = create_model("bit", img_size=16, in_chans=1, num_classes=5, layers=[1, 1], width_factor=0.5)
    from vitkit.models.preprocess import PreprocessConfig

    model.preprocess = PreprocessConfig(img_size=(16, 16), mean=(0.5,), std=(0.5,))
    ev = FewShotEvaluator(shots=(1, 5), seeds=(0, 1))
    got = ev(model)
    sets = transfer_sets()
    assert len(sets["digits"]["pool"]) + len(sets["digits"]["dev"]) == 1347 and len(sets["lfw"]["test"]) == 100

    def feats(ds):  # noqa: ANN001, ANN202
        return extract_features(model, eval_loader(ds, model.preprocess, 64), "pre_logits")

    pool, test = feats(sets["lfw"]["pool"]), feats(sets["lfw"]["test"])
    table = fewshot_table(pool, test, 2, (1, 5), (0, 1))
    assert got["lfw_test_5shot"] == pytest.approx(table[5]["mean"], abs=1e-12)
    assert got["lfw_test_1shot_std"] == pytest.approx(table[1]["std"], abs=1e-12)
    assert {"digits_dev_5shot", "digits_test_1shot", "lfw_test_1shot"} <= set(got) and "lfw_dev_5shot" not in got
    assert got["digits_test_5shot"] > 0.3  # random conv features already beat chance (0.1) on digits


# `vitkit reproduce --smoke` in parts, each one invocation in a folder of its own, so that pytest-xdist runs them on
# both workers: the families' grid (experiments 1-3 share its runs), ViT-B's variants, the optimisers and the
# crossover (its own grid: conftest.smoke_crossover, which test_crossover.py's progress-bar test reads too). The
# parts share few runs (ViT-B and ResNet-B on the whole set). MPP runs at the smoke scale in test_experiments_mpp.py
# (with two fine-tuning seeds), which checks its folder as these do; together they are every experiment
# (test_reproduce_all_is_every_experiment_of_the_smoke_parts).
SMOKE_PARTS = {"grid": ("fig4", "size", "fig5", "fig7"), "vit": ("hires", "posemb", "pooling"), "optim": ("optim",),
               "crossover": ("crossover",)}
SMOKE_ELSEWHERE = ("mpp",)  # tests/reproduce/test_experiments_mpp.py


def _smoke(out: Path, part: str, capsys) -> dict[str, dict]:  # noqa: ANN001
    """`vitkit reproduce <the part's experiments> --smoke` in `out`: the command's summary line, and each experiment
    as `check_reproduction` checks it; returns the results."""
    threads = torch.get_num_threads()
    try:  # one thread (torch and BLAS): a 2-core CI machine running other tests does not thrash
        assert main(["reproduce", *SMOKE_PARTS[part], "--smoke", "--out", str(out), "--no-progress", "--threads",
                     "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert "summary:" in capsys.readouterr().out
    return check_reproduction(out, SMOKE_PARTS[part])


def test_reproduce_all_is_every_experiment_of_the_smoke_parts(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """`--all` runs every experiment in the paper's order; the smoke tests hold each once."""
    got: list[list[str]] = []
    monkeypatch.setattr("vitkit.reproduce.run_experiments", lambda names, *a, **k: got.append(names) or {})
    assert main(["reproduce", "--all", "--smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    assert got == [list(EXPERIMENTS)] and "summary:" in capsys.readouterr().out
    parts = [n for names in SMOKE_PARTS.values() for n in names] + list(SMOKE_ELSEWHERE)
    assert sorted(parts) == sorted(EXPERIMENTS) and len(parts) == len(set(parts))


@pytest.mark.slow
@pytest.mark.usefixtures("figures_not_laid_out")  # reads its figures as files (check_reproduction)
def test_reproduce_smoke_the_families_grid(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Experiments 1-3 and 9 (data size, compute, what the ViT learns, model size x data) at the smoke scale, and
    the smoke fine-tunes learn."""
    out = tmp_path / "rep"
    res = _smoke(out, "grid", capsys)
    fig4 = res["fig4"]
    assert {r["images"] for r in fig4["rows"]} == set(SMOKE.sizes) and len(fig4["rows"]) == 3 * len(SMOKE.sizes)
    by = {(r["family"], r["size"]): r["train_flops"] for r in res["fig5"]["rows"]}
    assert by[("ViT", "S")] < by[("ViT", "B")] < by[("ViT", "L")]
    fig7 = res["fig7"]
    assert fig7["grid"] == [8, 8] and len(fig7["attention_distance_per_layer"]) == TINY_MODELS["ViT"]["L"]["depth"]
    # model size x data: two sizes of each family on each data size, each few-shot figure from its own run
    size = res["size"]
    assert {(r["family"], r["size"], r["images"]) for r in size["rows"]} == {
        (f, s, n) for f in ("ViT", "ResNet") for s in ("S", "B") for n in SMOKE.sizes}
    assert len({r["digits_test_5shot"] for r in size["rows"]}) > 1
    # the smoke fine-tunes (tiny models, 40 steps) learn: on average twice chance (10%) on the digits test split,
    # the best far above it -- a broken fine-tune (labels, head, schedule) leaves every one at chance (here the 12
    # fine-tunes of experiments 1-2 from their pre-trained models)
    tuned = sorted(json.loads(p.read_text())["test_top1"] for p in (out / "finetune").glob(f"*/{UNIT_FILE}"))
    assert len(tuned) >= 6 and np.mean(tuned) >= 0.2 and tuned[-1] >= 0.5, tuned


@pytest.mark.slow
@pytest.mark.usefixtures("figures_not_laid_out")  # reads its figures as files (check_reproduction)
def test_reproduce_smoke_vit_variants_and_resumes(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Experiments 4, 5 and 8 (resolution, position embeddings, pooling) at the smoke scale; a unit killed mid-run
    resumes; a folder holds one scale."""
    out = tmp_path / "rep"
    _smoke(out, "vit", capsys)
    # a unit killed mid-run (its state kept, its results not yet written) resumes; the rest is read back
    before = json.loads((out / "posemb" / "result.json").read_text())["results"]
    unit = Workbench(out, SMOKE, progress=False).folder(Pretrain("ViT", "B", posemb="learn2d"))
    for f in (UNIT_FILE, "result.json"):
        (unit / f).unlink()
    shutil.rmtree(unit / "model")
    stamp = {p: p.stat().st_mtime_ns for p in (out / "pretrain").glob("*/unit.json")}
    assert main(["reproduce", "posemb", "--smoke", "--out", str(out), "--no-progress"]) == 0
    assert json.loads((out / "posemb" / "result.json").read_text())["results"] == before
    assert all(p.stat().st_mtime_ns == t for p, t in stamp.items())  # nothing else was re-run
    # a folder holds one scale: the full run refuses a smoke folder
    assert main(["reproduce", "fig4", "--out", str(out), "--no-progress"]) == 2
    assert "holds a reproduction at scale 'smoke'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("figures_not_laid_out")  # reads its figures as files (check_reproduction)
def test_reproduce_smoke_adam_vs_sgd(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Experiment 10 at the smoke scale: each optimiser's pick is the best dev rate of its (possibly extended)
    sweep, the SGD runs used SGD."""
    out = tmp_path / "rep"
    optim = _smoke(out, "optim", capsys)["optim"]
    for o, grid in SMOKE.optimizer_lrs.items():
        sweep = optim["lr_sweeps"][o]
        assert set(grid) <= {r["lr"] for r in sweep}
        assert optim["lr"][o] == max(sweep, key=lambda r: (r["dev"], -r["lr"]))["lr"]
    sgd = json.loads(next((out / "pretrain").glob("resnet-B_sgd_*/train_config.json")).read_text())
    assert sgd["optimizer"] == "sgd" and sgd["momentum"] == 0.9


@pytest.mark.slow
def test_reproduce_smoke_crossover(smoke_crossover: Path) -> None:
    """Experiment 7 at the smoke scale: its grid (12 steps on the two largest sets only), the rates picked by the
    sweep (12 steps take the 8-step picks), the runs drawn from the stream."""
    out = smoke_crossover  # `reproduce crossover --smoke`, run once for the session (read only)
    assert "summary:" in (out / "stdout.txt").read_text()
    cross = check_reproduction(out, SMOKE_PARTS["crossover"])["crossover"]
    cs = CROSSOVER_SCALES["smoke"]
    assert cross["crossover_scale"]["name"] == "smoke" and cross["lr_from"] == {"12": 8}
    got = {(r["family"], r["steps"], r["images"], r["seed"]) for r in cross["rows"]}
    assert got == {(r.family, r.steps, r.images, r.seed) for r in grid_runs(cs, {(f, t): 0.0 for f in FAMILIES
                                                                                   for t in cs.schedules})}
    for fam in FAMILIES:
        for steps in (4, 8):
            sweep = cross["lr_sweeps"][f"{fam} {steps} steps"]
            assert cross["lr"][f"{fam} {steps}"] == max(sweep, key=lambda r: (r["dev"], -r["lr"]))["lr"]
            assert all(r["lr"] == cross["lr"][f"{fam} {r['steps']}"] for r in cross["rows"] if r["family"] == fam)
        assert cross["lr"][f"{fam} 12"] == cross["lr"][f"{fam} 8"]
    # the seed check's point: the grid's seed and the check's, paired (ViT - ResNet seed by seed) in every measure
    assert [(c["steps"], c["images"]) for c in cross["seed_check"]] == [(8, 4_000)] * 3
    assert all(c["seeds"] == sorted({*cs.seeds, *cs.check_seeds}) and len(c["gaps"]) == 2 for c in cross["seed_check"])
    assert (out / "crossover" / "runs" / "pretrain").is_dir()


def test_reproduce_names_and_arguments_are_checked(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from vitkit.commands.reproduce import NAMES

    assert NAMES == tuple(EXPERIMENTS)
    assert main(["reproduce", "--smoke", "--out", str(tmp_path)]) == 2
    assert "name the experiments" in capsys.readouterr().err
    assert main(["reproduce", "fig9", "--smoke", "--out", str(tmp_path)]) == 2
    assert "unknown experiment(s) ['fig9']" in capsys.readouterr().err
    for name in ("digits_demo",):  # the recipes still load with the new data keys
        assert load_config(name).data.subset == 0


def test_one_run_named_two_ways_is_trained_and_counted_once(tmp_path: Path) -> None:
    """Experiment 1 names the whole-set run `images=20000`, experiment 2 `images=0` (the whole set) and the scale's
    steps explicitly or not: one run folder. With `--jobs 2` both went to the worker pool, and the second worker
    found the first one's lock ("in use by another vitkit job"), which stopped `reproduce --all`."""
    wb = Workbench(tmp_path, SMOKE, progress=False)
    whole = Pretrain("ViT", "B", seed=1)
    same = [whole, Pretrain("ViT", "B", images=SMOKE.glyph_images, seed=1), Pretrain("ViT", "B", steps=SMOKE.steps, seed=1)]
    other = Pretrain("ViT", "B", images=SMOKE.sizes[0], seed=1)
    assert len({wb.folder(u) for u in same}) == 1 and len(set(same)) == 3  # equal folders, unequal objects
    assert wb.unique([*same, other, whole]) == [whole, other]
    wb.start([*same, other], "t")
    assert wb.bar is not None and wb.bar.total == 2 * SMOKE.steps
    wb.close()
