"""The figures of `vitkit reproduce` (PNG via matplotlib), one function per experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = {"ViT": "o", "ResNet": "s", "Hybrid": "^"}
COLORS = {"ViT": "tab:blue", "ResNet": "tab:orange", "Hybrid": "tab:green"}


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _log_x_accuracy(ax: Any, xlabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def data_size(rows: list[dict[str, Any]], shots: int, path: Path,
              untrained: dict[str, dict[str, float]] | None = None) -> str:
    """Fig. 3/4: transfer accuracy against the number of pre-training images, one line per family (dotted:
    the family's untrained network, where the panel has a figure for it)."""
    panels = [("finetune_top1", "fine-tuned digits accuracy (Fig. 3)"),
              (f"digits_test_{shots}shot", f"{shots}-shot linear, digits (Fig. 4)"),
              (f"lfw_test_{shots}shot", f"{shots}-shot linear, lfw faces"),
              ("glyph_test_top1", "pre-training task: glyph test accuracy")]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for ax, (key, title) in zip(axes, panels):
        for fam in MARKERS:
            pts = sorted((r["images"], r[key], r.get(f"{key}_std", 0.0)) for r in rows if r["family"] == fam)
            if not pts:
                continue
            x, y, e = zip(*pts)
            ax.errorbar(x, [100 * v for v in y], yerr=[100 * v for v in e], marker=MARKERS[fam], color=COLORS[fam],
                        label=fam, capsize=3)
            if untrained and key in untrained.get(fam, {}):
                ax.axhline(100 * untrained[fam][key], color=COLORS[fam], linestyle=":", linewidth=1)
        _log_x_accuracy(ax, "pre-training images", title)
    axes[0].legend()
    if untrained:
        axes[1].text(0.02, 0.02, "dotted: untrained network", transform=axes[1].transAxes, fontsize=8)
    return _save(fig, path)


def compute(rows: list[dict[str, Any]], shots: int, path: Path) -> str:
    """Fig. 5: transfer accuracy against pre-training compute, one marker shape per family."""
    panels = [("finetune_top1", "fine-tuned digits accuracy"), (f"avg_{shots}shot", f"{shots}-shot linear, mean of "
                                                                                    "digits and lfw")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, title) in zip(axes, panels):
        for fam in MARKERS:
            pts = sorted((r["train_flops"], r[key], r["size"]) for r in rows if r["family"] == fam)
            if not pts:
                continue
            x, y, sizes = zip(*pts)
            ax.plot(x, [100 * v for v in y], marker=MARKERS[fam], color=COLORS[fam], label=fam, markersize=8)
            for xi, yi, s in zip(x, y, sizes):
                ax.annotate(s, (xi, 100 * yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        _log_x_accuracy(ax, "pre-training compute (FLOPs)", title)
    axes[0].legend()
    return _save(fig, path)


def bars(groups: dict[str, tuple[float, float]], title: str, ylabel: str, path: Path,
         baselines: dict[str, tuple[float, float]] | None = None) -> str:
    """Mean +- std bars (accuracies in [0, 1], drawn in %), with optional horizontal reference bands."""
    fig, ax = plt.subplots(figsize=(1.4 * len(groups) + 2.5, 3.8))
    names = list(groups)
    ax.bar(names, [100 * groups[n][0] for n in names], yerr=[100 * groups[n][1] for n in names], capsize=4,
           color="tab:blue", alpha=0.8)
    for i, n in enumerate(names):
        ax.annotate(f"{100 * groups[n][0]:.1f}", (i, 100 * groups[n][0]), ha="center", va="bottom",
                    textcoords="offset points", xytext=(0, 3), fontsize=8)
    for (label, (m, s)), color in zip((baselines or {}).items(), ("tab:red", "tab:green", "tab:gray")):
        ax.axhline(100 * m, color=color, linestyle="--", label=f"{label}: {100 * m:.1f} +- {100 * s:.1f}")
        ax.axhspan(100 * (m - s), 100 * (m + s), color=color, alpha=0.12)
    if baselines:
        ax.legend(fontsize=8, loc="lower right")
    lo = min([groups[n][0] - groups[n][1] for n in names] + [m - s for m, s in (baselines or {}).values()])
    ax.set_ylim(max(0.0, 100 * lo - 10), 100)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    return _save(fig, path)


def samples(images: Any, labels: Any, classes: int, per_class: int, path: Path, title: str) -> str:
    """A grid of images (N, 1, H, W uint8): `per_class` examples (rows) of the first `classes` classes (columns)."""
    fig, axes = plt.subplots(per_class, classes, figsize=(classes * 0.9, per_class * 0.9 + 0.4))
    for c in range(classes):
        idx = [i for i, y in enumerate(labels) if y == c][:per_class]
        for r in range(per_class):
            ax = axes[r, c]
            ax.axis("off")
            if r < len(idx):
                ax.imshow(images[idx[r], 0], cmap="gray", vmin=0, vmax=255)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


CROSSOVER_METRICS = {"glyph_test_top1": "pre-training task: glyph test", "digits_test_5shot": "5-shot linear, digits",
                     "avg_5shot": "5-shot linear, mean of digits and lfw"}


def crossover_data(res: dict[str, Any], schedules: Any, path: Path) -> str:
    """Experiment 7: accuracy against pre-training images, one line per family and schedule length (darker:
    longer), mean +- std over seeds; a crossing of the two families at a schedule is marked by a dotted line."""
    fig, axes = plt.subplots(1, len(CROSSOVER_METRICS), figsize=(5.2 * len(CROSSOVER_METRICS), 4.2))
    shades = np.linspace(0.35, 1.0, len(schedules))
    for ax, (m, title) in zip(axes, CROSSOVER_METRICS.items()):
        for t, a in zip(schedules, shades):
            for fam in ("ViT", "ResNet"):
                c = res["curves"].get(f"{fam}/{t}/{m}")
                if c is None:
                    continue
                ax.errorbar(c["images"], [100 * v for v in c["mean"]], yerr=[100 * v for v in c["std"]], color=COLORS[fam],
                            alpha=float(a), marker=MARKERS[fam], capsize=3, label=f"{fam}, {t:,} steps")
            x = res["by_data"][f"{t}/{m}"]["crossing"]
            if x is not None:
                ax.axvline(x, color="k", linestyle=":", alpha=float(a), linewidth=1)
        _log_x_accuracy(ax, "pre-training images", title)
    axes[0].legend(fontsize=7)
    axes[-1].text(0.02, 0.02, "dotted vertical: ViT overtakes ResNet", transform=axes[-1].transAxes, fontsize=7)
    return _save(fig, path)


def crossover_compute(res: dict[str, Any], path: Path) -> str:
    """Experiment 7: accuracy against pre-training FLOPs; dots: every run (all data sizes and seeds), lines: each
    family's frontier (best over data sizes, mean over seeds) at each schedule length."""
    fig, axes = plt.subplots(1, len(CROSSOVER_METRICS), figsize=(5.2 * len(CROSSOVER_METRICS), 4.2))
    for ax, (m, title) in zip(axes, CROSSOVER_METRICS.items()):
        for fam in ("ViT", "ResNet"):
            pts = [(r["train_flops"], r[m]) for r in res["rows"] if r["family"] == fam and m in r]
            if pts:
                ax.scatter([p[0] for p in pts], [100 * p[1] for p in pts], color=COLORS[fam], marker=MARKERS[fam],
                           alpha=0.25, s=14)
            f = res["frontier"].get(f"{fam}/{m}")
            if f is not None:
                ax.errorbar(f["flops"], [100 * v for v in f["mean"]], yerr=[100 * v for v in f["std"]],
                            color=COLORS[fam], marker=MARKERS[fam], capsize=3, label=f"{fam}: best over data sizes")
        x = res["by_compute"][m]["crossing"]
        if x is not None:
            ax.axvline(x, color="k", linestyle=":", linewidth=1)
        _log_x_accuracy(ax, "pre-training compute (FLOPs)", title)
    axes[0].legend(fontsize=7)
    return _save(fig, path)
