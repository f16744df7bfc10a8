"""The figures of `vitkit reproduce` (PNG via matplotlib), drawn from each experiment's result JSON alone.

`draw(name, result, folder)` is what a run calls after writing its result.json, and what `vitkit reproduce
--redraw` calls on committed JSON: a figure never holds a number its JSON does not. Honesty rules for every
figure: bar charts start at zero; a line plot whose accuracy axis does not start at zero says so in its axis
label; error bars are drawn only where there are seeds (95% t-interval over pre-training or fine-tuning seeds,
stats.py), and the legend or title says what they are; a curve of one seed has no error bars and says so; an
accuracy interval that passes 100% is drawn clipped at 100 and the figure says so (the JSON keeps the raw interval);
value labels sit beyond the error bar's end, never on it; a legend covers no data (below the axes, outside them);
points that share an x are dodged sideways, and the axis label says by how much.
"""

from __future__ import annotations

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


def _yerr(ests: Sequence[Estimate], cap: float | None = 1.0) -> tuple[list[list[float]], bool]:
    """The 95% t-intervals of accuracy estimates as matplotlib's [[below], [above]] in points, each upper end
    clipped at `cap` (100%; None: differences, not clipped); and whether any was clipped."""
    hi = [e.hi if cap is None else min(e.hi, cap) for e in ests]
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


def _paired_gaps(ax: Any, rows: Sequence[dict[str, Any]], series: dict[str, tuple[dict[str, Any], dict[str, Any]]],
                 metric: str, title: str, colors: Sequence[Any] = ("k", "tab:purple", "tab:brown", "tab:gray")) -> None:
    """A paired-difference panel: for each series (label -> (A's row filter, B's row filter)) A − B in points at each
    data size, paired by seed, with its 95% t-interval (what the rules read; the families' own intervals overlap where
    the paired gap is clear), dodged sideways per series, and a line at zero."""
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
        xs, ests = [n * shift for n, _ in pts], [e for _, e in pts]
        if all(e.n >= 2 for e in ests):
            ax.errorbar(xs, [100 * e.mean for e in ests], yerr=_yerr(ests, cap=None)[0], capsize=3, marker="o",
                        color=color, label=f"{label} (paired by seed, 95% CI)")
        else:
            ax.plot(xs, [100 * e.mean for e in ests], marker="o", color=color, label=f"{label} (1 seed, no interval)")
    ax.axhline(0, color="gray", linewidth=1)
    _finish_axis(ax, "pre-training images" + ("\n(series dodged sideways; ticks: true sizes)" if k > 1 else ""), title,
                 ylabel="difference (points)", data_x=sorted(true_x))


# -- experiments 1 and 2: data size and compute ------------------------------------------------------------

def data_size(res: dict[str, Any], path: Path) -> str:
    """Fig. 3/4: transfer accuracy against the number of pre-training images, one line per family (dotted:
    the family's untrained network, where the panel has a figure for it)."""
    rows, untrained = res["rows"], res.get("untrained") or {}
    panels = [("finetune_top1", "fine-tuned digits accuracy (Fig. 3)"), ("digits_test_5shot", "5-shot linear, digits (Fig. 4)"),
              ("lfw_test_5shot", "5-shot linear, lfw faces"), ("glyph_test_top1", "pre-training task: glyph test accuracy")]
    fig, axes = plt.subplots(1, 5, figsize=(21, 4.6))
    clipped, dotted = False, False
    _paired_gaps(axes[4], rows, {"ViT − ResNet": ({"family": "ViT"}, {"family": "ResNet"})}, "digits_test_5shot",
                 "ViT − ResNet, 5-shot digits\n(the rule's differences)")
    for ax, (key, title) in zip(axes, panels):
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


