"""`inspect_model`: the four figures of paper §4.5 (Fig. 6, Fig. 7) plus the numbers behind them.

Attention weights come from `VisionTransformer.intermediates(x, attention=True)`, i.e. the same
Attention modules (and the same forward pass) that produce the model's predictions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vitkit.data.preprocess import load_image
from vitkit.inference.predict import expand_inputs
from vitkit.inspect import figures
from vitkit.inspect.attention import (
    attention_rollout,
    mean_attention_distance,
    output_token_attention,
    patch_distances,
    uniform_attention_distance,
)
from vitkit.inspect.embeddings import embedding_filter_components, position_embedding_similarity
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.vit import VisionTransformer

SKIMAGE_PREFIX = "skimage:"
DEFAULT_PHOTOS = ("chelsea", "astronaut", "coffee", "rocket")
# scikit-image's photos shipped inside its wheel: the only `skimage:` names (other skimage.data functions download
# data sets or are not photos)
SKIMAGE_PHOTOS = ("astronaut", "brick", "camera", "cat", "chelsea", "coffee", "coins", "grass", "gravel", "horse",
                  "hubble_deep_field", "immunohistochemistry", "logo", "microaneurysms", "moon", "page", "retina",
                  "rocket", "text")


@dataclass
class InspectImage:
    """One input: a display name and its pixels (C, H, W) in [0, 1] at the model's input size."""

    name: str
    pixels: torch.Tensor
    label: str | None = None


def model_preprocess(model: VisionTransformer) -> PreprocessConfig:
    """The preprocessing declared on the model (saved with it; the original's [-1, 1] by default)."""
    return model.preprocess


def _to_channels(x: torch.Tensor, c: int) -> torch.Tensor:
    """(C, H, W) -> (c, H, W): RGB to grey by the mean, grey to RGB by repetition."""
    if x.shape[0] == c:
        return x
    if c == 1:
        return x.mean(dim=0, keepdim=True)
    if x.shape[0] == 1:
        return x.expand(c, -1, -1).clone()
    raise ValueError(f"cannot turn a {x.shape[0]}-channel image into {c} channels")


def _skimage_photo(name: str, pre: PreprocessConfig) -> torch.Tensor:
    try:
        import skimage.data
    except ImportError as e:
        raise ValueError("skimage: images need scikit-image (pip install 'vitkit[images]')") from e
    arr = np.asarray(getattr(skimage.data, name)())  # (a name of SKIMAGE_PHOTOS: load_images refuses others)
    if arr.dtype.kind != "u" or arr.ndim not in (2, 3):
        raise ValueError(f"scikit-image sample {name!r} is not an 8-bit photo")
    t = torch.from_numpy(arr.astype(np.float32) / float(np.iinfo(arr.dtype).max))
    t = t[None] if t.ndim == 2 else t[..., :3].permute(2, 0, 1)
    return pre.resize(_to_channels(t, pre.channels)[None])[0]


def load_images(specs: Sequence[str], pre: PreprocessConfig, warn: Callable[[str], None] = print) -> list[InspectImage]:
    """Image files, folders and list files (as `predict` takes them), or `skimage:NAME` for scikit-image's sample
    photos. Unreadable ones are reported through `warn` and skipped; a ValueError if none could be read."""
    out: list[InspectImage] = []
    specs = [x for s in specs for x in ([s] if s.startswith(SKIMAGE_PREFIX) else expand_inputs([s]))]
    unknown = [s for s in specs if s.startswith(SKIMAGE_PREFIX) and s[len(SKIMAGE_PREFIX):] not in SKIMAGE_PHOTOS]
    if unknown:  # a name that is not a bundled photo is a mistake in the command, not an unreadable image
        raise ValueError(f"{unknown[0]} is not one of scikit-image's bundled photos ({', '.join(SKIMAGE_PHOTOS)})")
    for spec in specs:
        try:
            if spec.startswith(SKIMAGE_PREFIX):
                name = spec[len(SKIMAGE_PREFIX) :]
                out.append(InspectImage(name, _skimage_photo(name, pre)))
                continue
            path = Path(spec)
            if not path.is_file():
                raise ValueError(f"no image file at {path}")
            out.append(InspectImage(path.name, _to_channels(load_image(pre, path), pre.channels)))
        except ValueError as e:
            warn(f"skipping {spec}: {e}")
    if not out:
        raise ValueError(f"none of the {len(specs)} images could be read")
    return out


