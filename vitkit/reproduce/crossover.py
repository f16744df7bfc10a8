"""Experiment 7, the crossover: where (if anywhere) the ViT overtakes the ResNet as data and compute grow.

The paper's central claim (§4.2, Fig. 3-5) is about a regime: with little pre-training data the ResNet's
inductive bias wins; "with enough data and compute" the ViT catches up and passes it. Experiment 1 (fig4) found
the first half at laptop scale and a ViT that stopped improving between 25k and 100k images at 1,000 steps. This
experiment tests whether that was compute: ViT-B and ResNet-B (matched compute, as ViT-B/32 and ResNet50) are
pre-trained on nested subsets of a glyph *stream* (drawn when loaded, 10^6-10^7 images, never stored) at several
schedule lengths, with several seeds, so each curve is read at matched data and matched compute.

Rules (the issue's): the same hyper-parameters for every subset and family except the learning rate, tuned per
family and schedule length on the largest subset (seed 0) by the early-stopping metric (5-shot digits dev);
early stopping on dev as in experiment 1; nothing that helps one family only. The crossover is interpolated in
log(images) (or log(FLOPs)) between the two sizes where the seed-mean gap changes sign, its spread from the
per-seed curves; where the curves do not cross, the trend of the gap over the largest sizes says whether and
where they would meet.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vitkit.reproduce.plan import SMOKE, Pretrain, Scale
from vitkit.reproduce.runs import Workbench
from vitkit.reproduce.stats import pick_rate, sweep_text
from vitkit.reproduce.tuning import sweep_rates

FAMILIES = ("ViT", "ResNet")  # the paper's pairing of matched compute (ViT-B/32 vs ResNet50), here the B models


@dataclass(frozen=True)
class CrossoverScale:
    """The grid of one crossover run: a pre-training `Scale` (batch, evaluation, transfer; its glyph set is the
    stream of the largest size) and the axes swept on it."""

    name: str
    scale: Scale
    sizes: tuple[int, ...]  # nested subsets of the stream; the last is the whole stream
    schedules: tuple[int, ...]  # pre-training steps
    seeds: tuple[int, ...]  # pre-training seeds of every point
    lr_grid: tuple[float, ...] = ()  # swept per family and schedule on the largest set, seed 0
    # a schedule -> its data sizes, where not all of `sizes` (a long schedule need not revisit the smallest sets)
    schedule_sizes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # a schedule -> the schedule whose picked rates it takes instead of a sweep of its own (recorded in the result)
    lr_from: dict[int, int] = field(default_factory=dict)
    # where the families come close, more seeds: these (steps, images) points re-run with `check_seeds` too
    seed_check: tuple[tuple[int, int], ...] = ()
    check_seeds: tuple[int, ...] = ()
    # a sweep whose best rate lies at an edge of the rates tried is extended past that edge (by the grid's own ratio
    # there) up to this many times per side, so the pick is bracketed on both sides (rules.py's precondition)
    lr_extend: int = 0

    def sizes_at(self, steps: int) -> tuple[int, ...]:
        return self.schedule_sizes.get(steps, self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stream(name: str, images: int, **kw: Any) -> Scale:
    return Scale(name=f"crossover-{name}", glyph_images=images, sizes=(), steps=1000, batch=128, eval_every=0,
                 finetune_steps=0, finetune_batch=64, finetune_lrs=(), finetune_seeds=(), posemb_seeds=(),
                 mpp_steps=(), glyph_stream=True, evals_per_run=4, **kw)


_SIZES = (15_625, 62_500, 250_000, 1_000_000)  # nested subsets of one 10^6-image stream, x4 apart
_PRETRAIN = _stream("crossover", _SIZES[-1])  # the long grid's
# the laptop grid's: 40,000 images drawn once per process and held (cheaper than drawing them on the fly), batch 64
_LAPTOP_SIZES = (2_500, 10_000, 40_000)
_LAPTOP = replace(_stream("laptop", _LAPTOP_SIZES[-1]), glyph_stream=False, batch=64, glyph_classes=100)
CROSSOVER_SCALES = {s.name: s for s in (
    # seconds: the plumbing (stream, lr sweep and inheritance, a ragged grid, seeds, analysis, figures), not the finding;
    # one seed on the grid (20 runs, 30 with two), a second one at the seed check's point (gaps paired by seed)
    CrossoverScale("smoke", replace(_stream("smoke", 4_000), batch=16, evals_per_run=2, shots=SMOKE.shots,
                                    fewshot_seeds=SMOKE.fewshot_seeds, transfer_limit=SMOKE.transfer_limit,
                                    pretrain_checkpoints=SMOKE.pretrain_checkpoints,
                                    glyph_test_images=SMOKE.glyph_test_images),
                   sizes=(1_000, 4_000), schedules=(4, 8, 12), seeds=(0,), lr_grid=(3e-3, 6e-3),
                   schedule_sizes={12: (4_000,)}, lr_from={12: 8}, seed_check=((8, 4_000),), check_seeds=(2,),
                   lr_extend=1),
    # `vitkit reproduce --all`'s: what the rule needs at the size of an hour's budget -- 3 seeds at every point, every
    # schedule length tuned on a grid bracketed around experiment 1's 6e-3 and extended where the best lies at an
    # edge; 600 and 1,200 steps on the largest set only (the rule reads the smallest set at its longest schedule)
    CrossoverScale("laptop", _LAPTOP, sizes=_LAPTOP_SIZES, schedules=(300, 600, 1200), seeds=(0, 1, 2),
                   lr_grid=(3e-3, 6e-3, 1.2e-2), schedule_sizes={600: _LAPTOP_SIZES[-1:], 1200: _LAPTOP_SIZES[-1:]},
                   lr_extend=4),  # the ResNet's 1,200-step sweep still won at 4.8e-2, two steps past the grid
    # the long grid (several hours on 2 cores, run across sittings: REPRODUCTION.md): 10^6 images drawn on the fly,
    # 1,000 to 12,000 steps
    CrossoverScale("long", _PRETRAIN, sizes=_SIZES, schedules=(1_000, 4_000, 12_000), seeds=(0, 1, 2),
                   lr_grid=(3e-3, 6e-3, 1.2e-2), schedule_sizes={12_000: _SIZES[-2:]},
                   lr_extend=4),  # 2 until 2026-11-26 (raised with tuning.LR_EXTEND, before its sweeps had ended)
)}


def tuning_runs(cs: CrossoverScale) -> list[Pretrain]:
    return [Pretrain(f, "B", images=cs.sizes_at(t)[-1], steps=t, seed=0, lr=lr) for f in FAMILIES for t in cs.schedules
            if t not in cs.lr_from for lr in cs.lr_grid]


def pick_lrs(wb: Workbench, cs: CrossoverScale) -> tuple[dict[tuple[str, int], float], dict[str, list[dict[str, float]]]]:
    """Each family's rate at each schedule length: the best early-stopping 5-shot digits dev accuracy of its sweep
    on the largest set, seed 0 (ties: the smaller rate), every sweep extended past an edge that wins
    (tuning.sweep_rates, `cs.lr_extend`; all sweeps in the same rounds); a schedule of `lr_from` takes another
    schedule's pick. Returns the picks by (family, steps) and the sweeps by "<family> <steps> steps"."""
    if not cs.lr_grid:
        raise ValueError(f"crossover scale {cs.name!r}: no learning-rate grid")
    tuned = [t for t in cs.schedules if t not in cs.lr_from]
    got = sweep_rates(wb, {(f, t): (cs.lr_grid, lambda lr, f=f, t=t: Pretrain(f, "B", images=cs.sizes_at(t)[-1],
                                                                              steps=t, seed=0, lr=lr))
                           for f in FAMILIES for t in tuned}, cs.lr_extend)
    lrs = {(f, t): pick_rate(got[f, cs.lr_from.get(t, t)]) for f in FAMILIES for t in cs.schedules}
    return lrs, {f"{f} {t:,} steps": got[f, t] for f in FAMILIES for t in tuned}