def compute(res: dict[str, Any], path: Path) -> str:
    """Fig. 5: transfer accuracy against pre-training compute, one line per family over its sizes (S, B, L),
    hybrids included."""
    rows = res["rows"]
    panels = [("finetune_top1", "fine-tuned digits accuracy"), ("avg_5shot", "5-shot linear, mean of digits and lfw")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    clipped = False
    # the FLOPs the rule reads, where every family it compares has runs (a smoke run may lack one)
    read = fig5_points(rows) if {"ViT", "ResNet", "Hybrid"} <= {r["family"] for r in rows} else None
    # size labels beside each point, each family on its own side, so that points at one FLOPs value (ResNet-B and
    # Hybrid-S) keep legible labels
    offsets = {"ViT": (-12, 6), "ResNet": (5, -12), "Hybrid": (5, 6)}
    for ax, (key, title) in zip(axes, panels):
        for fam in MARKERS:
            fam_rows = [r for r in rows if r["family"] == fam]
            est = _seed_groups(fam_rows, lambda r: r["size"], key)
            if not est:
                continue
            flops = {r["size"]: r["train_flops"] for r in fam_rows}
            sizes = sorted(est, key=lambda s: flops[s])
            clipped |= _curve(ax, [flops[s] for s in sizes], [est[s] for s in sizes], fam, marker=MARKERS[fam],
                              color=COLORS[fam], markersize=8)
            for s in sizes:
                ax.annotate(f"{fam[0]}-{s}", (flops[s], 100 * est[s].mean), textcoords="offset points",
                            xytext=offsets[fam], fontsize=7, color=COLORS[fam])
        if key == "avg_5shot" and read:  # the FLOPs the rule reads (rules.fig5_points) on the panel of its metric
            ax.axvline(read["mid"], color="gray", linestyle=":", linewidth=1.2,
                       label=f"read by the rule: ViT vs ResNet at {_short(read['mid'])}")
            for x, what, style in ((read["lo_h"], "smallest", "--"), (read["hi_h"], "largest", "-.")):
                ax.axvline(x, color="tab:green", linestyle=style, linewidth=0.9, alpha=0.7,
                           label=f"read by the rule: hybrid vs ViT at the {what} shared FLOPs ({_short(x)})")
        _finish_axis(ax, "pre-training compute (FLOPs)", title)
    _legend_below(fig, axes)
    _clip_note(fig, clipped)
    return _save(fig, path)


# -- bars: experiments 4, 5, 6 ---------------------------------------------------------------------------

def bars(categories: Sequence[str], series: dict[str, Sequence[Estimate | None]], title: str, ylabel: str, path: Path,
         baselines: dict[str, Estimate] | None = None, differences: dict[str, Estimate] | None = None,
         difference_title: str = "", bands: dict[str, float] | None = None) -> str:
    """Grouped bars from zero (accuracies in [0, 1], drawn in %): one group per category, one bar per series, the
    95% t-interval as error bar (clipped at 100%) and each seed as a dot where known, the mean written beyond the
    interval's end in a white box; optional horizontal reference lines (with their interval as a band) and a second
    panel of differences (points, 95% interval, a line at zero; `bands`: a difference's equivalence margin, in
    accuracy units, drawn as a band behind it)."""
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
    if differences:
        d = axs[1]
        names = list(differences)
        banded = False
        for i, n in enumerate(names):
            e = differences[n]
            if n in (bands or {}):
                m = 100 * bands[n]
                d.fill_between([i - 0.35, i + 0.35], -m, m, color="tab:green", alpha=0.18, linewidth=0,
                               label=None if banded else f"±{m:g}-point equivalence band (the rule's)")
                banded = True
            if e.n >= 2 and not np.isnan(e.lo):
                d.errorbar(i, 100 * e.mean, yerr=_yerr([e], cap=None)[0], fmt="o", color="k", capsize=4)
            else:
                d.plot(i, 100 * e.mean, "o", color="k")
            if e.p is not None:
                d.annotate(f"p={e.p:.2g}", (i, 100 * e.mean), textcoords="offset points", xytext=(6, 0), fontsize=8,
                           bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
        d.axhline(0, color="gray", linewidth=1)
        d.set_xticks(range(len(names)), names, fontsize=8)
        d.set_xlim(-0.6, len(names) - 0.4)
        d.set_ylabel("difference (points)")
        d.set_title(difference_title or "difference, 95% interval", fontsize=9)
        d.grid(alpha=0.3, axis="y")
        if banded:
            _legend_under(d, lines)
    _clip_note(fig, clipped)
    return _save(fig, path)


def rule_differences(name: str, res: dict[str, Any], labels: dict[str, str] | None = None
                     ) -> tuple[dict[str, Estimate], dict[str, float]]:
    """The differences experiment `name`'s rule tests (rules.EVIDENCE, paired by seed where the JSON keeps seeds),
    keyed by `labels[part]` (default: the part's own words), and the equivalence margin of each part that has one."""
    rule, parts = RULES[name], EVIDENCE[name](res).parts
    label = {p.key: (labels or {}).get(p.key, p.what) for p in rule.parts}
    return ({label[p.key]: parts[p.key] for p in rule.parts},
            {label[p.key]: p.margin for p in rule.parts if p.kind == "equivalent"})


def _pseudo_note(name: str, res: dict[str, Any]) -> str:
    """A title line for a result whose seeds are fine-tuning seeds of one pre-trained model (rules.INDEPENDENT not
    met): its error bars are not intervals over independent replicates, and its verdict is not established."""
    met = EVIDENCE[name](res).checks.get(INDEPENDENT, (True, ""))[0]
    return "" if met is not False else ("\nNOT ESTABLISHED: seeds are fine-tuning seeds of one pre-trained model;"
                                        "\nthe bars are not intervals over independent replicates")


def hires(res: dict[str, Any], path: Path) -> str:
    """§3.2: fine-tuned accuracy at the pre-training resolution and at 2x, and their paired difference."""
    r = res["results"]
    est = {k: mean_ci(v["accs"]) for k, v in r.items()}
    return bars(list(est), {"digits test accuracy": list(est.values())},
                "fine-tuning at the pre-training resolution vs 2x (E_pos resampled, §3.2)" + _pseudo_note("hires", res),
                "digits test accuracy (%)",
                path, differences={"32 px − 16 px": paired(r["32px"]["accs"], r["16px"]["accs"])},
                difference_title="paired by seed (see the rule)")


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
    compute; from scratch (the usual steps) and supervised pre-training as reference lines."""
    lengths = sorted(res["mpp"], key=int)
    return bars([f"{int(n):,} MPP steps" for n in lengths],
                {"MPP, then fine-tuning": [stored(res["mpp"][n], seeds) for n in lengths],
                 "from scratch, same total compute": [stored(res["equal_budget_scratch"][n]["top1"], seeds)
                                                      for n in lengths]},
                "masked patch prediction (§4.6), then fine-tuning on digits" + _pseudo_note("mpp", res),
                "digits test accuracy (%)", path,
                baselines={f"from scratch, the usual {scratch_steps(res)} steps": stored(res["scratch"], seeds),
                           "supervised pre-training": stored(res["supervised"], seeds)})


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
    a − b paired by pre-training seed (appendix D.3's pooling, appendix D.1's optimisers); where `experiment`'s rule
    tests an equivalence (on 5-shot digits), its band behind that difference."""
    r = res["results"]
    metrics = {"digits_test_5shot": "5-shot digits", "glyph_test_top1": "glyph test (upstream)"}
    margins = [p.margin for p in RULES[experiment].parts if p.kind == "equivalent"]
    return bars([f"{p} (lr {res['lr'][p]:g})" for p in r], {name: [mean_ci(r[p][m]["values"]) for p in r]
                                                            for m, name in metrics.items()}, title, "accuracy (%)",
                path, differences={f"{a} − {b},\n{name}": paired(r[a][m]["values"], r[b][m]["values"])
                                   for m, name in metrics.items()}, difference_title="paired by pre-training seed",
                bands={f"{a} − {b},\n5-shot digits": margins[0]} if margins else None)


def model_size(res: dict[str, Any], path: Path) -> str:
    """Fig. 3 (§4.2): 5-shot digits and glyph test against pre-training images, one line per family and size
    (S: dashed, hollow markers; B: solid, filled)."""
    rows = res["rows"]
    panels = [("digits_test_5shot", "5-shot linear, digits"), ("glyph_test_top1", "pre-training task: glyph test")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    clipped = False
    _paired_gaps(axes[2], rows, {f"{fam}-B − {fam}-S": ({"family": fam, "size": "B"}, {"family": fam, "size": "S"})
                                 for fam in ("ViT", "ResNet")}, "digits_test_5shot",
                 "B − S, 5-shot digits, paired by seed\n(the rule reads the ViTs')", colors=(COLORS["ViT"], COLORS["ResNet"]))
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
    over data sizes); a dotted line at the matched-FLOPs point the rule reads (rules.matched_flops_point)."""
    rows = crossover_rows(res)
    big = max(r["images"] for r in rows)
    sizes = sorted({r["images"] for r in rows})
    t_match, x_match = matched_flops_point(rows)
    fig, axes = plt.subplots(1, len(CROSSOVER_METRICS), figsize=(5.4 * len(CROSSOVER_METRICS), 5.2))
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


def draw(name: str, res: dict[str, Any], folder: Path) -> list[str]:
    """Draw experiment `name`'s figures from its result JSON into `folder`; returns their file names. fig7's figures are
    `vitkit inspect`'s own (copied by the run), and fig4's glyph samples are drawn from the data: both are listed,
    not redrawn."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if name == "fig4":
        return [data_size(res, folder / "fig4_data_size.png"), "glyph_samples.png"]
    if name == "fig5":
        return [compute(res, folder / "fig5_compute.png")]
    if name == "hires":
        return [hires(res, folder / "hires.png")]
    if name == "posemb":
        return [posemb(res, folder / "posemb.png", legacy_seeds(res, "posemb_seeds"))]
    if name == "mpp":
        return [mpp(res, folder / "mpp.png", legacy_seeds(res, "finetune_seeds"))]
    if name == "pooling":
        return [variants(res, folder / "pooling.png", "pooling", "gap", "token",
                         "class token vs global average pooling (appendix D.3)")]
    if name == "optim":
        return [variants(res, folder / "optim.png", "optim", "adamw", "sgd",
                         "ResNet-B pre-trained with Adam vs SGD with momentum (appendix D.1)")]
    if name == "size":
        return [model_size(res, folder / "size.png")]
    if name == "crossover":
        return [crossover_data(res, folder / "crossover_data.png"), crossover_compute(res, folder / "crossover_compute.png")]
    if name == "fig7":
        return list(res["figures"])
    raise ValueError(f"no figures for experiment {name!r}")
