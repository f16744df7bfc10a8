"""The figures of `vitkit reproduce` (PNG via matplotlib), drawn from each experiment's result JSON alone.

`draw(name, result, folder)` is what a run calls after writing its result.json, and what `vitkit reproduce
--redraw` calls on committed JSON: a figure never holds a number its JSON does not. Honesty rules for every
figure: bar charts start at zero; a line plot whose accuracy axis does not start at zero says so in its axis
label; error bars are drawn only where there are seeds (95% t-interval over pre-training or fine-tuning seeds,
stats.py), and the legend or title says what they are; a curve of one seed has no error bars and says so; an
accuracy interval that passes 100% is drawn clipped at 100 and the figure says so (the JSON keeps the raw interval);
value labels sit beyond the error bar's end, never on it; a legend covers no data (below the axes, outside them);
points that share an x are dodged sideways, and the axis label says by how much. Every experiment's figure has a
panel of the paired differences its rule reads with their 95% intervals, drawn by one helper (`_differences`): the
parts the rule judges, number for number (`rule_differences`: rules.EVIDENCE; `_rule_panel` where a figure also has
curves), each at the point it reads, and for the experiments over data sizes beside it the gap at each size paired
as the rules pair it (`_paired_gaps`: rules.paired_by_seed); a comparison reported beside a verdict but not judged
is drawn hollow and says so.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import ScaledTranslation  # noqa: E402

from vitkit.reproduce.rules import (  # noqa: E402
    EVIDENCE,
    INDEPENDENT,
    RULES,
    at_flops,
    crossover_rows,
    fig5_points,
    legacy_seeds,
    matched_flops_point,
    paired_by_seed,
)
from vitkit.reproduce.stats import Estimate, mean_ci, paired, stored  # noqa: E402
from vitkit.reproduce.tables import scratch_steps  # noqa: E402

MARKERS = {"ViT": "o", "ResNet": "s", "Hybrid": "^"}
CLIP_NOTE = "error bars clipped at 100% where the 95% t-interval passes it (the JSON keeps the raw interval)"
COLORS = {"ViT": "tab:blue", "ResNet": "tab:orange", "Hybrid": "tab:green"}


def _save(fig: Any, path: Path) -> str:
    """Lay out and write the figure: room at the bottom for the clip note (`_clip_note`) and, above it, for a
    figure legend (`_legend_below`)."""
    bottom = 0.05 if any(t.get_text() == CLIP_NOTE for t in fig.texts) else 0.0
    for leg in fig.legends:
        leg.set_bbox_to_anchor((0.5, bottom), transform=fig.transFigure)
        bottom += leg.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height + 0.01
    fig.tight_layout(rect=(0, bottom, 1, 1) if bottom else None)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _short(x: float) -> str:
    """A tick label that fits: 20k, 1M for counts, 2e12 or 2.8e11 for FLOPs."""
    if x >= 1e9:
        m, e = f"{x:.1e}".split("e")
        return f"{m.removesuffix('.0')}e{int(e)}"
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:g}{suffix}"
    return f"{x:g}"


def _finish_axis(ax: Any, xlabel: str, title: str, log_x: bool = True, ylabel: str = "accuracy (%)",
                 data_x: Sequence[float] | None = None) -> None:
    """Labels, readable log ticks (at the data points where there are few, else decades and their 2s and 5s; no two
    labels overprint) and, where the y axis
    does not start at zero, a label that says where it starts. `data_x`: the true x of the points where they are
    drawn dodged (default: the x of the drawn lines)."""
    if log_x:
        ax.set_xscale("log")
        # a few data points (the data sizes of a grid): a tick at each, so every point's x can be read off; else
        # (or where two would print alike) the 1-2-5 ticks of each decade
        # (a point closer than a tenth of the axis to the last labelled one gets an unlabelled minor tick instead)
        xs = sorted({float(x) for x in (data_x if data_x is not None else
                                        [x for line in ax.get_lines() for x in line.get_xdata()]) if float(x) > 0})
        if 2 <= len(xs) <= 8 and len({_short(x) for x in xs}) == len(xs):
            lo_x, hi_x = (np.log10(v) for v in ax.get_xlim())
            labelled = [xs[0]]
            for x in xs[1:]:
                if np.log10(x / labelled[-1]) >= 0.1 * (hi_x - lo_x):
                    labelled.append(x)
            ax.xaxis.set_major_locator(FixedLocator(labelled))
            ax.xaxis.set_minor_locator(FixedLocator([x for x in xs if x not in labelled]) if len(labelled) < len(xs)
                                       else NullLocator())
        else:
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _short(x)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    lo = ax.get_ylim()[0]
    ax.set_ylabel(ylabel if lo <= 0 else f"{ylabel}\n(axis cut: starts at {lo:.0f})")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def _seed_groups(rows: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any], metric: str
                 ) -> dict[Any, Estimate]:
    """Rows grouped by `key`, each group's metric over its seeds (one value per seed)."""
    groups: dict[Any, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r.get(metric) is not None:
            groups[key(r)][int(r.get("seed", 0))] = r[metric]
    return {k: mean_ci(list(v.values())) for k, v in groups.items()}


def _yerr(ests: Sequence[Estimate]) -> tuple[list[list[float]], bool]:
    """The 95% t-intervals of accuracy estimates as matplotlib's [[below], [above]] in points, each upper end
    clipped at 100% (a difference's interval is not clipped: `_differences`); and whether any was clipped."""
    hi = [min(e.hi, 1.0) for e in ests]
    return ([[100 * (e.mean - e.lo) for e in ests], [100 * (h - e.mean) for e, h in zip(ests, hi)]],
            any(h < e.hi for e, h in zip(ests, hi)))


def _legend_below(fig: Any, axes: Sequence[Any], extra: Sequence[Any] = (), ncol: int = 3, **kw: Any) -> None:
    """One legend for the whole figure, under its panels (`_save` makes room), so it covers no data: every labelled
    artist of `axes` (each label once) and `extra` proxy handles (for what is drawn unlabelled)."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    for h in extra:
        handles.setdefault(h.get_label(), h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol, fontsize=7, **kw)


def _legend_under(ax: Any, tick_lines: int, **kw: Any) -> None:
    """An axes' legend just under its x tick labels (`tick_lines` text lines of 8 pt), whatever the axes' height."""
    drop = (7 + 9.6 * tick_lines + 4) / 72  # tick length and pad, the label lines, a gap: inches
    anchor = ax.transAxes + ScaledTranslation(0, -drop, ax.figure.dpi_scale_trans)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=anchor, **kw)


def _clip_note(fig: Any, clipped: bool) -> None:
    """Under a figure whose drawn intervals were clipped at 100%, the note that says so (`_save` leaves it room)."""
    if clipped:
        fig.text(0.5, 0.01, CLIP_NOTE, ha="center", va="bottom", fontsize=8, style="italic")


def _curve(ax: Any, xs: Sequence[float], ests: Sequence[Estimate], label: str, **kw: Any) -> bool:
    """A line of means; with seeds (n >= 2 everywhere) its 95% t-intervals as error bars (clipped at 100%), named in
    the label. Returns whether an interval was clipped (`_clip_note`)."""
    y = [100 * e.mean for e in ests]
    if all(e.n >= 2 for e in ests):
        err, clipped = _yerr(ests)
        n = min(e.n for e in ests)
        ax.errorbar(xs, y, yerr=err, capsize=3, label=f"{label} (95% CI, {n}+ seeds)", **kw)
        return clipped
    ax.plot(xs, y, label=f"{label} (1 seed, no error bars)" if max(e.n for e in ests) == 1 else label, **kw)
    return False


def _differences(ax: Any, xs: Sequence[float], ests: Sequence[Estimate], color: Any = "k", label: str | None = None,
                 line: bool = False, p_values: bool = False, scale: float = 100.0, judged: bool = True) -> None:
    """The one drawing of differences, in every figure: each estimate's mean (times `scale`: points for accuracies)
    at its x with its 95% t-interval as an error bar, not clipped (a difference is no accuracy), where it has one
    (n >= 2), else the point alone, said in the label; `line`: the means joined; `p_values`: each p beside its point;
    `judged` False: a comparison beside the verdict that its rule does not judge (hollow marker)."""
    ys = [scale * e.mean for e in ests]
    has_ci = [e.n >= 2 and not np.isnan(e.lo) for e in ests]
    for x, e, y, ci in zip(xs, ests, ys, has_ci):
        if ci:
            ax.errorbar(x, y, yerr=[[scale * (e.mean - e.lo)], [scale * (e.hi - e.mean)]], fmt="none", ecolor=color,
                        capsize=4)
        if p_values and e.p is not None:
            ax.annotate(f"p={e.p:.2g}", (x, y), textcoords="offset points", xytext=(6, 0), fontsize=8, va="center",
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
    what = "95% CI" if all(has_ci) else "1 seed, no interval" if not any(has_ci) else "95% CI where 2+ seeds"
    ax.plot(xs, ys, marker="o", linestyle="-" if line else "none", color=color, zorder=3,
            markerfacecolor=color if judged else "white", label=f"{label} ({what})" if label else None)
    ax.axhline(0, color="gray", linewidth=1)


def _difference_panel(ax: Any, differences: dict[str, Estimate], title: str, bands: dict[str, float] | None = None,
                      unjudged: Sequence[str] = (), scale: float = 100.0, ylabel: str = "difference (points)") -> bool:
    """A panel of named differences (`_differences`, p-values beside), one tick each: `bands`, a difference's
    equivalence margin (accuracy units) as a band behind it; `unjudged`, names reported beside the verdict but not
    judged by the rule (hollow). Returns whether a band was drawn (its legend entry is labelled)."""
    names = list(differences)
    banded = False
    for i, n in enumerate(names):
        if n in (bands or {}):
            m = scale * bands[n]
            ax.fill_between([i - 0.35, i + 0.35], -m, m, color="tab:green", alpha=0.18, linewidth=0,
                            label=None if banded else f"±{m:g}-point equivalence band (the rule's)")
            banded = True
        _differences(ax, [i], [differences[n]], color="tab:gray" if n in unjudged else "k", p_values=True, scale=scale,
                     judged=n not in unjudged)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(ylabel)
    one_seed = not any(e.n >= 2 and not np.isnan(e.lo) for e in differences.values())
    ax.set_title(title + ("\n(one seed: no interval)" if one_seed else ""), fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    return banded


def _paired_gaps(ax: Any, rows: Sequence[dict[str, Any]], series: dict[str, tuple[dict[str, Any], dict[str, Any]]],
                 metric: str, title: str, colors: Sequence[Any] = ("k", "tab:purple", "tab:brown", "tab:gray")) -> None:
    """A paired-difference panel over data sizes: for each series (label -> (A's row filter, B's row filter)) A − B in
    points at each data size, paired by seed (rules.paired_by_seed, as the rules pair them), with its 95% t-interval
    (`_differences`; the families' own intervals overlap where the paired gap is clear), dodged sideways per series."""
    k = len(series)
    true_x: set[float] = set()
    for i, ((label, (fa, fb)), color) in enumerate(zip(series.items(), colors)):
        def pick(f: dict[str, Any], n: int) -> dict[int, float]:
            return {int(r.get("seed", 0)): r[metric] for r in rows
                    if r["images"] == n and metric in r and all(r.get(a) == v for a, v in f.items())}

        sizes = sorted({r["images"] for r in rows if all(r.get(a) == v for a, v in fa.items())})
        pts = [(n, paired_by_seed(pick(fa, n), pick(fb, n))) for n in sizes if set(pick(fa, n)) & set(pick(fb, n))]
        if not pts:
            continue
        true_x.update(n for n, _ in pts)
        shift = 10 ** (DODGE * (i - (k - 1) / 2))
        _differences(ax, [n * shift for n, _ in pts], [e for _, e in pts], color=color, line=True,
                     label=f"{label}, paired by seed")
    _finish_axis(ax, "pre-training images" + ("\n(series dodged sideways; ticks: true sizes)" if k > 1 else ""), title,
                 ylabel="difference (points)", data_x=sorted(true_x))


def _rule_panel(ax: Any, name: str, res: dict[str, Any], labels: dict[str, str], metric: str) -> None:
    """The parts experiment `name`'s rule judges, number for number (`rule_differences`), one tick each: its
    `labels[part]`, its claim, and "post hoc" where the part was added after the results were read (rules.Part.added);
    `metric`: what the differences are of, for the title."""
    parts = {p.key: p for p in RULES[name].parts}
    named = {k: f"{text}\n(claimed {parts[k].inequality()})" + ("\n(post hoc)" if parts[k].added else "")
             for k, text in labels.items()}
    diffs, bands = rule_differences(name, res, named)
    _difference_panel(ax, diffs, f"the rule's parts: {metric},\npaired by seed, 95% interval", bands=bands or None)
    ax.set_xlabel("each part at the point it reads")


# -- experiments 1 and 2: data size and compute ------------------------------------------------------------

def data_size(res: dict[str, Any], path: Path) -> str:
    """Fig. 3/4: transfer accuracy against the number of pre-training images, one line per family (dotted:
    the family's untrained network, where the panel has a figure for it). The top row is what the rule reads: 5-shot
    digits, ViT − ResNet paired by seed at each data size, and the rule's parts as it judges them (the gap at the
    smallest and the largest size and how it changes between them); the bottom row, the other metrics."""
    rows, untrained = res["rows"], res.get("untrained") or {}
    panels = [("digits_test_5shot", "5-shot linear, digits (Fig. 4; the rule's metric)"),
              ("finetune_top1", "fine-tuned digits accuracy (Fig. 3)"), ("lfw_test_5shot", "5-shot linear, lfw faces"),
              ("glyph_test_top1", "pre-training task: glyph test accuracy")]
    fig, grid = plt.subplots(2, 3, figsize=(16, 9.6))
    axes = list(grid.flat)
    clipped, dotted = False, False
    _paired_gaps(axes[1], rows, {"ViT − ResNet": ({"family": "ViT"}, {"family": "ResNet"})}, "digits_test_5shot",
                 "ViT − ResNet, 5-shot digits, at each data size")
    sizes = sorted({r["images"] for r in rows})
    _rule_panel(axes[2], "fig4", res, {"small": f"ViT − ResNet\nat {sizes[0]:,}",
                                       "large": f"ViT − ResNet\nat {sizes[-1]:,}",
                                       "narrows": f"the gap at\n{sizes[-1]:,} minus\nat {sizes[0]:,}"},
                "ViT − ResNet, 5-shot digits")
    for ax, (key, title) in zip([axes[0], *axes[3:]], panels):
        for fam in MARKERS:
            est = _seed_groups([r for r in rows if r["family"] == fam], lambda r: r["images"], key)
            if not est:
                continue
            xs = sorted(est)
            clipped |= _curve(ax, xs, [est[x] for x in xs], fam, marker=MARKERS[fam], color=COLORS[fam])
            if key in untrained.get(fam, {}):
                ax.axhline(100 * untrained[fam][key], color=COLORS[fam], linestyle=":", linewidth=1)
                dotted = True
        _finish_axis(ax, "pre-training images", title)
    _legend_below(fig, axes, [Line2D([], [], color="gray", linestyle=":", linewidth=1,
                                     label="dotted, in the family's colour: its untrained network (where measured)")]
                  if dotted else (), ncol=4)
    _clip_note(fig, clipped)
    return _save(fig, path)


def _size_label_offsets(points: Sequence[tuple[str, float, float]]) -> dict[tuple[str, float], tuple[int, int]]:
    """Where each point's size label goes (offset in points), by (family, FLOPs): right of the point and above it
    (clear of a hollow diamond beside it), except where another family's point shares its FLOPs (within 10%): then
    the higher of the two is labelled above and the lower below, so the labels of points at one FLOPs value
    (ResNet-B and Hybrid-S) never overprint."""
    out = {}
    for fam, x, y in points:
        near = [(f, yy) for f, xx, yy in points if f != fam and abs(np.log10(xx / x)) < 0.04]
        below = any(yy > y or (yy == y and f > fam) for f, yy in near)
        out[fam, x] = (7, -11 if below else 11)
    return out


def compute(res: dict[str, Any], path: Path) -> str:
    """Fig. 5: transfer accuracy against pre-training compute, one line per family over its sizes (S, B, L),
    hybrids included; on the panel of the rule's metric, the FLOPs it reads (rules.fig5_points) and each family's
    curve read there (hollow diamonds: the mean over seeds of rules.at_flops); beside them the rule's parts, paired by
    seed with their 95% intervals (rules.EVIDENCE, the numbers it judges)."""
    rows = res["rows"]
    panels = [("finetune_top1", "fine-tuned digits accuracy"), ("avg_5shot", "5-shot linear, mean of digits and lfw")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), gridspec_kw={"width_ratios": [1, 1, 0.75]})
    clipped = False
    # the FLOPs the rule reads, where every family it compares has runs (a smoke run may lack one)
    read = fig5_points(rows) if {"ViT", "ResNet", "Hybrid"} <= {r["family"] for r in rows} else None
    marked = False
    for ax, (key, title) in zip(axes, panels):
        drawn = []
        for fam in MARKERS:
            fam_rows = [r for r in rows if r["family"] == fam]
            est = _seed_groups(fam_rows, lambda r: r["size"], key)
            if not est:
                continue
            flops = {r["size"]: r["train_flops"] for r in fam_rows}
            sizes = sorted(est, key=lambda s: flops[s])
            clipped |= _curve(ax, [flops[s] for s in sizes], [est[s] for s in sizes], fam, marker=MARKERS[fam],
                              color=COLORS[fam], markersize=8)
            drawn += [(fam, s, flops[s], 100 * est[s].mean) for s in sizes]
        offsets = _size_label_offsets([(fam, x, y) for fam, _, x, y in drawn])
        for fam, s, x, y in drawn:
            ax.annotate(f"{fam[0]}-{s}", (x, y), textcoords="offset points", xytext=offsets[fam, x], fontsize=7,
                        color=COLORS[fam], va="center", ha="left")
        if key == "avg_5shot" and read:  # the FLOPs the rule reads (rules.fig5_points) on the panel of its metric
            ax.axvline(read["mid"], color="gray", linestyle=":", linewidth=1.2,
                       label=f"read by the rule: ViT vs ResNet at {_short(read['mid'])}")
            for x, what, style in ((read["lo_h"], "smallest", "--"), (read["hi_h"], "largest", "-.")):
                ax.axvline(x, color="tab:green", linestyle=style, linewidth=0.9, alpha=0.7,
                           label=f"read by the rule: hybrid vs ViT at the {what} shared FLOPs ({_short(x)})")
            for fams, x in ((("ViT", "ResNet"), read["mid"]), (("Hybrid", "ViT"), read["lo_h"]),
                            (("Hybrid", "ViT"), read["hi_h"])):
                for fam in fams:
                    y = _read_at_flops(rows, fam, key, x)
                    if y is not None:
                        ax.plot([x], [100 * y], "D", markersize=8, markerfacecolor="none", markeredgecolor=COLORS[fam],
                                markeredgewidth=1.5, zorder=4)
                        marked = True
        ax.margins(x=0.1, y=0.1)  # room for the size labels of the rightmost and the highest points
        _finish_axis(ax, "pre-training compute (FLOPs)", title)
    if read:
        _difference_panel(axes[2], rule_differences("fig5", res, {
            "vit_vs_resnet": f"ViT − ResNet\nat {_short(read['mid'])}",
            "hybrid_vs_vit_small": f"Hybrid − ViT\nat {_short(read['lo_h'])}",
            "hybrid_gap_closes": f"(Hybrid − ViT)\nat {_short(read['lo_h'])} minus\nat {_short(read['hi_h'])}"})[0],
            "the rule's parts (each claimed > 0): 5-shot\nmean, paired by seed, 95% interval")
        axes[2].set_xlabel("each part at the FLOPs it reads")
    else:
        axes[2].set_axis_off()
        axes[2].text(0.5, 0.5, "no rule part: a family it compares\nhas no runs", ha="center", va="center",
                     transform=axes[2].transAxes, fontsize=9)
    _legend_below(fig, axes, [Line2D([], [], marker="D", linestyle="none", markerfacecolor="none", color="gray",
                                     label="hollow diamond, in the family's colour: its curve where the rule reads it "
                                           "(mean over seeds)")] if marked else ())
    _clip_note(fig, clipped)
    return _save(fig, path)


def _read_at_flops(rows: Sequence[dict[str, Any]], fam: str, metric: str, x: float) -> float | None:
    """Family `fam`'s curve of `metric` read at `x` FLOPs as the rule reads it: each seed's curve interpolated in log
    FLOPs (rules.at_flops), then the mean over the seeds (None where x is outside a seed's curve)."""
    seeds = sorted({int(r.get("seed", 0)) for r in rows if r["family"] == fam})
    ys = [at_flops([(r["train_flops"], r[metric]) for r in rows
                    if r["family"] == fam and int(r.get("seed", 0)) == s and metric in r], x) for s in seeds]
    return None if not ys or any(y is None for y in ys) else float(np.mean(ys))


# -- experiment 3: what the ViT learns -------------------------------------------------------------------------

FIG7_MEASURES = "fig7_measures.png"  # drawn from the JSON; the other fig7 figures are `vitkit inspect`'s, seed 0's
FIG7_UNITS = {"grid": "cosine similarity difference", "depth": "slope (px per layer)",
              "global_heads": "share of the largest distance"}


def fig7_measures(res: dict[str, Any], path: Path) -> str:
    """§4.5, Fig. 7 (right) and the rule's parts, from the JSON of every pre-training seed: each seed's mean attention
    distance per layer (its heads as dots, uniform attention dashed), and beside it each part the rule judges (its
    own unit) with its 95% interval over the seeds (rules.EVIDENCE)."""
    models = res.get("per_seed") or [res]  # a seeded run keeps one entry per pre-training seed
    parts = [p for p in RULES["fig7"].parts]
    fig, axes = plt.subplots(1, 1 + len(parts), figsize=(4.6 + 2.6 * len(parts), 4.6),
                             gridspec_kw={"width_ratios": [2.2] + [1] * len(parts)})
    ax = axes[0]
    for i, m in enumerate(models):
        layers = np.arange(1, len(m["attention_distance_per_layer"]) + 1)
        color = plt.get_cmap("Blues")(0.45 + 0.55 * i / max(1, len(models) - 1))
        seed = m.get("model", "").rpartition("_seed")[2] or str(i)
        ax.plot(layers, m["attention_distance_per_layer"], "o-", color=color, label=f"seed {seed}: mean over heads")
        for layer, heads in zip(layers, m["attention_distance_per_head"]):
            ax.scatter([layer + 0.08 * (i - (len(models) - 1) / 2)] * len(heads), heads, color=color, s=9, alpha=0.6)
    ax.axhline(res["uniform_attention_distance"], color="gray", linestyle="--",
               label=f"uniform attention ({res['uniform_attention_distance']:.2f} px)")
    ax.xaxis.set_major_locator(FixedLocator(list(range(1, len(models[0]["attention_distance_per_layer"]) + 1))))
    _finish_axis(ax, "layer (dots: its heads)", "mean attention distance by depth (Fig. 7 right)", log_x=False,
                 ylabel="attention distance (px)")
    diffs, _ = rule_differences("fig7", res, {p.key: p.key for p in parts})
    for a, p in zip(axes[1:], parts):
        if p.key in diffs:
            _difference_panel(a, {f"{len(models)} seed{'s' if len(models) > 1 else ''}": diffs[p.key]},
                              f"{p.key}: claimed {p.inequality()}", scale=p.scale, ylabel=FIG7_UNITS[p.key])
        a.set_xlabel("\n".join(textwrap.wrap(p.what, 26)), fontsize=8)
    fig.suptitle("what the ViT learns (ViT-L, each pre-training seed): the rule's parts with their 95% interval over "
                 "the seeds" if len(models) > 1 else "what the ViT learns (ViT-L, one pre-training seed: the rule's "
                 "parts have no interval)", fontsize=10)
    _legend_below(fig, [ax], ncol=len(models) + 1)
    return _save(fig, path)


# -- bars: experiments 4, 5, 6 ---------------------------------------------------------------------------

def bars(categories: Sequence[str], series: dict[str, Sequence[Estimate | None]], title: str, ylabel: str, path: Path,
         baselines: dict[str, Estimate] | None = None, differences: dict[str, Estimate] | None = None,
         difference_title: str = "", bands: dict[str, float] | None = None, unjudged: Sequence[str] = ()) -> str:
    """Grouped bars from zero (accuracies in [0, 1], drawn in %): one group per category, one bar per series, the
    95% t-interval as error bar (clipped at 100%) and each seed as a dot where known, the mean written beyond the
    interval's end in a white box; optional horizontal reference lines (with their interval as a band) and a second
    panel of differences (`_difference_panel`: points, 95% interval, a line at zero; `bands`: a difference's
    equivalence margin, in accuracy units, drawn as a band behind it; `unjudged`: differences the rule does not judge).
    """
    ncols = 2 if differences else 1
    fig, axs = plt.subplots(1, ncols, figsize=(1.2 * len(categories) * len(series) + 3.5 + 3.5 * (ncols - 1), 4.4),
                            gridspec_kw={"width_ratios": [3, 1.3]} if differences else None)
    ax = axs[0] if differences else axs
    width = 0.8 / len(series)
    colors = ("tab:blue", "tab:purple", "tab:cyan", "tab:olive")
    ns, clipped = set(), False
    for j, (name, ests) in enumerate(series.items()):
        for i, e in enumerate(ests):
            if e is None:
                continue
            x = i + (j - (len(series) - 1) / 2) * width
            ax.bar(x, 100 * e.mean, width * 0.95, color=colors[j % len(colors)], alpha=0.8,
                   label=name if i == next(k for k, v in enumerate(ests) if v is not None) else None)
            top, bottom = e.mean, e.mean
            if e.n >= 2:
                ns.add(e.n)
                err, cut = _yerr([e])
                clipped |= cut
                ax.errorbar(x, 100 * e.mean, yerr=err, color="k", capsize=4)
                top, bottom = min(e.hi, 1.0), e.lo
            if e.values:
                ax.scatter([x] * len(e.values), [100 * v for v in e.values], color="k", s=9, zorder=3)
                top, bottom = max(top, *e.values), min(bottom, *e.values)
            # above the interval's (and the seeds') top; where that is near 100, below its bottom, inside the bar;
            # where both ends are near the axis' ends, beside the error bar at the mean's height
            lx, ly, va, dy = ((x, top, "bottom", 4) if top < 0.9 else (x, bottom, "top", -4) if bottom > 0.1 else
                              (x + 0.3 * width, e.mean, "center", 0))
            ax.annotate(f"{100 * e.mean:.1f}", (lx, 100 * ly), ha="center", va=va, textcoords="offset points",
                        xytext=(0, dy), fontsize=8, zorder=4,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
    for (label, e), color in zip((baselines or {}).items(), ("tab:red", "tab:green", "tab:gray")):
        ax.axhline(100 * e.mean, color=color, linestyle="--", label=f"{label}: {e.text()}")
        if e.n >= 2:
            ax.axhspan(100 * e.lo, 100 * min(e.hi, 1.0), color=color, alpha=0.12)
            clipped |= e.hi > 1.0
    ax.set_xticks(range(len(categories)), categories, fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel(ylabel)
    what = f"error bars / bands: 95% t-interval over {'/'.join(map(str, sorted(ns)))} seeds; dots: seeds" if ns else \
        "one seed: no error bars"
    ax.set_title(f"{title}\n({what})", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    # both panels' legends at one height, under the taller tick labels
    lines = max(label.count("\n") + 1 for label in [*categories, *(differences or {})])
    _legend_under(ax, lines, ncol=2)
    if differences and _difference_panel(axs[1], differences, difference_title or "difference, 95% interval", bands,
                                         unjudged):
        _legend_under(axs[1], lines)
    _clip_note(fig, clipped)
    return _save(fig, path)


def rule_differences(name: str, res: dict[str, Any], labels: dict[str, str] | None = None,
                     extra: dict[str, str] | None = None) -> tuple[dict[str, Estimate], dict[str, float]]:
    """The differences experiment `name`'s rule judges, exactly as it judges them (rules.EVIDENCE: paired by seed
    where the JSON keeps seeds), keyed by `labels[part]` (default: the part's own words; a part the result cannot
    give, as a smoke run's, left out); then `extra`'s comparisons the evidence reports beside the verdict
    (Evidence.extra key -> label); and the equivalence margin of each part that has one."""
    rule, ev = RULES[name], EVIDENCE[name](res)
    label = {p.key: (labels or {}).get(p.key, p.what) for p in rule.parts}
    diffs = {label[p.key]: ev.parts[p.key] for p in rule.parts if p.key in ev.parts}
    diffs.update({text: ev.extra[key] for key, text in (extra or {}).items() if key in ev.extra})
    return diffs, {label[p.key]: p.margin for p in rule.parts if p.kind == "equivalent" and p.key in ev.parts}


def _pseudo_note(name: str, res: dict[str, Any], short: bool = False) -> str:
    """A title line for a result whose seeds are fine-tuning seeds of one pre-trained model (rules.INDEPENDENT not
    met): its error bars are not intervals over independent replicates, and its verdict is not established (`short`:
    the line for a difference panel's title)."""
    met = EVIDENCE[name](res).checks.get(INDEPENDENT, (True, ""))[0]
    if met is not False:
        return ""
    return ("\nNOT ESTABLISHED: fine-tuning seeds" if short else
            "\nNOT ESTABLISHED: seeds are fine-tuning seeds of one pre-trained model;"
            "\nthe bars are not intervals over independent replicates")


def hires(res: dict[str, Any], path: Path) -> str:
    """§3.2: fine-tuned accuracy at the pre-training resolution and at 2x, and their paired difference."""
    r = res["results"]
    est = {k: mean_ci(v["accs"]) for k, v in r.items()}
    return bars(list(est), {"digits test accuracy": list(est.values())},
                "fine-tuning at the pre-training resolution vs 2x (E_pos resampled, §3.2)" + _pseudo_note("hires", res),
                "digits test accuracy (%)",
                path, differences=rule_differences("hires", res, {"gain": "32 px − 16 px"})[0],
                difference_title="the rule's difference,\npaired by seed, 95% interval" + _pseudo_note("hires", res, True))


def posemb(res: dict[str, Any], path: Path, seeds: int) -> str:
    """Appendix D.4: the pre-training task and 5-shot digits for each position-embedding variant; beside them the
    differences against 1-D the rule tests (5-shot digits, 95% interval) with its ±2-point equivalence band."""
    names = {"none": "none", "learn1d": "1-D (default)", "learn2d": "2-D", "relative": "relative"}
    r = res["results"]
    series = {m: [stored(r[p][m], seeds) for p in names] for m in ("glyph_test_top1", "digits_test_5shot")}
    diffs, bands = rule_differences("posemb", res, {"none_worse": "none − 1-D", "2d_same": "2-D − 1-D",
                                                    "relative_same": "relative − 1-D"})
    return bars([names[p] for p in names], {"glyph test (upstream)": series["glyph_test_top1"],
                                            "5-shot digits": series["digits_test_5shot"]},
                "position embeddings (appendix D.4)", "accuracy (%)", path, differences=diffs, bands=bands,
                difference_title="5-shot digits against 1-D\n(the rule's differences, 95% interval)")


def mpp(res: dict[str, Any], path: Path, seeds: int) -> str:
    """§4.6: fine-tuned accuracy after MPP of each length, beside from-scratch training given the same total
    compute; from scratch (the usual steps) and supervised pre-training as reference lines; beside them the
    differences the rule judges at the longest MPP run, and (hollow, not judged) MPP against the usual scratch run."""
    lengths = sorted(res["mpp"], key=int)
    usual = f"from scratch, the usual {scratch_steps(res)} steps"
    diffs, _ = rule_differences("mpp", res, {"beats_scratch": "MPP − scratch,\nsame compute\n(claimed > 0)",
                                             "behind_supervised": "MPP −\nsupervised\n(claimed < 0)"},
                                extra={"usual_scratch": "MPP − usual\nscratch (not\njudged)"})
    return bars([f"{int(n):,} MPP steps" for n in lengths],
                {"MPP, then fine-tuning": [stored(res["mpp"][n], seeds) for n in lengths],
                 "from scratch, same total compute": [stored(res["equal_budget_scratch"][n]["top1"], seeds)
                                                      for n in lengths]},
                "masked patch prediction (§4.6), then fine-tuning on digits" + _pseudo_note("mpp", res),
                "digits test accuracy (%)", path,
                baselines={usual: stored(res["scratch"], seeds), "supervised pre-training": stored(res["supervised"], seeds)},
                differences=diffs, unjudged=["MPP − usual\nscratch (not\njudged)"],
                difference_title=f"at {int(lengths[-1]):,} MPP steps: the rule's\ndifferences, 95% interval"
                + _pseudo_note("mpp", res, True))


def mpp_pretraining_curves(records: Sequence[dict[str, Any]], path: Path, title: str,
                           majority: float | None = None, shots: int = 5) -> str:
    """One masked-patch-prediction run's curves (§4.6) from its metrics.jsonl records: the masked-colour
    cross-entropy, the accuracy of the mean colour predicted for the masked patches (the batches trained on, and the
    glyph test split's masked patches at the end; `majority`: always answering the most frequent colour), and the
    `shots`-shot digits accuracy of the frozen features during training. One run: no error bars."""
    train = [r for r in records if "loss" in r and "train_acc" in r]
    test = [r for r in records if r.get("split") == "test" and "eval_top1" in r]
    key = f"eval_fewshot_digits_{{}}_{shots}shot"
    fewshot = [r for r in records if key.format("dev") in r]
    if not train:
        raise ValueError(f"{path.name}: the records hold no training line (loss, train_acc): not a run's metrics.jsonl")
    steps = [r["step"] for r in train]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    ax = axes[0]
    ax.plot(steps, [r["loss"] for r in train], color="tab:blue", label="masked patches of the batches trained on")
    for r in test:
        ax.plot([r["step"]], [r["eval_loss"]], "*", color="tab:red", markersize=11,
                label="masked patches of the glyph test split (end)")
    _finish_axis(ax, "pre-training step", "MPP loss", log_x=False, ylabel="masked-colour cross-entropy")
    ax = axes[1]
    ax.plot(steps, [100 * r["train_acc"] for r in train], color="tab:blue")
    for r in test:
        ax.plot([r["step"]], [100 * r["eval_top1"]], "*", color="tab:red", markersize=11)
    if majority is not None:
        ax.axhline(100 * majority, color="grey", linestyle=":", label="always the most frequent colour")
    ax.set_ylim(0, 100)
    _finish_axis(ax, "pre-training step", "what MPP learns", log_x=False,
                 ylabel="masked patches: mean colour right (%)")
    ax = axes[2]
    for split, style in (("dev", "o-"), ("test", "s--")):
        ax.plot([r["step"] for r in fewshot], [100 * r[key.format(split)] for r in fewshot], style,
                color="tab:green" if split == "dev" else "tab:purple",
                label=f"frozen features, {shots}-shot digits {split}")
    ax.set_ylim(0, 100)
    _finish_axis(ax, "pre-training step", "what transfers (linear few-shot)", log_x=False,
                 ylabel=f"{shots}-shot digits accuracy (%)")
    fig.suptitle(title + " (one run: no error bars)", fontsize=11)
    _legend_below(fig, axes)
    return _save(fig, path)


def variants(res: dict[str, Any], path: Path, experiment: str, a: str, b: str, title: str) -> str:
    """Two variants, each at its own picked pre-training rate (`res["lr"]`): 5-shot digits and glyph test, and
    a − b paired by pre-training seed (appendix D.3's pooling, appendix D.1's optimisers): on 5-shot digits the part
    `experiment`'s rule judges (with its equivalence band where it tests one), on the glyph test (hollow) a comparison
    beside the verdict."""
    r = res["results"]
    metrics = {"digits_test_5shot": "5-shot digits", "glyph_test_top1": "glyph test (upstream)"}
    (part,) = RULES[experiment].parts
    judged, bands = rule_differences(experiment, res, {part.key: f"{a} − {b},\n5-shot digits"})
    upstream = f"{a} − {b}, glyph\ntest (not judged)"
    return bars([f"{p} (lr {res['lr'][p]:g})" for p in r], {name: [mean_ci(r[p][m]["values"]) for p in r]
                                                            for m, name in metrics.items()}, title, "accuracy (%)",
                path, differences={**judged, upstream: paired(r[a]["glyph_test_top1"]["values"],
                                                              r[b]["glyph_test_top1"]["values"])},
                difference_title="paired by pre-training seed,\n95% interval", bands=bands or None,
                unjudged=[upstream])


def model_size(res: dict[str, Any], path: Path) -> str:
    """Fig. 3 (§4.2): 5-shot digits and glyph test against pre-training images, one line per family and size
    (S: dashed, hollow markers; B: solid, filled); B − S paired by seed at each data size; the rule's parts as it
    judges them (the ViTs' difference in gains from data, and B − S on the whole set)."""
    rows = res["rows"]
    panels = [("digits_test_5shot", "5-shot linear, digits"), ("glyph_test_top1", "pre-training task: glyph test")]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8), gridspec_kw={"width_ratios": [1, 1, 1, 0.7]})
    clipped = False
    _paired_gaps(axes[2], rows, {f"{fam}-B − {fam}-S": ({"family": fam, "size": "B"}, {"family": fam, "size": "S"})
                                 for fam in ("ViT", "ResNet")}, "digits_test_5shot",
                 "B − S, 5-shot digits, paired by seed\n(the rule reads the ViTs')", colors=(COLORS["ViT"], COLORS["ResNet"]))
    sizes = sorted({r["images"] for r in rows})
    _rule_panel(axes[3], "size", res, {"vit_gain": f"ViT-B's gain\nminus ViT-S's,\n{sizes[0]:,} → {sizes[-1]:,}",
                                       "vit_large": f"ViT-B − ViT-S\nat {sizes[-1]:,}"}, "5-shot digits")
    for ax, (key, title) in zip(axes, panels):
        for fam in ("ViT", "ResNet"):
            for size, style, face in (("S", "--", "white"), ("B", "-", COLORS[fam])):
                est = _seed_groups([r for r in rows if (r["family"], r["size"]) == (fam, size)], lambda r: r["images"],
                                   key)
                if est:
                    xs = sorted(est)
                    clipped |= _curve(ax, xs, [est[x] for x in xs], f"{fam}-{size}", marker=MARKERS[fam],
                                      color=COLORS[fam], linestyle=style, markerfacecolor=face, markersize=7)
        _finish_axis(ax, "pre-training images", title)
    _legend_below(fig, axes, ncol=4, handlelength=4)
    _clip_note(fig, clipped)
    return _save(fig, path)


def samples(images: Any, labels: Any, classes: int, per_class: int, path: Path, title: str) -> str:
    """A grid of images (N, 1, H, W uint8): `per_class` examples (rows) of each of the first `classes` classes that
    have that many (columns): no empty cell."""
    labels = np.asarray(labels)
    full = [c for c in np.unique(labels) if (labels == c).sum() >= per_class][:classes]
    if len(full) < classes:
        raise ValueError(f"only {len(full)} classes have {per_class} images among {len(labels)}; draw more images")
    fig, axes = plt.subplots(per_class, classes, figsize=(classes * 0.9, per_class * 0.9 + 0.4))
    for col, c in enumerate(full):
        idx = np.flatnonzero(labels == c)[:per_class]
        for r in range(per_class):
            ax = axes[r, col]
            ax.axis("off")
            ax.imshow(images[idx[r], 0], cmap="gray", vmin=0, vmax=255)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


# -- experiment 7: the crossover -----------------------------------------------------------------------------

CROSSOVER_METRICS = {"glyph_test_top1": "pre-training task: glyph test", "digits_test_5shot": "5-shot linear, digits",
                     "avg_5shot": "5-shot linear, mean of digits and lfw"}


DODGE = 0.035  # decades between neighbouring series of crossover_data at one data size


def crossover_data(res: dict[str, Any], path: Path) -> str:
    """Experiment 7: accuracy against pre-training images, one line per family and schedule length (darker:
    longer); error bars (95% t-interval) only where a point has seeds. The series share their data sizes, so each is
    dodged sideways by its own factor (`DODGE` decades apart, said in the axis label; the ticks stay at the true
    sizes) and no point or bar hides another."""
    rows = crossover_rows(res)
    schedules = sorted({r["steps"] for r in rows})
    series = [(t, a, fam) for t, a in zip(schedules, np.linspace(0.35, 1.0, len(schedules)))
              for fam in ("ViT", "ResNet")]
    shift = {s[::2]: 10 ** (DODGE * (k - (len(series) - 1) / 2)) for k, s in enumerate(series)}
    widest = max(abs(v - 1) for v in shift.values()) if len(series) > 1 else 0.0
    fig, axes = plt.subplots(1, len(CROSSOVER_METRICS) + 1, figsize=(5.4 * (len(CROSSOVER_METRICS) + 1), 5.2))
    clipped = False
    _paired_gaps(axes[-1], rows, {f"{t:,} steps": ({"family": "ViT", "steps": t}, {"family": "ResNet", "steps": t})
                                  for t in schedules}, "digits_test_5shot",
                 "ViT − ResNet, 5-shot digits, paired by seed\n(the rule's metric)",
                 colors=[tuple(c) for c in plt.get_cmap("Greys")(np.linspace(0.45, 1.0, len(schedules)))])
    for ax, (m, title) in zip(axes, CROSSOVER_METRICS.items()):
        true_x: set[float] = set()
        for t, a, fam in series:
            est = _seed_groups([r for r in rows if r["family"] == fam and r["steps"] == t], lambda r: r["images"], m)
            if not est:
                continue
            xs = sorted(est)
            true_x.update(xs)
            clipped |= _curve(ax, [x * shift[t, fam] for x in xs], [est[x] for x in xs], f"{fam}, {t:,} steps",
                              color=COLORS[fam], alpha=float(a), marker=MARKERS[fam])
        _finish_axis(ax, "pre-training images" + (f"\n(series dodged up to ±{100 * widest:.0f}% in x; ticks: true sizes)"
                                                  if widest else ""),
                     title, data_x=sorted(true_x))
    _legend_below(fig, axes)
    _clip_note(fig, clipped)
    return _save(fig, path)


def crossover_compute(res: dict[str, Any], path: Path) -> str:
    """Experiment 7: accuracy against pre-training FLOPs; faint dots: every run (each seed, every data size); lines:
    each family at the largest data size over its schedule lengths (a fixed point named in advance, not a maximum
    over data sizes); a dotted line at the matched-FLOPs point the rule reads (rules.matched_flops_point); and the
    rule's four parts as it judges them (at the smallest and the largest data size, matched steps and matched FLOPs,
    and the gap's change with data)."""
    rows = crossover_rows(res)
    big = max(r["images"] for r in rows)
    sizes = sorted({r["images"] for r in rows})
    t_match, x_match = matched_flops_point(rows)
    k = len(CROSSOVER_METRICS)
    fig, axes = plt.subplots(1, k + 1, figsize=(5.4 * k + 6.2, 5.6), gridspec_kw={"width_ratios": [1] * k + [1.15]})
    _rule_panel(axes[-1], "crossover", res, {
        "small_data": f"smallest data\n({_short(sizes[0])}), its\nlongest run",
        "large_data_steps": f"largest data\n({_short(big)}),\nmatched steps",
        "large_data_flops": f"largest data,\nmatched FLOPs\n({_short(x_match)})",
        "narrows": f"the gap at\n{_short(big)} minus\nat {_short(sizes[0])}"}, "ViT − ResNet, 5-shot digits")
    clipped = False
    for ax, (m, title) in zip(axes, CROSSOVER_METRICS.items()):
        for fam in ("ViT", "ResNet"):
            pts = [(r["train_flops"], r[m]) for r in rows if r["family"] == fam and m in r]
            if pts:
                ax.scatter([p[0] for p in pts], [100 * p[1] for p in pts], color=COLORS[fam], marker=MARKERS[fam],
                           alpha=0.25, s=14, label=f"{fam}, every run: each seed, {sizes[0]:,}–{sizes[-1]:,} images")
            est = _seed_groups([r for r in rows if r["family"] == fam and r["images"] == big],
                               lambda r: r["train_flops"], m)
            if est:
                xs = sorted(est)
                clipped |= _curve(ax, xs, [est[x] for x in xs], f"{fam}, {big:,} images, mean", color=COLORS[fam],
                                  marker=MARKERS[fam])
        ax.axvline(x_match, color="gray", linestyle=":", linewidth=1.2,
                   label=f"matched FLOPs the rule reads ({_short(x_match)}: the ViT's {t_match:,}-step run)")
        _finish_axis(ax, "pre-training compute (FLOPs)", title)
        ax.tick_params(axis="x", labelrotation=30)
    _legend_below(fig, axes)
    _clip_note(fig, clipped)
    return _save(fig, path)


FIGURES = {"fig4": ["fig4_data_size.png", "glyph_samples.png"], "fig5": ["fig5_compute.png"], "hires": ["hires.png"],
           "posemb": ["posemb.png"], "mpp": ["mpp.png"], "pooling": ["pooling.png"], "optim": ["optim.png"],
           "size": ["size.png"], "crossover": ["crossover_data.png", "crossover_compute.png"]}


def figure_files(name: str, res: dict[str, Any]) -> list[str]:
    """The figure files of experiment `name`'s result, as `draw` writes or lists them (SUMMARY.md links these): fig7's
    are `vitkit inspect`'s (named in the result) and FIG7_MEASURES."""
    if name == "fig7":
        return [*(f for f in res.get("figures", []) if f != FIG7_MEASURES), FIG7_MEASURES]
    if name not in FIGURES:
        raise ValueError(f"no figures for experiment {name!r}")
    return list(FIGURES[name])


def draw(name: str, res: dict[str, Any], folder: Path) -> list[str]:
    """Draw experiment `name`'s figures from its result JSON into `folder`; returns their file names
    (`figure_files`). fig7's `vitkit inspect` figures are copied by the run (they need the model) and fig4's glyph
    samples are drawn from the data: both are listed, not redrawn."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = figure_files(name, res)
    if name == "fig4":
        data_size(res, folder / files[0])
    elif name == "fig5":
        compute(res, folder / files[0])
    elif name == "fig7":
        fig7_measures(res, folder / FIG7_MEASURES)
    elif name == "hires":
        hires(res, folder / files[0])
    elif name == "posemb":
        posemb(res, folder / files[0], legacy_seeds(res, "posemb_seeds"))
    elif name == "mpp":
        mpp(res, folder / files[0], legacy_seeds(res, "finetune_seeds"))
    elif name == "pooling":
        variants(res, folder / files[0], "pooling", "gap", "token", "class token vs global average pooling (appendix D.3)")
    elif name == "optim":
        variants(res, folder / files[0], "optim", "adamw", "sgd",
                 "ResNet-B pre-trained with Adam vs SGD with momentum (appendix D.1)")
    elif name == "size":
        model_size(res, folder / files[0])
    elif name == "crossover":
        crossover_data(res, folder / files[0])
        crossover_compute(res, folder / files[1])
    return files