def grid_runs(cs: CrossoverScale, lrs: dict[tuple[str, int], float]) -> list[Pretrain]:
    return [Pretrain(f, "B", images=n, steps=t, seed=s, lr=lrs[f, t]) for f in FAMILIES for t in cs.schedules
            for n in cs.sizes_at(t) for s in cs.seeds]


def seed_check_runs(cs: CrossoverScale, lrs: dict[tuple[str, int], float]) -> list[Pretrain]:
    return [Pretrain(f, "B", images=n, steps=t, seed=s, lr=lrs[f, t]) for t, n in cs.seed_check for f in FAMILIES
            for s in cs.check_seeds]


def matched_flops(a: list[float], b: list[float]) -> list[float]:
    """The compute levels where two frontiers can be compared without extrapolating either: every point of
    either inside the range both cover, sorted."""
    lo, hi = max(min(a), min(b)), min(max(a), max(b))
    return sorted({x for x in (*a, *b) if lo <= x <= hi})


def crossing(x: list[float], gaps: list[float]) -> float | None:
    """Where a gap curve (ViT minus ResNet) over increasing x first turns from negative to non-negative and stays
    there, interpolated linearly in log10(x); None if it never does (or is never negative: no crossing to find)."""
    last_negative = max((i for i, g in enumerate(gaps) if g < 0), default=None)
    if last_negative is None or last_negative == len(gaps) - 1:
        return None
    i = last_negative
    a, b = math.log10(x[i]), math.log10(x[i + 1])
    return 10 ** (a + (b - a) * (-gaps[i]) / (gaps[i + 1] - gaps[i]))


