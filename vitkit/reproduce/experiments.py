"""The six experiments of `vitkit reproduce`, each the laptop version of one finding of the paper.

An experiment lists its units (plan) and turns their summaries into a result: JSON, a PNG and a
markdown table. The claims are quoted from the paper by section; REPRODUCTION.md gives the verdicts.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.data.glyphs import glyph_test_size, glyphs
from vitkit.formats import load_pretrained
from vitkit.inspect.report import InspectImage, inspect_model
from vitkit.models.mpp import mean_colour_targets
from vitkit.reproduce import plots, tuning
from vitkit.reproduce.crossover import CROSSOVER_SCALES, CrossoverScale, run_crossover
from vitkit.reproduce.plan import (
    FAMILIES,
    IMG_SIZE,
    MODEL_SETS,
    POSEMBS,
    SCALES,
    Pretrain,
    Scale,
    equal_budget_steps,
    pretrain_config,
    scale_label,
)
from vitkit.reproduce.runs import Finetune, Unit, Workbench
from vitkit.reproduce.stats import mean_ci, paired, pick_rate, seeded, sweep_text
from vitkit.reproduce.summary import load_results, write_summary
from vitkit.reproduce.tables import FIG7_IMAGES, ci_text, fig7_markdown, mpp_markdown
from vitkit.train.config import config_from_dict
from vitkit.train.run import build_model
from vitkit.utils.atomic import atomic_write_text
from vitkit.utils.hardware import manual_seed


@dataclass(frozen=True)
class Experiment:
    name: str
    claim: str  # what the paper says, with its section / figure
    units: Callable[[Scale], list[Unit]]
    run: Callable[[Workbench, Path], dict[str, Any]] | None  # None: the crossover, on its own grid (crossover.py)


def _pct(m: float, s: float | None = None) -> str:
    return f"{100 * m:.1f}" + ("" if s is None else f" ± {100 * s:.1f}")


def _pre(wb: Workbench, run: Pretrain) -> dict[str, Any]:
    """A pre-training run's summary, at its model's tuned rate (tuning.py) where it has no rate of its own."""
    return wb.pretrain(tuning.resolve(wb, run))


def _ft(wb: Workbench, ft: Finetune) -> dict[str, Any]:
    """A fine-tune's summary, its source at its model's tuned rate."""
    return wb.finetune(tuning.resolve(wb, ft))


def _tuned(wb: Workbench, runs: list[Pretrain]) -> dict[str, Any]:
    """What a result records of the pre-training rates its runs rest on: `lr_sweeps` (each tuned model's sweep, seed
    0, 5-shot digits dev) and `lr` (each model's pick); both empty at a scale that does not tune."""
    sweeps = tuning.sweeps_of(wb, runs)
    return {"lr": tuning.picks_of(sweeps), "lr_sweeps": sweeps}


def _with_sweeps(markdown: str, tuned: dict[str, Any]) -> str:
    return markdown + ("\n\n" + _sweeps_text(tuned["lr_sweeps"]) if tuned["lr_sweeps"] else "")


# -- 1. data size (Fig. 3-4) ---------------------------------------------------------------------------

def _fig4_units(scale: Scale) -> list[Unit]:
    runs = [Pretrain(f, "B", images=n, seed=s) for f in FAMILIES for n in scale.sizes for s in scale.pretrain_seeds]
    return [u for r in runs for u in (r, Finetune(r))]


def _fewshot_row(wb: Workbench, run: Pretrain) -> dict[str, Any]:
    """A pre-training run's few-shot figures at the (dev-selected) early-stopping step, and its upstream accuracy."""
    s = _pre(wb, run)
    row = {k: s[k] for k in ("family", "size", "images", "seed", "lr", "params", "forward_flops_per_image",
                             "train_flops", "glyph_test_top1", "train_s")}
    if s.get("train_s_from_step"):  # resumed from a state that did not carry the time before: a lower bound
        row["train_s_from_step"] = s["train_s_from_step"]
    row.update({k: v for k, v in s["best"].items() if k != "step"})
    row["best_step"] = s["best"].get("step")
    row["final_digits_test_5shot"] = s["final"].get("digits_test_5shot")
    k = wb.scale.select_shots
    row[f"avg_{k}shot"] = (row[f"digits_test_{k}shot"] + row[f"lfw_test_{k}shot"]) / 2
    return row


def _transfer_row(wb: Workbench, run: Pretrain) -> dict[str, Any]:
    """A pre-training run's transfer figures: few-shot at the early-stopping step, fine-tuned accuracy."""
    ft = _ft(wb, Finetune(run))
    return {**_fewshot_row(wb, run), "finetune_top1": ft["test_top1"], "finetune_lr": ft["lr"],
            "finetune_bracketed": ft.get("bracketed")}


def random_init_fewshot(wb: Workbench, family: str) -> dict[str, float]:
    """Few-shot figures of a family's untrained network (seed 0): what pre-training has to beat."""
    cfg = config_from_dict(pretrain_config(Pretrain(family, "B"), wb.scale))
    manual_seed(0)
    model = build_model(cfg.model, [f"glyph{i:04d}" for i in range(wb.scale.glyph_classes)], 1, cfg.data)
    return wb.evaluator(model.eval())


def _fig4_run(wb: Workbench, out: Path) -> dict[str, Any]:
    sc = wb.scale
    rows = [_transfer_row(wb, Pretrain(f, "B", images=n, seed=s)) for f in FAMILIES for n in sc.sizes
            for s in sc.pretrain_seeds]
    k = sc.select_shots
    untrained = {f: random_init_fewshot(wb, f) for f in FAMILIES}
    glyph_samples(sc, out / "glyph_samples.png")
    lines = ["| family | pre-training images | seed | fine-tuned digits | "
             f"{k}-shot digits | {k}-shot lfw | glyph test (upstream) | best step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['images']:,} | {r['seed']} | {_pct(r['finetune_top1'])} | "
                     f"{_pct(r[f'digits_test_{k}shot'], r[f'digits_test_{k}shot_std'])} | "
                     f"{_pct(r[f'lfw_test_{k}shot'], r[f'lfw_test_{k}shot_std'])} | {_pct(r['glyph_test_top1'])} | "
                     f"{r['best_step']} |")
    gaps = {}  # mean over seeds of the ViT - ResNet difference, paired by seed
    for n in sc.sizes:
        by = {(r["family"], r["seed"]): r for r in rows if r["images"] == n}
        gaps[n] = {key: paired([by["ViT", s][key] for s in sc.pretrain_seeds],
                               [by["ResNet", s][key] for s in sc.pretrain_seeds]).mean
                   for key in ("finetune_top1", f"digits_test_{k}shot", f"avg_{k}shot")}
    lines += ["", f"Untrained networks (random init, {k}-shot digits / lfw): " + "; ".join(
        f"{f} {_pct(u[f'digits_test_{k}shot'])} / {_pct(u[f'lfw_test_{k}shot'])}" for f, u in untrained.items())]
    lines += ["", "ViT minus ResNet (points): " + "; ".join(
        f"{n:,} images: fine-tuned {100 * g['finetune_top1']:+.1f}, {k}-shot digits "
        f"{100 * g[f'digits_test_{k}shot']:+.1f}" for n, g in gaps.items())]
    tuned = _tuned(wb, [Pretrain(f, "B") for f in FAMILIES])
    return {"rows": rows, "untrained": untrained, "vit_minus_resnet": {str(n): g for n, g in gaps.items()},
            **tuned, "markdown": _with_sweeps("\n".join(lines), tuned)}


def glyph_samples(scale: Scale, path: Path) -> str:
    """5 training images (rows) of each of 12 glyph classes (columns), every cell filled."""
    g = glyphs(max(2000, 20 * scale.glyph_classes), scale.glyph_classes, IMG_SIZE, 0, "train")
    return plots.samples(g.images.numpy(), g.labels, 12, 5, path,
                         "pre-training data: 5 images (rows) of each of 12 glyph classes (columns)")


# -- 2. compute (Fig. 5) --------------------------------------------------------------------------------

def _fig5_units(scale: Scale) -> list[Unit]:
    runs = [Pretrain(f, s, seed=seed) for f in FAMILIES for s in scale.compute_sizes for seed in scale.pretrain_seeds]
    return [u for r in runs for u in (r, Finetune(r))]


def _fig5_run(wb: Workbench, out: Path) -> dict[str, Any]:
    rows = [_transfer_row(wb, Pretrain(f, s, seed=seed)) for f in FAMILIES for s in wb.scale.compute_sizes
            for seed in wb.scale.pretrain_seeds]
    k = wb.scale.select_shots
    lines = ["| family | size | seed | parameters | forward FLOPs / image | pre-training FLOPs | fine-tuned digits | "
             f"{k}-shot (digits, lfw mean) | pre-training time |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['size']} | {r['seed']} | {r['params'] / 1e3:.0f}k | "
                     f"{r['forward_flops_per_image'] / 1e6:.2f}M | {r['train_flops']:.2e} | {_pct(r['finetune_top1'])} "
                     f"| {_pct(r[f'avg_{k}shot'])} | {r['train_s']:.0f} s"
                     + (f" (steps {r['train_s_from_step']:,}+)" if r.get("train_s_from_step") else "") + " |")
    tuned = _tuned(wb, [Pretrain(f, s) for f in FAMILIES for s in wb.scale.compute_sizes])
    return {"rows": rows, **tuned, "markdown": _with_sweeps("\n".join(lines), tuned)}


# -- 3. what the model learns (Fig. 7) ----------------------------------------------------------------

def _fig7_units(scale: Scale) -> list[Unit]:
    return [Pretrain("ViT", "L", seed=seed) for seed in scale.pretrain_seeds]


def _fig7_run(wb: Workbench, out: Path) -> dict[str, Any]:
    """The measures of every pre-training seed (the figures: seed 0's); the result's top level is seed 0's, and
    `per_seed` holds each seed's measures (rules.py reads them)."""
    per_seed = [_fig7_model(wb, seed, out) for seed in wb.scale.pretrain_seeds]
    return {**per_seed[0], "per_seed": [{k: v for k, v in r.items() if k not in ("figures", "markdown")}
                                        for r in per_seed], **_tuned(wb, [Pretrain("ViT", "L")])}


def _fig7_model(wb: Workbench, seed: int, out: Path) -> dict[str, Any]:
    s = _pre(wb, Pretrain("ViT", "L", seed=seed))
    model = load_pretrained(s["model_dir"])
    test = glyphs(FIG7_IMAGES, 1000, model.config.img_size[0], 0, "test")
    images = [InspectImage(f"glyph test #{i}", test.get(i)[0], test.classes[int(test.labels[i])]) for i in range(FIG7_IMAGES)]
    ins = out / ("inspect" if seed == 0 else f"inspect_seed{seed}")
    summary = inspect_model(model, images, ins, name=f"ViT-L (glyphs, {s['images']:,} images)", progress=False)
    figures = []
    for f in ("embedding_filters.png", "position_embedding_similarity.png", "attention_distance.png"):
        if seed == wb.scale.pretrain_seeds[0]:
            shutil.copyfile(ins / f, out / f"fig7_{f}")
        figures.append(f"fig7_{f}")
    # position embeddings: similarity to patches in the same row or column vs the others (Fig. 7 centre)
    sim = torch.tensor(json.loads((ins / "position_embedding_similarity.json").read_text())["similarity"])
    gh, gw = sim.shape[:2]
    rr, cc = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    same = (rr.reshape(-1, 1) == rr.reshape(1, -1)) | (cc.reshape(-1, 1) == cc.reshape(1, -1))
    eye = torch.eye(gh * gw, dtype=torch.bool)
    flat = sim.reshape(gh * gw, gh * gw)
    dist = ((rr.reshape(-1, 1) - rr.reshape(1, -1)) ** 2 + (cc.reshape(-1, 1) - cc.reshape(1, -1)) ** 2).float().sqrt()
    off = ~eye
    corr = float(np.corrcoef(flat[off].numpy(), -dist[off].numpy())[0, 1])
    rowcol = float(flat[same & off].mean() - flat[~same].mean())
    # attention distance per layer and head (Fig. 7 right)
    ad = json.loads((ins / "attention_distance.json").read_text())
    mean = np.array(ad["mean"])  # (layers, heads), pixels
    per_layer = mean.mean(1)
    slope = float(np.polyfit(np.arange(len(per_layer)), per_layer, 1)[0])
    ratio = summary["figures"]["embedding_filters"]["explained_variance_ratio_top"]
    res = {
        "model": s["name"], "grid": [gh, gw],
        "posemb_same_row_or_column_minus_other": rowcol, "posemb_similarity_vs_closeness_correlation": corr,
        "attention_distance_per_layer": per_layer.tolist(), "attention_distance_per_head": mean.tolist(),
        "attention_distance_slope_per_layer": slope, "first_layer_head_range": [float(mean[0].min()), float(mean[0].max())],
        "uniform_attention_distance": ad["uniform_attention_reference"], "max_distance": ad["max_possible"],
        "embedding_filter_variance_top5": ratio, "figures": figures,
    }
    res["markdown"] = fig7_markdown({**res, "per_seed": [res] * len(wb.scale.pretrain_seeds)})
    return res


# -- 4. higher-resolution fine-tuning (§3.2) ----------------------------------------------------------

def _hires_finetunes(scale: Scale, px: int) -> list[Finetune]:
    """Pre-training seed i (ViT-B, the whole set) fine-tuned with fine-tuning seed i: both kinds of seed vary."""
    return [Finetune(Pretrain("ViT", "B", seed=s), px, s) for s in scale.finetune_seeds]


def _hires_units(scale: Scale) -> list[Unit]:
    return [u for px in (16, 32) for ft in _hires_finetunes(scale, px) for u in (ft.source, ft)]


def _hires_run(wb: Workbench, out: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for px in (16, 32):
        fts = [_ft(wb, ft) for ft in _hires_finetunes(wb.scale, px)]
        accs = [ft["test_top1"] for ft in fts]
        res[f"{px}px"] = {"accs": accs, **seeded(accs), "finetune_sweeps": [ft["sweep"] for ft in fts]}
    lines = ["| fine-tuning resolution | patches | digits test accuracy (mean [95% CI] over seeds: pre-training seed i "
             "fine-tuned with seed i) |",
             "|---|---:|---:|"]
    for k, v in res.items():
        side = int(k[:-2]) // MODEL_SETS[wb.scale.models]["ViT"]["B"]["patch_size"]
        lines.append(f"| {k} | {side}x{side} | {mean_ci(v['accs']).text()} |")
    gain = paired(res["32px"]["accs"], res["16px"]["accs"])
    lines.append(f"\n32 px − 16 px, paired by seed (points): {gain.text(signed=True)}")
    tuned = _tuned(wb, [Pretrain("ViT", "B")])
    return {"results": res, **tuned, "markdown": _with_sweeps("\n".join(lines), tuned)}


# -- 5. position-embedding variants (appendix D.4) -----------------------------------------------------

def _posemb_units(scale: Scale) -> list[Unit]:
    return [Pretrain("ViT", "B", posemb=p, seed=s) for p in POSEMBS for s in scale.posemb_seeds]


def _posemb_run(wb: Workbench, out: Path) -> dict[str, Any]:
    k = wb.scale.select_shots
    res: dict[str, Any] = {}
    for p in POSEMBS:
        sums = [_pre(wb, Pretrain("ViT", "B", posemb=p, seed=s)) for s in wb.scale.posemb_seeds]
        entry: dict[str, Any] = {}
        for key in (f"digits_test_{k}shot", f"lfw_test_{k}shot"):
            entry[key] = seeded([x["final"][key] for x in sums])
        entry["glyph_test_top1"] = seeded([x["glyph_test_top1"] for x in sums])
        res[p] = entry
    names = {"none": "none", "learn1d": "1-D (default)", "learn2d": "2-D", "relative": "relative"}
    lines = [f"| position embedding | glyph test (upstream) | {k}-shot digits | {k}-shot lfw |", "|---|---:|---:|---:|"]
    for p, v in res.items():
        cells = [mean_ci(v[m]["values"]).text() for m in ("glyph_test_top1", f"digits_test_{k}shot", f"lfw_test_{k}shot")]
        lines.append(f"| {names[p]} | " + " | ".join(cells) + " |")
    lines.append(f"\nmean [95% CI] over pre-training seeds {list(wb.scale.posemb_seeds)}; few-shot at the last step.")
    tuned = _tuned(wb, [Pretrain("ViT", "B", posemb=p) for p in POSEMBS])
    return {"results": res, **tuned, "markdown": _with_sweeps("\n".join(lines), tuned)}


# -- 6. masked patch prediction (§4.6) -----------------------------------------------------------------

def _mpp_pretrain(scale: Scale, steps: int, lr: float, seed: int = 0) -> Pretrain:
    """An MPP pre-training run; at the supervised ViT-B's rate it is the run named without a rate (the only rate
    before MPP's was tuned, so those runs are reused: tuning.unit_lr)."""
    run = Pretrain("ViT", "B", steps=steps, objective="mpp", seed=seed)
    return replace(run, lr=tuning.unit_lr(scale, run, lr))


def _mpp_supervised(seed: int) -> Pretrain:
    """The supervised arm: ViT-B pre-trained on the labelled glyphs with pre-training seed `seed`."""
    return Pretrain("ViT", "B", seed=seed)


def _mpp_units(scale: Scale) -> list[Unit]:
    """The MPP rate grid at the longest length (seed 0, each fine-tuned with seed 0), the supervised arm's and the
    scratch runs' seeds; the seeds of MPP at the picked rate are known only after the sweep (`_mpp_run`)."""
    seeds = scale.finetune_seeds
    grid = [_mpp_pretrain(scale, max(scale.mpp_steps), lr) for lr in scale.mpp_lrs]
    sups = [_mpp_supervised(s) for s in seeds]
    fts = [Finetune(r, 16, 0) for r in grid] + [Finetune(None, 16, s) for s in seeds]
    fts += [Finetune(sup, 16, s) for s, sup in zip(seeds, sups)]
    equal = [Finetune(None, 16, seed, steps=equal_budget_steps(scale, n)) for n in scale.mpp_steps
             for seed in seeds]  # from scratch with each MPP run's whole budget
    return [*grid, *sups, *fts, *equal]


def _mpp_tune(wb: Workbench, steps: int) -> tuple[float, list[dict[str, float]]]:
    """MPP's pre-training rate at `steps`: the rule's metric on dev (digits dev accuracy after fine-tuning, MPP seed 0
    fine-tuned with seed 0) over the scale's grid, extended past an edge that wins; the pick and the sweep."""
    def finetuned_dev(wb: Workbench, runs: list[Pretrain]) -> list[dict[str, float]]:
        fts = wb.finetune_all([Finetune(r, 16, 0) for r in runs])  # their pre-training first, `jobs` at a time
        return [{"dev": ft["dev_top1"], "test": ft["test_top1"]} for ft in fts]

    sweep = tuning.sweep_rates(wb, {"mpp": (wb.scale.mpp_lrs, lambda lr: _mpp_pretrain(wb.scale, steps, lr))},
                               score=finetuned_dev)["mpp"]
    return pick_rate(sweep), sweep


def colour_distribution(scale: Scale) -> np.ndarray:
    """The frequency of each 3-bit mean colour (§4.6's targets) over the glyph test patches: MPP's floors are its
    maximum (the majority colour's accuracy) and its entropy (the loss of the best constant prediction)."""
    test = glyphs(glyph_test_size(scale.glyph_images, scale.glyph_test_images), scale.glyph_classes, IMG_SIZE, 0,
                  "test")  # the runs' own test split (pretrain_config)
    targets = mean_colour_targets(test.images.float() / 255, MODEL_SETS[scale.models]["ViT"]["B"]["patch_size"])
    return (torch.bincount(targets.flatten(), minlength=2**3).double()  # one grey channel, 3 bits
             / targets.numel()).numpy()


def majority_colour(scale: Scale) -> float:
    """The masked-colour accuracy of always predicting the most frequent 3-bit colour of the glyph test patches:
    the floor an MPP model's colour accuracy must clear to show it learned something (§4.6's targets)."""
    return float(colour_distribution(scale).max())


def _mpp_run(wb: Workbench, out: Path) -> dict[str, Any]:
    """§4.6 with seeds: MPP's rate picked on dev at the longest length (`_mpp_tune`), then seed i of every arm --
    MPP and supervised pre-training seed i fine-tuned with fine-tuning seed i, from scratch fine-tuning seed i."""
    sc = wb.scale
    seeds, k = sc.finetune_seeds, sc.select_shots
    lr, sweep = _mpp_tune(wb, max(sc.mpp_steps))
    runs = {n: [_mpp_pretrain(sc, n, lr, s) for s in seeds] for n in sc.mpp_steps}
    sups = [tuning.resolve(wb, _mpp_supervised(s)) for s in seeds]  # ViT-B at its tuned rate
    got = iter(wb.pretrain_all([r for rs in runs.values() for r in rs] + sups))  # `jobs` at a time
    pre = {n: [next(got) for _ in rs] for n, rs in runs.items()}
    sup_sums = [next(got) for _ in sups]

    sweeps: list[list[dict[str, float]]] = []  # every fine-tune's learning-rate sweep (rules.py checks the brackets)

    def finetuned(srcs: list[Pretrain | None], steps: int = 0) -> dict[str, Any]:  # `jobs` at a time
        fts = wb.finetune_all([tuning.resolve(wb, Finetune(src, 16, s, steps=steps)) for src, s in zip(srcs, seeds)])
        sweeps.extend(ft["sweep"] for ft in fts)
        return seeded([ft["test_top1"] for ft in fts])

    scratch, supervised = finetuned([None] * len(seeds)), finetuned(sups)
    mpp = {n: finetuned(rs) for n, rs in runs.items()}
    budget = {n: equal_budget_steps(sc, n) for n in sc.mpp_steps}
    equal = {n: finetuned([None] * len(seeds), budget[n]) for n in sc.mpp_steps}
    colour = {n: seeded([s["glyph_test_top1"] for s in pre[n]]) for n in sc.mpp_steps}
    fewshot = {n: seeded([s["final"][f"digits_test_{k}shot"] for s in pre[n]]) for n in sc.mpp_steps}
    fewshot_sup = seeded([s["final"][f"digits_test_{k}shot"] for s in sup_sums])
    first_gain = next((n for n, v in mpp.items() if paired(v["values"], scratch["values"]).lo > 0), None)
    res = {"seeds": list(seeds), "pairing": "seed i: MPP and supervised pre-training seed i fine-tuned with "
           "fine-tuning seed i; from scratch: fine-tuning seed i",
           "mpp_lr": lr, "mpp_lr_sweep": sweep, "mpp_lr_grid": list(sc.mpp_lrs),
           "scratch": scratch, "scratch_steps": sc.finetune_steps, "supervised": supervised,
           "mpp": {str(n): v for n, v in mpp.items()},
           "equal_budget_scratch": {str(n): {"steps": budget[n], "top1": equal[n]} for n in budget},
           "masked_colour_test": {str(n): v for n, v in colour.items()}, "majority_colour": majority_colour(sc),
           "fewshot": {"supervised": fewshot_sup, **{f"mpp_{n}": v for n, v in fewshot.items()}},
           "mpp_pays_from_steps": first_gain, **_tuned(wb, sups), "finetune_sweeps": sweeps}
    return {**res, "markdown": mpp_markdown({**res, "scale": sc.name})}


# -- 8. class token vs global average pooling (appendix D.3) ------------------------------------------

POOLINGS = ("token", "gap")


def _sweeps_text(sweeps: dict[str, list[dict[str, float]]]) -> str:
    """Each model's sweep (5-shot digits dev, seed 0), its pick in bold, and whether the pick is bracketed."""
    return "Learning-rate sweeps (5-shot digits dev, seed 0; the pick in bold): " + "; ".join(
        f"{p}: {sweep_text(sw, bold=True)}" for p, sw in sweeps.items())


def _pooling_units(scale: Scale) -> list[Unit]:
    return tuning.grid_runs(scale, [Pretrain("ViT", "B", pooling=p) for p in POOLINGS], scale.pooling_lrs)


def _pooling_run(wb: Workbench, out: Path) -> dict[str, Any]:
    """Each pooling's rate picked on the bracketed grid by 5-shot digits dev (seed 0), then every pre-training seed
    at that rate; the 5-shot digits test accuracy at the dev-selected early-stopping step, and upstream accuracy."""
    sc = wb.scale
    picks, sweeps, res = tuning.seeded_at_picks(
        wb, {p: lambda seed=0, p=p: Pretrain("ViT", "B", pooling=p, seed=seed) for p in POOLINGS}, sc.pooling_lrs)
    k = sc.select_shots
    lines = [f"| pooling | pre-training lr (picked on dev) | {k}-shot digits | glyph test (upstream) |",
             "|---|---:|---:|---:|"]
    for p in POOLINGS:
        lines.append(f"| {p} | {picks[p]:g} | {ci_text(res[p][f'digits_test_{k}shot'])} | {ci_text(res[p]['glyph_test_top1'])} |")
    lines += ["", f"gap − token, paired by pre-training seed (points): {k}-shot digits "
              f"{ci_text(res['gap'][f'digits_test_{k}shot'], res['token'][f'digits_test_{k}shot'])}; glyph test "
              f"{ci_text(res['gap']['glyph_test_top1'], res['token']['glyph_test_top1'])}",
              "", _sweeps_text(sweeps)]
    return {"results": res, "lr": picks, "lr_sweeps": sweeps, "markdown": "\n".join(lines)}


# -- 9. model size x data (§4.2, Fig. 3) ---------------------------------------------------------------

SIZE_FAMILIES, SIZE_SIZES = ("ViT", "ResNet"), ("S", "B")


def _size_runs(scale: Scale) -> list[Pretrain]:
    return [Pretrain(f, s, images=n, seed=seed) for f in SIZE_FAMILIES for s in SIZE_SIZES for n in scale.sizes
            for seed in scale.pretrain_seeds]


def _size_run(wb: Workbench, out: Path) -> dict[str, Any]:
    """Two sizes of each family on the smallest and the whole set: how much each gains from more data."""
    sc, k = wb.scale, wb.scale.select_shots
    rows = [_fewshot_row(wb, r) for r in _size_runs(sc)]
    m = f"digits_test_{k}shot"

    def vals(f: str, s: str, n: int, metric: str = m) -> list[float]:
        by = {r["seed"]: r[metric] for r in rows if (r["family"], r["size"], r["images"]) == (f, s, n)}
        return [by[seed] for seed in sc.pretrain_seeds]

    small, big = sc.sizes[0], sc.sizes[-1]
    lines = ["| family | size | forward MFLOPs / image | " + " | ".join(f"{k}-shot digits, {n:,} images"
                                                                         for n in sc.sizes) +
             " | gain from data (points, paired) | glyph test, whole set |", "|---|---|---:|" + "---:|" * len(sc.sizes)
             + "---:|---:|"]
    for f in SIZE_FAMILIES:
        for s in SIZE_SIZES:
            fl = next(r["forward_flops_per_image"] for r in rows if (r["family"], r["size"]) == (f, s))
            cells = " | ".join(mean_ci(vals(f, s, n)).text() for n in sc.sizes)
            lines.append(f"| {f} | {s} | {fl / 1e6:.2f} | {cells} | {paired(vals(f, s, big), vals(f, s, small)).text(signed=True)}"
                         f" | {mean_ci(vals(f, s, big, 'glyph_test_top1')).text()} |")
    lines.append("\nmean [95% CI] over pre-training seeds " + str(list(sc.pretrain_seeds)) + f"; {k}-shot at the "
                 "early-stopping step (digits dev)")
    tuned = _tuned(wb, [Pretrain(f, s) for f in SIZE_FAMILIES for s in SIZE_SIZES])
    return {"rows": rows, **tuned, "markdown": _with_sweeps("\n".join(lines), tuned)}


# -- 10. Adam vs SGD for the ResNet (appendix D.1, Table 7) ---------------------------------------------

def _optim_units(scale: Scale) -> list[Unit]:
    return tuning.grid_runs(scale, [Pretrain("ResNet", "B", optimizer=o) for o in scale.optimizer_lrs],
                            scale.optimizer_lrs["adamw"])


def _optim_run(wb: Workbench, out: Path) -> dict[str, Any]:
    """ResNet-B pre-trained on the whole set with AdamW or SGD with momentum, each at its own rate picked on a
    bracketed grid (dev), then every pre-training seed at that rate."""
    sc, k = wb.scale, wb.scale.select_shots
    picks, sweeps, res = tuning.seeded_at_picks(
        wb, {o: lambda seed=0, o=o: Pretrain("ResNet", "B", optimizer=o, seed=seed) for o in sc.optimizer_lrs},
        sc.optimizer_lrs["adamw"])
    m = f"digits_test_{k}shot"
    names = {"adamw": "Adam (AdamW, weight decay 0.05)", "sgd": "SGD, momentum 0.9 (weight decay 1e-4)"}
    lines = [f"| optimiser | pre-training lr (picked on dev) | {k}-shot digits | glyph test (upstream) |",
             "|---|---:|---:|---:|"]
    lines += [f"| {names[o]} | {picks[o]:g} | {ci_text(res[o][m])} | {ci_text(res[o]['glyph_test_top1'])} |" for o in res]
    lines += ["", f"Adam − SGD, paired by pre-training seed (points): {k}-shot digits {ci_text(res['adamw'][m], res['sgd'][m])}"
              f"; glyph test {ci_text(res['adamw']['glyph_test_top1'], res['sgd']['glyph_test_top1'])}", "",
              _sweeps_text(sweeps)]
    return {"results": res, "lr": picks, "lr_sweeps": sweeps, "markdown": "\n".join(lines)}


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment("fig4", "§4.2, Fig. 3-4: with little pre-training data the ResNet (convolutional inductive bias) "
               "transfers better than a ViT of comparable compute; with more data the ViT catches up and passes it",
               _fig4_units, _fig4_run),
    Experiment("size", "§4.2, Fig. 3: larger ViT models gain more from larger pre-training sets than smaller ones "
               "(worse than smaller ones on ImageNet-1k, better on JFT-300M); the ResNets' ranking changes less",
               _size_runs, _size_run),
    Experiment("fig5", "§4.2, Fig. 5: for the same pre-training compute ViTs transfer better than ResNets; hybrids "
               "help at small compute, the gap closes for larger models", _fig5_units, _fig5_run),
    Experiment("fig7", "§4.5, Fig. 7: the embedding filters look like plausible basis functions; position "
               "embeddings learn the 2-D grid (row/column structure); attention distance grows with depth, with "
               "some heads attending globally already in the lowest layers", _fig7_units, _fig7_run),
    Experiment("hires", "§3.2: fine-tuning at a higher resolution than pre-training (position embeddings "
               "interpolated in 2-D) is beneficial", _hires_units, _hires_run),
    Experiment("posemb", "appendix D.4, Table 8: no position embedding is clearly worse; 1-D, 2-D and relative "
               "embeddings perform about the same", _posemb_units, _posemb_run),
    Experiment("mpp", "§4.6: self-supervised masked patch prediction improves on training from scratch "
               "(+2% on ImageNet) but stays behind supervised pre-training (-4%)", _mpp_units, _mpp_run),
    Experiment("pooling", "appendix D.3: a class token and global average pooling (no class token) work equally well, "
               "given each its own learning rate", _pooling_units, _pooling_run),
    Experiment("optim", "appendix D.1, Table 7: pre-training the ResNet baseline with Adam transfers slightly better "
               "than with SGD with momentum", _optim_units, _optim_run),
    Experiment("crossover", "§4.2, Fig. 3-5: with enough pre-training data and compute the ViT overtakes the "
               "ResNet of comparable compute (ViT-B/32 vs ResNet50: behind on 9M JFT images, ahead from 90M)",
               lambda scale: [], None),
)}


