"""Matplotlib figures for `vitkit inspect` (paper Fig. 6 and Fig. 7).

Uses the object-oriented API with the Agg canvas only (`matplotlib.figure.Figure`), so importing this
module never touches pyplot's global backend or state and works without a display.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _frame_only(ax) -> None:  # noqa: ANN001
    """An image panel: its frame (the spines) and nothing of its x / y axes. Hiding the two Axis artists draws the
    same pixels as empty tick lists, but the layout and the draw then skip their tick and label bookkeeping."""
    ax.xaxis.set_visible(False)
    ax.yaxis.set_visible(False)


def _colorbar(fig: Figure, mappable, **kw):  # noqa: ANN001, ANN003, ANN202
    """`fig.colorbar` with its short axis (no ticks: matplotlib empties them) hidden, as `_frame_only` does."""
    cb = fig.colorbar(mappable, **kw)
    (cb.ax.xaxis if cb.orientation == "vertical" else cb.ax.yaxis).set_visible(False)
    return cb


def _image_hwc(img: torch.Tensor) -> np.ndarray:
    """(C, H, W) in [0, 1] -> an array imshow can draw: (H, W) for one channel, (H, W, 3) for RGB."""
    a = img.detach().float().clamp(0, 1).cpu().numpy()
    if a.shape[0] == 3:
        return a.transpose(1, 2, 0)
    return a.mean(axis=0)


def plot_filter_components(comps: torch.Tensor, ratio: torch.Tensor, path: Path, model_name: str) -> Path:
    """Fig. 7 left: principal components of the patch-embedding filters as image tiles.

    RGB filters are shown in colour, each tile min-max scaled (as in the paper); other channel
    counts show the mean over channels with a diverging colour map, scaled to max |value| = 1.
    """
    k, c = comps.shape[0], comps.shape[1]
    cols = min(7, k)
    rows = -(-k // cols)
    width = max(6.5, 1.3 * cols + (1.2 if c != 3 else 0.2))
    fig = Figure(figsize=(width, 1.45 * rows + 1.1), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).reshape(-1)
    im = None
    for i, ax in enumerate(axes):
        _frame_only(ax)
        if i >= k:
            ax.set_axis_off()
            continue
        t = comps[i].detach().float().cpu().numpy()
        if c == 3:
            t = t.transpose(1, 2, 0)
            t = (t - t.min()) / max(float(t.max() - t.min()), 1e-12)
            ax.imshow(t, interpolation="nearest")
        else:
            t = t.mean(axis=0)
            t = t / max(float(np.abs(t).max()), 1e-12)
            im = ax.imshow(t, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(f"PC {i + 1} ({100 * float(ratio[i]):.1f}%)", fontsize=8)
    p = comps.shape[-1]
    note = "RGB, each tile min-max scaled" if c == 3 else f"{c}-channel filters, mean over channels"
    fig.suptitle(
        f"Patch-embedding filters E: top {k} principal components — {model_name}\n"
        f"{p}x{p} patches, {note}; (%) = share of filter variance",
        fontsize=9,
    )
    if im is not None:
        _colorbar(fig, im, ax=axes.tolist(), shrink=0.8, label="weight (max |w| = 1 per tile)")
    return _save(fig, path)


def plot_position_similarity(sim: torch.Tensor, path: Path, model_name: str) -> Path:
    """Fig. 7 centre: tile (i, j) shows cos(E_pos[i, j], E_pos[k, l]) over all patches (k, l).

    Tiles are laid out as one mosaic with a one-pixel gap so large grids (e.g. 24x24) stay fast.
    """
    gh, gw = sim.shape[:2]
    s = sim.detach().float().cpu().numpy()
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan, dtype=np.float32)
    for i in range(gh):
        for j in range(gw):
            mosaic[i * (gh + 1) : i * (gh + 1) + gh, j * (gw + 1) : j * (gw + 1) + gw] = s[i, j]
    side = min(9.0, 2.5 + 0.45 * max(gh, gw))
    fig = Figure(figsize=(side + 1.2, side), layout="constrained")
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    im = ax.imshow(mosaic, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
    step = max(1, max(gh, gw) // 12)
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(0, gh, step)], [str(i + 1) for i in range(0, gh, step)])
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(0, gw, step)], [str(j + 1) for j in range(0, gw, step)])
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(f"Position embedding similarity — {model_name}\n({gh}x{gw} patch grid; each tile: one patch vs all)")
    _colorbar(fig, im, ax=ax, shrink=0.8, label="Cosine similarity")
    return _save(fig, path)


def plot_attention_distance(
    dist: torch.Tensor, path: Path, model_name: str, uniform: float, max_distance: float, num_images: int
) -> Path:
    """Fig. 7 right: one dot per (layer, head), the mean attention distance across images."""
    layers, heads = dist.shape
    d = dist.detach().float().cpu().numpy()
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.subplots()
    x = np.repeat(np.arange(1, layers + 1), heads)
    c = np.tile(np.arange(1, heads + 1), layers)
    sc = ax.scatter(x, d.reshape(-1), c=c, cmap="viridis", s=28, edgecolors="black", linewidths=0.4, zorder=3)
    ax.axhline(uniform, color="grey", ls="--", lw=1, label=f"uniform attention ({uniform:.1f} px)")
    ax.set_xlim(0.5, layers + 0.5)
    ax.set_ylim(0, max_distance)
    ax.set_xticks(range(1, layers + 1))
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_title(f"Mean attention distance per head — {model_name}\n(averaged over {num_images} images)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    cb = _colorbar(fig, sc, ax=ax, label="Head")
    if heads <= 16:
        cb.set_ticks(range(1, heads + 1))
    return _save(fig, path)


def _upsample(m: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    t = m.detach().float()[None, None]
    return F.interpolate(t, size=size, mode="bilinear", align_corners=False)[0, 0].clamp_min(0).cpu().numpy()


# A map where a few tokens take most of the weight (DINOv2's high-norm tokens, Darcet et al. 2024, draw most of the
# class token's attention) is drawn nearly blank on a max-scaled colour map. Tokens above OUTLIER_RATIO times the
# map's ROBUST_PERCENTILE-th percentile are such outliers: the scale then tops at the largest other value, and they
# are marked.
ROBUST_PERCENTILE = 98.0
OUTLIER_RATIO = 3.0


def robust_vmax(a: np.ndarray | torch.Tensor) -> tuple[float, int]:
    """(the colour scale's top, how many values lie above it): the map's max, or, when some values exceed
    OUTLIER_RATIO times its ROBUST_PERCENTILE-th percentile, the largest of the others."""
    v = np.asarray(a.detach().float().cpu() if isinstance(a, torch.Tensor) else a, dtype=np.float64).ravel()
    if not v.size:
        return 1e-12, 0
    out = v > OUTLIER_RATIO * float(np.percentile(v, ROBUST_PERCENTILE))
    if out.any() and not out.all() and float(v[~out].max()) > 0:
        return float(v[~out].max()), int(out.sum())
    return max(float(v.max()), 1e-12), 0


def _mark(ax, a: np.ndarray, vmax: float, scale: tuple[float, float] = (1.0, 1.0)) -> None:  # noqa: ANN001
    """Cyan crosses on the grid cells of `a` above `vmax` (clipped by the robust scale)."""
    ys, xs = np.nonzero(a > vmax)
    if len(ys):
        ax.scatter((xs + 0.5) * scale[1] - 0.5, (ys + 0.5) * scale[0] - 0.5, marker="x", c="cyan", s=14, linewidths=1)


def plot_attention_maps(
    images: list[torch.Tensor],
    titles: list[str],
    rollout: torch.Tensor,
    heads: torch.Tensor,
    path: Path,
    model_name: str,
    query: str,
    layer: int | None = None,
    columns: str = "the patches",
) -> Path:
    """Fig. 6: per image, the input, the input times the rollout mask (the paper's look), the rollout
    as a heat-map overlay, and the raw last-layer output-token attention of every head.

    `rollout` is (n, gh, gw), `heads` (n, H, gh, gw). Each image's rollout, and its heads together, are drawn on a
    robust scale (`robust_vmax`): the max, or a high percentile when a few tokens dominate, those marked with
    crosses. `layer` (1-based) and `columns` (which tokens the maps show) are written on the figure."""
    n, nh = heads.shape[0], heads.shape[1]
    cols = 3 + nh
    fig = Figure(figsize=(1.55 * cols + 1.6, 1.75 * n + 1.1), layout="constrained")
    axes = fig.subplots(n, cols, squeeze=False)
    clipped_any = False
    for r in range(n):
        img = _image_hwc(images[r])
        size = img.shape[:2]
        roll = rollout[r].detach().float().cpu().numpy()
        rmax, rclip = robust_vmax(roll)
        mask = np.clip(_upsample(rollout[r], size) / rmax, 0, 1)
        gray = img.ndim == 2
        cmap_img = "gray" if gray else None
        axes[r, 0].imshow(img, cmap=cmap_img, vmin=0, vmax=1, interpolation="nearest")
        masked = img * mask if gray else img * mask[..., None]
        axes[r, 1].imshow(masked, cmap=cmap_img, vmin=0, vmax=1, interpolation="nearest")
        axes[r, 2].imshow(img, cmap=cmap_img, vmin=0, vmax=1, interpolation="nearest")
        im = axes[r, 2].imshow(mask, cmap="inferno", alpha=0.6, vmin=0, vmax=1)
        _mark(axes[r, 2], roll, rmax, (size[0] / roll.shape[0], size[1] / roll.shape[1]))
        # colour bar labels short enough for one row's height (a long one ran into the next row's); what was
        # clipped is said under the image's title
        cb = _colorbar(fig, im, ax=axes[r, 2], shrink=0.9, location="left", extend="max" if rclip else "neither")
        cb.set_label("rollout / max", fontsize=7)
        hm = heads[r].detach().float().cpu().numpy()
        hmax, hclip = robust_vmax(hm)
        clipped_any |= bool(rclip or hclip)
        clipped = [f"{k} {what}" for k, what in ((rclip, "rollout"), (hclip, "head-map")) if k]
        axes[r, 0].set_title(titles[r] + (f"\nclipped: {', '.join(clipped)} token(s)" if clipped else ""), fontsize=7)
        him = None
        for h in range(nh):
            him = axes[r, 3 + h].imshow(hm[h], cmap="inferno", vmin=0, vmax=hmax, interpolation="nearest")
            _mark(axes[r, 3 + h], hm[h], hmax)
        if him is not None:
            cb = _colorbar(fig, him, ax=axes[r, 3:].tolist(), shrink=0.9, extend="max" if hclip else "neither")
            cb.set_label("attention weight", fontsize=7)
        if r == 0:
            axes[r, 1].set_title("input × rollout", fontsize=8)
            axes[r, 2].set_title("rollout overlay", fontsize=8)
            where = f"layer {layer}" if layer is not None else "last layer"
            for h in range(nh):
                axes[r, 3 + h].set_title(f"{where}\nhead {h + 1}", fontsize=8)
        for ax in axes[r]:
            _frame_only(ax)
    scale = (f"; tokens above {OUTLIER_RATIO:g}x a map's {ROBUST_PERCENTILE:g}th percentile marked x and clipped "
             "(the scale tops at the rest's max)" if clipped_any else "; colour scales: each map's max")
    fig.suptitle(
        f"Attention from the output token to the input — {model_name}\n"
        f"rollout through all layers (heads averaged, + identity for residuals); query: {query}\n"
        f"columns: {columns}{scale}",
        fontsize=9,
    )
    return _save(fig, path)