def trend(x: list[float], gaps: list[float], last: int = 3) -> dict[str, float | None]:
    """The gap's least-squares slope over the `last` largest x (points per 10x), and where that line reaches 0
    beyond the data, as log10(x) (None if it does not head towards 0)."""
    lx = np.log10(np.asarray(x[-last:], dtype=float))
    g = np.asarray(gaps[-last:], dtype=float)
    slope, icpt = np.polyfit(lx, g, 1) if len(lx) > 1 else (0.0, float(g[-1]))
    meet = float(-icpt / slope) if g[-1] < 0 < slope else None
    return {"slope_per_decade": float(slope), "meets_at_log10": meet}


def gap_analysis(x: list[float], per_seed_vit: list[list[float]], per_seed_resnet: list[list[float]]
                 ) -> dict[str, Any]:
    """The ViT - ResNet gap along x: per seed (seed i of one family against seed i of the other), its mean and
    spread, the crossing of the mean curve and of each seed's, and the trend of the mean gap."""
    per_seed = [[v - r for v, r in zip(vs, rs)] for vs, rs in zip(per_seed_vit, per_seed_resnet)]
    mean = [float(np.mean(col)) for col in zip(*per_seed)]
    std = [float(np.std(col)) for col in zip(*per_seed)]
    seed_cross = [crossing(x, g) for g in per_seed]
    found = [c for c in seed_cross if c is not None]
    res: dict[str, Any] = {"x": list(x), "gap": mean, "gap_std": std, "per_seed": per_seed,
                           "crossing": crossing(x, mean), "crossing_per_seed": seed_cross, "trend": trend(x, mean)}
    if found:
        logs = np.log10(found)
        res["crossing_range"] = [float(10 ** logs.min()), float(10 ** logs.max())]
    return res


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return float(np.mean(xs)), float(np.std(xs))