def run_experiments(names: list[str], out: str | Path, scale: Scale, progress: bool = True,
                    crossover: CrossoverScale | None = None, device: str = "cpu", jobs: int = 1) -> dict[str, Any]:
    """Run the named experiments in `out` (resuming whatever a killed run left); writes
    `<out>/<name>/result.json`, its PNGs and `<out>/SUMMARY.md`; returns {name: result}. The crossover runs its own
    grid (`crossover`: default the smoke grid with the smoke scale, else the laptop grid) in `<out>/crossover/runs`;
    `device` and `jobs` (parallel pre-training runs of the crossover) apply to every run."""
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; choose from {list(EXPERIMENTS)} or --all")
    if crossover is None:
        crossover = CROSSOVER_SCALES["smoke" if scale.name == "smoke" else "laptop"]
    wb = Workbench(out, scale, progress, device, jobs)
    units = [u for n in names for u in EXPERIMENTS[n].units(scale)]
    sources = [u for u in units if isinstance(u, Pretrain)] + [u.source for u in units
                                                              if isinstance(u, Finetune) and u.source is not None]
    # the bar counts the rate sweeps' grids and the units whose rate is known; a unit that takes its model's pick is
    # counted once the picks are (an extension of a sweep when it is added)
    fixed = [u for u in units if (src := u.source if isinstance(u, Finetune) else u) is None
             or not tuning.is_tuned(scale, src)]
    label = scale_label(scale.name)  # as --scale says it
    wb.start(tuning.grid_runs(scale, sources) + fixed, f"reproduce ({label})")
    results: dict[str, Any] = {}
    try:
        tuning.tune(wb, sources)  # every model's rate first: all grids in one round, then their extensions
        units = [tuning.resolve(wb, u) for u in units]
        wb.count(units)
        if jobs > 1:  # the planned runs first, `jobs` at a time (pre-training, then fine-tuning); the experiments
            wb.pretrain_all([u for u in units if isinstance(u, Pretrain)])  # then read them back
            wb.finetune_all([u for u in units if isinstance(u, Finetune)])
        for n in names:
            exp = EXPERIMENTS[n]
            folder = Path(out) / n
            folder.mkdir(parents=True, exist_ok=True)
            if exp.run is None:
                ran = run_crossover(crossover, folder, progress, device, jobs)
            else:
                ran = exp.run(wb, folder)
            res = {"experiment": n, "claim": exp.claim, "scale": scale.name if exp.run else crossover.name, **ran}
            res = json.loads(json.dumps(res, default=_json_default))  # the figures see exactly what the JSON holds
            res["figures"] = plots.draw(n, res, folder)
            atomic_write_text(folder / "result.json", json.dumps(res, indent=2) + "\n")
            results[n] = res
            if wb.bar is not None:
                wb.bar.write(f"{n}: done -> {folder}/")
    finally:
        wb.close()
    # every experiment of this folder that has a result (earlier runs' included), rules and verdicts recomputed
    found = {n: json.loads((Path(out) / n / "result.json").read_text()) for n in EXPERIMENTS
             if (Path(out) / n / "result.json").is_file()}
    write_summary(found, Path(out) / "SUMMARY.md", lambda n, f: f"{n}/{f}", f"vitkit reproduce ({label} scale)")
    return results


def redraw(json_dir: str | Path, figure_dir: str | Path | None = None) -> dict[str, list[str]]:
    """Redraw every figure and SUMMARY.md from the result JSON in `json_dir` (no training): figures into
    `figure_dir` (default: beside the JSON), `json_dir`/SUMMARY.md with links relative to it. fig7's figures are
    `vitkit inspect`'s and are not redrawn (they need the model). Returns {experiment: figure files}."""
    json_dir = Path(json_dir)
    figs_at = Path(figure_dir) if figure_dir is not None else json_dir
    results = load_results(json_dir)
    drawn = {}
    for n, res in results.items():
        drawn[n] = plots.draw(n, res, figs_at)
        if n == "fig4":
            glyph_samples(SCALES[res["scale"]], figs_at / "glyph_samples.png")
    summary = json_dir / "SUMMARY.md"
    write_summary(results, summary, lambda n, f: os.path.relpath(figs_at / f, summary.parent),
                  "vitkit reproduce: the committed results")
    return drawn


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")
