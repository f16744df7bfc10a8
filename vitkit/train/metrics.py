"""A run's metrics.jsonl (one JSON record per line, appended by the engine) and its loss / accuracy curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitkit.utils.atomic import atomic_path
from vitkit.utils.files import read_regular_file

MAX_METRICS_BYTES = 1 << 30  # a run's log: ~100 bytes a logged step


def metric_lines(path: str | Path) -> list[tuple[int, str, dict[str, Any] | None]]:
    """(line number, text, record) of each non-blank line of a metrics.jsonl; the record is None for a
    torn line (a kill in the middle of an append)."""
    out: list[tuple[int, str, dict[str, Any] | None]] = []
    text = read_regular_file(path, MAX_METRICS_BYTES, "metrics log").decode(errors="replace")  # never a FIFO's wait
    for n, ln in enumerate(text.splitlines(), 1):
        if ln.strip():
            try:
                out.append((n, ln, json.loads(ln)))
            except ValueError:
                out.append((n, ln, None))
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The JSONL metrics of a run as a list of records (a torn line from a kill mid-write is left out)."""
    return [rec for _, _, rec in metric_lines(path) if rec is not None]


def curve_series(recs: list[dict[str, Any]]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """The lines of curves.png, by panel ("loss", "accuracy") and label: training, the periodic evaluation,
    and each final evaluation split on its own (a final test point is never joined to dev points)."""
    tr = [r for r in recs if "loss" in r]
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {
        "loss": {"train loss": ([r["step"] for r in tr], [r["loss"] for r in tr])},
        "accuracy": {"train (the batches trained on)": ([r["step"] for r in tr], [100 * r["train_acc"] for r in tr])},
    }
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if "eval_top1" in r:
            groups.setdefault(f"{r['split']} (final)" if "split" in r else "eval (during training)", []).append(r)
    for label, rs in groups.items():
        out["loss"][label] = ([r["step"] for r in rs], [r["eval_loss"] for r in rs])
        out["accuracy"][label] = ([r["step"] for r in rs], [100 * r["eval_top1"] for r in rs])
    return out


def plot_curves(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path:
    """Loss and accuracy curves of a run as a PNG (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = curve_series(read_metrics(metrics_path))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (panel, lines) in zip(axes, series.items()):
        for label, (x, y) in lines.items():
            if label.startswith("train"):
                ax.plot(x, y, label=label)
            elif label.endswith("(final)"):
                ax.plot(x, y, linestyle="none", marker="*", markersize=11, label=label)
            else:
                ax.plot(x, y, marker="o", label=label)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy" if panel == "loss" else "accuracy (%)")
        ax.set_title(panel)
        ax.legend()
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png = Path(png_path)
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return png