def _row(s: dict[str, Any], k: int) -> dict[str, Any]:
    best = s["best"]
    return {"family": s["family"], "images": s["images"], "steps": s["steps"], "seed": s["seed"], "lr": s["lr"],
            "train_flops": s["train_flops"], "glyph_test_top1": s["glyph_test_top1"], "best_step": best.get("step"),
            f"digits_test_{k}shot": best[f"digits_test_{k}shot"], f"lfw_test_{k}shot": best[f"lfw_test_{k}shot"],
            f"avg_{k}shot": (best[f"digits_test_{k}shot"] + best[f"lfw_test_{k}shot"]) / 2, "train_s": s["train_s"]}


def analyse(cs: CrossoverScale, summaries: list[dict[str, Any]], extra: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Curves, gaps and crossings from the grid's run summaries (`Workbench.pretrain`): against pre-training images
    for each schedule length, and against pre-training FLOPs (each family's best over data sizes at each
    schedule: its compute frontier, a maximum taken on the test metric, kept in the JSON but shown nowhere and read
    by no rule); `extra` (the seed check's runs) adds seeds at the points of `cs.seed_check`."""
    k = cs.scale.select_shots
    rows = [_row(s, k) for s in summaries]
    checked = rows + [_row(s, k) for s in extra]
    metrics = ["glyph_test_top1", f"digits_test_{k}shot", f"avg_{k}shot"]

    def values(fam: str, steps: int, n: int, metric: str) -> list[float]:
        by_seed = {r["seed"]: r[metric] for r in rows if (r["family"], r["steps"], r["images"]) == (fam, steps, n)}
        return [by_seed[s] for s in cs.seeds]

    curves: dict[str, Any] = {}
    by_data: dict[str, Any] = {}
    for t in cs.schedules:
        sizes = cs.sizes_at(t)
        for m in metrics:
            for fam in FAMILIES:
                pts = [_mean_std(values(fam, t, n, m)) for n in sizes]
                curves[f"{fam}/{t}/{m}"] = {"images": list(sizes), "mean": [p[0] for p in pts],
                                            "std": [p[1] for p in pts]}
            per = {fam: [[values(fam, t, n, m)[i] for n in sizes] for i in range(len(cs.seeds))] for fam in FAMILIES}
            by_data[f"{t}/{m}"] = gap_analysis(list(sizes), per["ViT"], per["ResNet"])
    # compute: each family's frontier (best over data sizes, seed by seed) at each schedule length
    by_compute: dict[str, Any] = {}
    flops = {fam: [next(r["train_flops"] for r in rows if (r["family"], r["steps"]) == (fam, t)) for t in cs.schedules]
             for fam in FAMILIES}
    frontier: dict[str, Any] = {}
    for m in metrics:
        per = {fam: [[max(values(fam, t, n, m)[i] for n in cs.sizes_at(t)) for t in cs.schedules]
                     for i in range(len(cs.seeds))] for fam in FAMILIES}
        for fam in FAMILIES:
            frontier[f"{fam}/{m}"] = {"flops": flops[fam], "mean": [float(np.mean(c)) for c in zip(*per[fam])],
                                      "std": [float(np.std(c)) for c in zip(*per[fam])]}
        # at matched compute: both frontiers interpolated (in log FLOPs) at every frontier point where both have
        # measurements around it (no extrapolation: a family is never assumed flat or rising past its last run)
        xs = matched_flops(flops["ViT"], flops["ResNet"])
        at = {fam: [[float(np.interp(np.log10(x), np.log10(flops[fam]), c)) for x in xs] for c in per[fam]]
              for fam in FAMILIES}
        by_compute[m] = gap_analysis(xs, at["ViT"], at["ResNet"]) if len(xs) else {
            "x": [], "gap": [], "gap_std": [], "per_seed": [], "crossing": None, "crossing_per_seed": [],
            "trend": {"slope_per_decade": 0.0, "meets_at_log10": None}}
    checks = []
    for t, n in cs.seed_check:
        for m in metrics:
            per = {fam: {r["seed"]: r[m] for r in checked if (r["family"], r["steps"], r["images"]) == (fam, t, n)}
                   for fam in FAMILIES}
            seeds = sorted(set(per["ViT"]) & set(per["ResNet"]))
            gaps = [per["ViT"][s] - per["ResNet"][s] for s in seeds]
            checks.append({"steps": t, "images": n, "metric": m, "seeds": seeds,
                           **{fam: _mean_std([per[fam][s] for s in seeds]) for fam in FAMILIES},
                           "gap": _mean_std(gaps), "gaps": gaps})
    return {"rows": rows, "curves": curves, "by_data": by_data, "frontier": frontier, "by_compute": by_compute,
            "seed_check": checks}


def _fmt_n(x: float) -> str:
    return f"{x:,.0f}" if x < 1e7 else f"{x:.2g}"


def _cross_text(g: dict[str, Any], unit: str) -> str:
    """One cell: the crossing with its seed range, or the measured trend and where it would meet."""
    if g["crossing"] is not None:
        rng = g.get("crossing_range")
        spread = f" (seeds: {_fmt_n(rng[0])}-{_fmt_n(rng[1])})" if rng and rng[0] != rng[1] else ""
        missing = sum(c is None for c in g["crossing_per_seed"])
        note = f"; {missing} seed(s) do not cross" if missing and len(g["crossing_per_seed"]) > 1 else ""
        return f"crosses at ~{_fmt_n(g['crossing'])} {unit}{spread}{note}"
    last = g["gap"][-1]
    if last >= 0:
        return f"ViT ahead or level everywhere ({100 * min(g['gap']):+.1f} points at the least)"
    t = g["trend"]
    slope = 100 * t["slope_per_decade"]
    if t["meets_at_log10"] is None:
        return f"no crossing; the gap is {100 * last:+.1f} points and not closing ({slope:+.1f} points per 10x)"
    e = t["meets_at_log10"]
    at = _fmt_n(10**e) if e < 7 else f"10^{e:.1f}"
    return f"no crossing; the gap is {100 * last:+.1f} points, closing {slope:+.1f} points per 10x: the trend meets at ~{at} {unit}"


def markdown(grid: dict[str, Any], res: dict[str, Any], lr_sweeps: dict[str, Any]) -> str:
    """The crossover's tables from its result JSON alone (`grid`: the result's `crossover_scale`,
    CrossoverScale.to_dict(); summary.py rebuilds the text from the committed JSON)."""
    sizes, schedules, seeds = list(grid["sizes"]), list(grid["schedules"]), list(grid["seeds"])
    k, batch = grid["scale"]["select_shots"], grid["scale"]["batch"]
    data = (f"a {sizes[-1]:,}-image glyph stream (drawn as loaded)" if grid["scale"]["glyph_stream"] else
            f"a {sizes[-1]:,}-image glyph set (drawn once and held)")
    names = {"glyph_test_top1": "glyph test", f"digits_test_{k}shot": f"{k}-shot digits",
             f"avg_{k}shot": f"{k}-shot mean (digits, lfw)"}
    lines = [f"Scale {grid['name']}: ViT-B vs ResNet-B on nested subsets of {data}, "
             f"schedules {', '.join(f'{t:,}' for t in schedules)} steps of batch {batch}, seeds "
             f"{seeds}; mean ± population std (ddof 0) over seeds (few-shot at the early-stopping step).", ""]
    head = "| family | steps | lr | " + " | ".join(f"{n:,}" for n in sizes) + " |"
    for m, title in names.items():
        lines += [f"**{title}** (%) against pre-training images", "", head,
                  "|---|---:|---:|" + "---:|" * len(sizes)]
        for t in schedules:
            for fam in FAMILIES:
                c = res["curves"][f"{fam}/{t}/{m}"]
                lr = next(r["lr"] for r in res["rows"] if (r["family"], r["steps"]) == (fam, t))
                at = {n: (a, b) for n, a, b in zip(c["images"], c["mean"], c["std"])}
                cells = " | ".join("–" if n not in at else f"{100 * at[n][0]:.1f} ± {100 * at[n][1]:.1f}"
                                   if len(seeds) > 1 else f"{100 * at[n][0]:.1f}" for n in sizes)
                lines.append(f"| {fam} | {t:,} | {lr:g} | {cells} |")
        lines.append("")
    lines += ["**Where the curves cross** (ViT minus ResNet; interpolated in log images, seed range in brackets)", "",
              "| measure | steps | gap at each of its sizes (points) | crossing |", "|---|---:|---|---|"]
    for m, title in names.items():
        for t in schedules:
            g = res["by_data"][f"{t}/{m}"]
            gaps = ", ".join(f"{100 * v:+.1f}" for v in g["gap"])
            lines.append(f"| {title} | {t:,} | {gaps} | {_cross_text(g, 'images')} |")
    if res["seed_check"]:
        lines += ["", "**Seeds where the families meet** (mean ± population std over pre-training seeds; the gap per seed pair)", "",
                  "| steps | images | measure | seeds | ViT | ResNet | ViT − ResNet (points) |", "|---:|---:|---|---|---:|---:|---|"]
        for c in res["seed_check"]:
            lines.append(f"| {c['steps']:,} | {c['images']:,} | {names[c['metric']]} | {c['seeds']} | "
                         f"{100 * c['ViT'][0]:.1f} ± {100 * c['ViT'][1]:.1f} | "
                         f"{100 * c['ResNet'][0]:.1f} ± {100 * c['ResNet'][1]:.1f} | {100 * c['gap'][0]:+.1f} ± "
                         f"{100 * c['gap'][1]:.1f} ({', '.join(f'{100 * g:+.1f}' for g in c['gaps'])}) |")
    if lr_sweeps:
        lines += ["", "Learning-rate sweep (largest set, seed 0; picked by the early-stopping 5-shot digits dev "
                  "accuracy): " + "; ".join(
                      f"{key}: " + sweep_text(sweep)
                      for key, sweep in lr_sweeps.items())]
    return "\n".join(lines)


def run_crossover(cs: CrossoverScale, out: Path, progress: bool = True, device: str = "cpu",
                  jobs: int = 1) -> dict[str, Any]:
    """Train (or resume) the crossover grid in `out` and write its figures; returns the result (JSON-able)."""
    wb = Workbench(out / "runs", cs.scale, progress, device, jobs)
    tuning = tuning_runs(cs)
    try:
        # the bar counts every step of the grid; the picked rate's tuning run is the grid's point at (largest, seed 0)
        tuned = [t for t in cs.schedules if t not in cs.lr_from] if 0 in cs.seeds else []
        grid_steps = len(FAMILIES) * (sum(t * len(cs.sizes_at(t)) * len(cs.seeds) for t in cs.schedules) - sum(tuned)
                                      + sum(t * len(cs.check_seeds) for t, _ in cs.seed_check))
        wb.start(tuning, f"crossover ({cs.name})")
        if wb.bar is not None:
            wb.bar.total += grid_steps
        lrs, sweeps = pick_lrs(wb, cs)  # the learning rates first: the grid uses the picks
        runs, checks = grid_runs(cs, lrs), seed_check_runs(cs, lrs)
        wb.count(runs + checks, planned=True)  # the picks' own runs (grid points or extensions) are counted already
        done = wb.pretrain_all(runs + checks)
        summaries, extra = done[:len(runs)], done[len(runs):]
    finally:
        wb.close()
    res = analyse(cs, summaries, extra)
    k = cs.scale.select_shots
    return {"crossover_scale": cs.to_dict(), "device": device, "lr": {f"{f} {t}": v for (f, t), v in lrs.items()},
            "lr_from": {str(t): u for t, u in cs.lr_from.items()}, "lr_sweeps": sweeps, **res,
            "check_rows": [_row(s, k) for s in extra], "markdown": markdown(cs.to_dict(), res, sweeps)}