def demo_digit_images(pre: PreprocessConfig, n: int) -> list[InspectImage]:
    """The first `n` images of the demo's fixed digits test split, resized to the model's input."""
    from vitkit.data.digits import LABELS, load_digits_split

    _, test = load_digits_split()
    n = min(n, len(test))
    x = pre.resize(test.images[:n])
    return [
        InspectImage(f"test image #{i}", _to_channels(x[i], pre.channels), LABELS[int(test.labels[i])]) for i in range(n)
    ]


def default_images(model: VisionTransformer, n: int) -> list[InspectImage]:
    """No images given: the demo's test digits for 1-channel models, scikit-image photos otherwise."""
    pre = model_preprocess(model)
    if model.config.in_chans != 1:
        try:
            import skimage.data  # noqa: F401

            return load_images([SKIMAGE_PREFIX + p for p in DEFAULT_PHOTOS[:n]], pre)
        except (ImportError, ValueError):
            pass
    return demo_digit_images(pre, n)


def _rounded(t: torch.Tensor, digits: int = 6) -> Any:
    return np.round(t.detach().to(torch.float64).cpu().numpy(), digits).tolist()


def _write_json(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


@dataclass
class AttentionStats:
    """What one pass over the images yields; N = gh * gw patches, L layers, H heads."""

    grid: tuple[int, int]
    distance: torch.Tensor  # (images, L, H) mean attention distance in pixels
    rollout: torch.Tensor  # (images, N) output-token rollout onto the patches
    last_heads: torch.Tensor  # (images, H, N) raw last-layer output-token attention per head
    probs: torch.Tensor | None  # (images, classes) or None for a model without a classifier


@torch.no_grad()
def collect_attention(
    model: VisionTransformer, images: Sequence[InspectImage], batch_size: int = 16, progress: bool = True
) -> AttentionStats:
    """Run the model on `images` once, keeping the per-layer attention it computes on the way. Refused under token
    merging: attention distance and rollout are maps over every patch of the grid, which merged layers no longer
    have."""
    cfg = model.config
    if model.merging:
        raise ValueError("inspect's attention maps (distance, rollout) need every patch token in every layer: this "
                         "model merges tokens (token merging, set_token_merging); turn merging off with "
                         "set_token_merging(0)")
    pre = model_preprocess(model)
    s, p = cfg.total_stride, cfg.num_prefix_tokens
    x = torch.stack([im.pixels for im in images])
    grid = (x.shape[-2] // s, x.shape[-1] // s)
    dists, rolls, heads, probs = [], [], [], []
    has_head = isinstance(model.head, torch.nn.Linear)
    for i in tqdm(range(0, len(x), batch_size), desc="attention", unit="batch", disable=not progress):
        out = model.intermediates(pre.normalize(x[i : i + batch_size]), attention=True, blocks=False)
        attns = out["attention"]
        dists.append(torch.stack([mean_attention_distance(a, grid, s, p) for a in attns], dim=1))
        rolls.append(output_token_attention(attention_rollout(attns), cfg.pooling, p))
        heads.append(output_token_attention(attns[-1], cfg.pooling, p))
        if has_head:
            probs.append(out["logits"].softmax(dim=-1))
    return AttentionStats(
        grid, torch.cat(dists), torch.cat(rolls), torch.cat(heads), torch.cat(probs) if probs else None
    )


def _prediction(stats: AttentionStats, i: int, labels: list[str]) -> dict[str, Any] | None:
    if stats.probs is None:
        return None
    p, k = stats.probs[i].max(dim=0)
    k = int(k)
    return {"class": k, "label": labels[k] if k < len(labels) else str(k), "prob": round(float(p), 4)}


def inspect_model(
    model: VisionTransformer,
    images: Sequence[InspectImage],
    out_dir: str | Path,
    *,
    name: str = "",
    num_components: int = 28,
    show: int = 6,
    batch_size: int = 16,
    progress: bool = True,
) -> dict[str, Any]:
    """Write the four figures (PNG) and their numbers (JSON) to `out_dir`; returns the summary that is
    also written to `out_dir/inspect.json`. Figures that do not apply to the model (hybrid: filters act
    on ResNet channels; posemb "none") are skipped with a note in the summary."""
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"inspect draws a ViT's embeddings and attention (§4.5); this model is a "
                         f"{type(model).__name__}, which has neither")
    if not images:
        raise ValueError("inspect needs at least one image")
    model.eval()
    cfg = model.config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or cfg.name or "ViT"
    stats = collect_attention(model, images, batch_size, progress)  # Fig. 7 right and Fig. 6: one forward pass
    maps, records = attention_maps_figure(model, stats, images, out, name, show)
    summary: dict[str, Any] = {
        "model": {"name": name, "config": cfg.to_dict(), "grid_size": list(cfg.grid_size),
                  "total_stride": cfg.total_stride},
        "figures": {
            "embedding_filters": embedding_filters_figure(model, out, name, num_components),
            "position_embedding_similarity": position_similarity_figure(model, out, name),
            "attention_distance": attention_distance_figure(stats, len(images), cfg.total_stride, out, name),
            "attention_maps": maps,
        },
        "images": [{"name": r["name"], "label": r["label"], "prediction": r["prediction"]} for r in records],
    }
    _write_json(out / "inspect.json", summary)
    return summary


def embedding_filters_figure(model: VisionTransformer, out: Path, name: str, num_components: int) -> dict[str, Any]:
    """Fig. 7 left: the principal components of the patch-embedding filters E (embedding_filters.png / .json)."""
    if model.patch_embed.backbone is not None:
        return {"skipped": "hybrid model: E acts on ResNet feature channels, not RGB pixels, so its filters are not "
                           "images"}
    w = model.patch_embed.proj.weight
    comps, ratio = embedding_filter_components(w, num_components)
    figures.plot_filter_components(comps, ratio, out / "embedding_filters.png", name)
    _write_json(out / "embedding_filters.json", {
        "filter_shape": list(w.shape),
        "layout": "components[k][channel][row][col]",
        "explained_variance_ratio": _rounded(ratio),
        "components": _rounded(comps),
    })
    return {"png": "embedding_filters.png", "json": "embedding_filters.json",
            "explained_variance_ratio_top": _rounded(ratio[: min(5, len(ratio))], 4)}


def position_similarity_figure(model: VisionTransformer, out: Path, name: str) -> dict[str, Any]:
    """Fig. 7 centre: cosine similarity of the position embeddings (the first layer's table when each layer has
    one) (position_embedding_similarity.png / .json)."""
    cfg = model.config
    pe = model.position_embedding(cfg.grid_size)
    if pe is None:
        return {"skipped": "relative position embeddings act inside the attention, per offset, not per patch"
                if cfg.posemb == "relative" else "the model has no position embeddings (posemb 'none')"}
    sim = position_embedding_similarity(pe[0, cfg.num_class_tokens :], cfg.grid_size)
    figures.plot_position_similarity(sim, out / "position_embedding_similarity.png", name)
    _write_json(out / "position_embedding_similarity.json", {
        "posemb": cfg.posemb,
        "grid": list(cfg.grid_size),
        "layout": "similarity[row][col][other_row][other_col]",
        "similarity": _rounded(sim, 5),
    })
    return {"png": "position_embedding_similarity.png", "json": "position_embedding_similarity.json"}


def attention_distance_figure(stats: AttentionStats, n_images: int, stride: int, out: Path,
                              name: str) -> dict[str, Any]:
    """Fig. 7 right: mean attention distance per layer and head, over the images (attention_distance.png / .json)."""
    uniform = uniform_attention_distance(stats.grid, stride)
    max_dist = float(patch_distances(stats.grid, stride).max())
    mean_d, std_d = stats.distance.mean(dim=0), stats.distance.std(dim=0, unbiased=False)
    figures.plot_attention_distance(mean_d, out / "attention_distance.png", name, uniform, max_dist, n_images)
    _write_json(out / "attention_distance.json", {
        "definition": "per image, layer and head: mean over query patches of the attention-weighted pixel "
        "distance to key patches (patch centres ((i+0.5)s, (j+0.5)s); prefix tokens excluded, "
        "patch attention renormalised); then mean/std over images",
        "stride_pixels": stride,
        "grid": list(stats.grid),
        "num_images": n_images,
        "uniform_attention_reference": round(uniform, 6),
        "max_possible": round(max_dist, 6),
        "mean": _rounded(mean_d),
        "std": _rounded(std_d),
    })
    return {"png": "attention_distance.png", "json": "attention_distance.json",
            "mean_over_heads_per_layer": _rounded(mean_d.mean(dim=1), 3),
            "uniform_attention_reference": round(uniform, 3)}


def attention_maps_figure(model: VisionTransformer, stats: AttentionStats, images: Sequence[InspectImage], out: Path,
                          name: str, show: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Fig. 6: attention rollout and the last layer's heads from the output token, for the first `show` images
    (attention_maps.png; every image in attention_maps.json); returns the figure's entry and the per-image records."""
    labels = list(model_preprocess(model).labels)
    gh, gw = stats.grid
    records = [{"name": im.name, "label": im.label, "prediction": _prediction(stats, i, labels),
                "rollout": _rounded(stats.rollout[i].reshape(gh, gw)),
                "last_layer_heads": _rounded(stats.last_heads[i].reshape(-1, gh, gw))} for i, im in enumerate(images)]
    n_show = max(1, min(show, len(images)))
    titles = []
    for r in records[:n_show]:
        t = r["name"] + (f"\nlabel: {r['label']}" if r["label"] is not None else "")
        if r["prediction"] is not None:
            t += f", predicted: {r['prediction']['label']} ({100 * r['prediction']['prob']:.0f}%)"
        titles.append(t)
    cfg = model.config
    query = {"token": "class token", "gap": "mean over all tokens (GAP)",
             "map": "mean over all tokens (standing in for the MAP head's probe)"}[cfg.pooling]
    tokens = "the class token" if cfg.num_class_tokens == 1 else "the class and distillation tokens"
    left = [w for w, n in ((tokens, cfg.num_class_tokens), (f"{cfg.num_registers} registers", cfg.num_registers)) if n]
    columns = f"the {gh}x{gw} patches" + (f" ({' and '.join(left)} left out)" if left else "")
    rmax = [figures.robust_vmax(stats.rollout[i]) for i in range(n_show)]
    hmax = [figures.robust_vmax(stats.last_heads[i]) for i in range(n_show)]
    figures.plot_attention_maps([im.pixels for im in images[:n_show]], titles,
                                stats.rollout[:n_show].reshape(n_show, gh, gw),
                                stats.last_heads[:n_show].reshape(n_show, -1, gh, gw),
                                out / "attention_maps.png", name, query, layer=cfg.depth, columns=columns)
    for r, (rv, rc), (hv, hc) in zip(records, rmax, hmax):
        r["colour_scale"] = {"rollout_top": round(rv, 6), "rollout_clipped": rc, "heads_top": round(hv, 6),
                             "heads_clipped": hc}
    _write_json(out / "attention_maps.json", {
        "query": query,
        "columns": columns,
        "heads_layer": cfg.depth,
        "colour_scale": f"each map's max; values above {figures.OUTLIER_RATIO:g}x the map's "
        f"{figures.ROBUST_PERCENTILE:g}th percentile are clipped (marked x) and the scale tops at the others' max",
        "grid": [gh, gw],
        "rollout": "heads averaged, identity added for the residual path, rows renormalised, layers "
        "multiplied (Abnar & Zuidema 2020); output-token row, patch columns",
        "images": records,
    })
    return {"png": "attention_maps.png", "json": "attention_maps.json", "shown": n_show}, records
