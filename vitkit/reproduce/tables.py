"""The markdown tables of experiments 3 (fig7) and 6 (MPP), written from their result JSON alone.

A run calls these to write its result's `markdown`; SUMMARY.md (summary.py) calls them again on the committed JSON,
so a wording fixed here reaches every summary on the next `vitkit reproduce --redraw` without re-training.
"""

from __future__ import annotations

from typing import Any

from vitkit.reproduce.plan import IMG_SIZE, SCALES
from vitkit.reproduce.stats import mean_ci, paired, sweep_text

FIG7_IMAGES = 64  # glyph test images the inspection measures are taken on (experiments._fig7_model)


def scratch_steps(res: dict[str, Any]) -> int:
    """The fine-tuning steps of the usual from-scratch run of an MPP result: kept in the JSON by runs from
    2026-11-25 on, else the result's scale's `finetune_steps`."""
    if "scratch_steps" in res:
        return int(res["scratch_steps"])
    scale = res.get("scale")
    if scale not in SCALES:
        raise ValueError(f"an MPP result of scale {scale!r} keeps no scratch_steps: the from-scratch run's length is "
                         "unknown")
    return SCALES[scale].finetune_steps


def _pct(m: float) -> str:
    return f"{100 * m:.1f}"


def ci_text(a: dict[str, Any], b: dict[str, Any] | None = None) -> str:
    """A seeded entry as 'mean [95% CI] (n=..)' in %, or a - b paired by seed in points."""
    return mean_ci(a["values"]).text() if b is None else paired(a["values"], b["values"]).text(signed=True)


def _value(v: Any) -> str:
    """A figure kept as one number (files before 2026-11-26) or per seed (its mean [95% CI])."""
    return ci_text(v) if isinstance(v, dict) else _pct(v)


def mpp_markdown(res: dict[str, Any]) -> str | None:
    """§4.6's table: fine-tuned accuracy per initialisation, mean [95% CI] over seeds, differences paired by seed
    (files from 2026-11-26 on: MPP and supervised pre-training seed i fine-tuned with seed i, MPP at the rate picked
    on dev; earlier files: one pre-training run per arm, fine-tuning seeds only). None for a result file that kept
    [mean, std] pairs, not the seeds (its own table says so)."""
    scratch, supervised = res["scratch"], res["supervised"]
    if not isinstance(scratch, dict):
        return None
    if res.get("scale") not in SCALES:
        raise ValueError(f"an MPP result of scale {res.get('scale')!r}: its shots and schedule are unknown")
    scale = SCALES[res["scale"]]
    k, sup_steps = scale.select_shots, scale.steps  # the supervised model: experiment 6's Pretrain("ViT", "B")
    seeds = "seeds (pre-training seed i fine-tuned with seed i)" if "seeds" in res else "fine-tuning seeds"
    lines = [f"| initialisation | digits test accuracy after fine-tuning (mean [95% CI] over {seeds}) | "
             "vs scratch (points) | from scratch with the same total compute | vs that (points) | masked-colour "
             f"test accuracy (majority colour: {_pct(res['majority_colour'])}) | {k}-shot digits of the frozen "
             "features |", "|---|---:|---:|---:|---:|---:|---:|",
             f"| from scratch ({scratch_steps(res)} steps) | {ci_text(scratch)} | | | | | |"]
    rate = f" (lr {res['mpp_lr']:g})" if "mpp_lr" in res else ""
    for n in sorted(res["mpp"], key=int):
        v, eq = res["mpp"][n], res["equal_budget_scratch"][n]
        lines.append(f"| MPP, {n} steps on glyphs{rate} | {ci_text(v)} | {ci_text(v, scratch)} | {ci_text(eq['top1'])} "
                     f"({eq['steps']} steps) | {ci_text(v, eq['top1'])} | {_value(res['masked_colour_test'][n])} | "
                     f"{_value(res['fewshot'][f'mpp_{n}'])} |")
    lines.append(f"| supervised on glyphs, {sup_steps} steps | {ci_text(supervised)} | {ci_text(supervised, scratch)} | | | | "
                 f"{_value(res['fewshot']['supervised'])} |")
    lines.append(f"\nmean [95% CI] over {seeds}; differences paired by seed (points)")
    if "mpp_lr_sweep" in res:
        lines.append(f"\nMPP's pre-training rate, picked at {max(map(int, res['mpp']))} steps by the digits dev "
                     "accuracy after fine-tuning (MPP seed 0, fine-tuning seed 0): " + sweep_text(
                         res["mpp_lr_sweep"], bold=True) + f"; picked {res['mpp_lr']:.3g}")
    return "\n".join(lines)


def fig7_seeds(res: dict[str, Any]) -> int:
    """How many pre-training seeds a fig7 result measured (`per_seed`; a file before 2026-11-25: one)."""
    return len(res.get("per_seed") or [res])


def fig7_markdown(res: dict[str, Any]) -> str:
    """Fig. 7's measures of the seed-0 model (its figures are that model's too); the verdict reads every seed."""
    gh, gw = res["grid"]
    ad, (near, far) = res["attention_distance_per_layer"], res["first_layer_head_range"]
    ratio = res["embedding_filter_variance_top5"]
    n = fig7_seeds(res)
    seeds = (f"this table and the three figures are pre-training seed 0's model; the verdict reads all {n} seeds' "
             "measures (`per_seed` in the JSON)" if n > 1 else "one pre-training seed")
    return "\n".join([
        f"Model: {res['model']} ({gh}x{gw} patch grid, patch {IMG_SIZE // gh} px), {FIG7_IMAGES} glyph test images; "
        f"{seeds}.", "",
        "| measure | value |", "|---|---:|",
        f"| position embeddings: mean cosine similarity, same row/column minus other patches | "
        f"{res['posemb_same_row_or_column_minus_other']:+.3f} |",
        f"| position embeddings: correlation of similarity with closeness | "
        f"{res['posemb_similarity_vs_closeness_correlation']:+.3f} |",
        "| mean attention distance per layer (px) | " + ", ".join(f"{v:.2f}" for v in ad) + " |",
        f"| first layer: nearest / farthest-looking head (px) | {near:.2f} / {far:.2f} |",
        f"| uniform attention / largest possible distance (px) | {res['uniform_attention_distance']:.2f} / "
        f"{res['max_distance']:.2f} |",
        f"| embedding filters: variance explained by the first {len(ratio)} components | "
        + ", ".join(f"{v:.3f}" for v in ratio) + " |",
    ])
