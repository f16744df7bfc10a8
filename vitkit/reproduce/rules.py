"""Rules before runs: each experiment's claim as testable inequalities, and the verdict computed from them.

A `Rule` is fixed before results are read: the paper's claim split into parts, each an inequality on one
difference (method A minus method B on a named metric, at a named point), the metric, the selection rule and the
test. `evidence` turns an experiment's result JSON into one seeded `Estimate` per part (paired by seed where the
JSON keeps seeds) and checks the rule's preconditions (e.g. a learning-rate grid bracketed on both sides); `judge`
applies the rule and nothing else:

- a part *holds* when its 95% t-interval lies wholly on the claimed side (beyond the margin, for "greater"/
  "less"; wholly inside (-margin, +margin) for "equivalent"); it *fails* when the interval lies wholly on the
  other side; otherwise it is *inconclusive*; with fewer than `stats.MIN_SEEDS` seeds it is *not established*;
- the experiment *reproduces* when every part holds; *partly* when some but not all hold; *does not reproduce*
  when none holds and at least one fails; *inconclusive* when none holds or fails and one is inconclusive;
  otherwise *not established* (fewer seeds than the rule needs). A failed precondition caps the verdict at
  *not established* whatever the parts say. The judgement counts its parts by outcome, and its `label` says the
  counts ("partly reproduces: 1 of 3 held, 2 failed" is not "2 of 3 held, 1 failed").

A part added after the results were read (`Part.added`) is judged like the others and flagged as such; `flags`
names what makes a decided part fragile (an interval that clears its boundary with p near 0.05; a part read
below the data regime where the paper itself sees the effect; a pick resting on an exact dev tie).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vitkit.reproduce.plan import SCALES
from vitkit.reproduce.stats import MIN_SEEDS, Estimate, best_rates, bracketed, paired, stored, sweep_text, welch
from vitkit.reproduce.tables import scratch_steps

KINDS = ("greater", "less", "equivalent")
# the preconditions' names (rules list them; the evidence functions check them)
LR_BRACKETED = "lr grids bracketed"  # every pre-training rate sweep a verdict rests on
FT_BRACKETED = "fine-tuning lr grids bracketed"  # every fine-tune's rate sweep
MPP_RATE = "MPP's rate bracketed where swept"
INDEPENDENT = "independent pre-training seeds"  # fine-tuning seeds of one pre-trained model are not replicates
FRAGILE_P = 0.03  # a decided part with a p-value at or above this (and below 0.05) is flagged "p ≈ 0.05"
# the smallest pre-training set at which the paper sees the ViT pass the ResNet: ViT-B/32 against ResNet50 cross
# between JFT's 30M and 90M subsets (Fig. 4); on ImageNet (1.3M) and ImageNet-21k (14M) the BiT ResNets lead (Fig. 3)
VIT_WINS_IMAGES = 30_000_000
# the smallest set at which the paper sees the larger ViT ahead: on ImageNet ViT-L/16 is below ViT-B/16, on
# ImageNet-21k (14M) they are about even, on JFT-300M the larger one wins (Fig. 3)
LARGER_VIT_WINS_IMAGES = 14_000_000


@dataclass(frozen=True)
class Part:
    """One inequality of a claim: the difference `what` (A minus B, in accuracy units) is > margin ("greater"),
    < -margin ("less") or inside (-margin, margin) ("equivalent")."""

    key: str
    what: str
    kind: str
    margin: float = 0.0
    unit: str = "points"  # "points": accuracies (in [0, 1]) shown x100; any other unit is shown as is
    added: str = ""  # non-empty: added after the results were read (when and why); judged, and flagged post hoc
    regime_images: int = 0  # the smallest pre-training set at which the paper itself sees this effect (0: any)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"rule part {self.key!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "equivalent" and self.margin <= 0:
            raise ValueError(f"rule part {self.key!r}: an equivalence needs a margin > 0")

    @property
    def scale(self) -> float:
        return 100.0 if self.unit == "points" else 1.0

    def inequality(self) -> str:
        m = f"{self.scale * self.margin:g} {self.unit}".strip()
        return {"greater": f"> {m}" if self.margin else "> 0", "less": f"< −{m}" if self.margin else "< 0",
                "equivalent": f"within ±{m}"}[self.kind]


@dataclass(frozen=True)
class Rule:
    experiment: str
    claim: str  # the paper's claim, in words
    parts: tuple[Part, ...]
    metric: str
    selection: str  # how every reported number was chosen (dev split only; fixed points named in advance)
    test: str  # the statistics
    preconditions: tuple[str, ...] = ()  # names `evidence` checks (a failed one caps the verdict)


@dataclass
class Evidence:
    parts: dict[str, Estimate]
    # precondition -> (met, why); met None: not checkable from a result file written before the check existed
    # (its verdict stays what it was, and the summary says "not checked")
    checks: dict[str, tuple[bool | None, str]] = field(default_factory=dict)
    context: list[str] = field(default_factory=list)  # numbers reported beside the verdict, not part of it
    images: dict[str, int] = field(default_factory=dict)  # part -> the pre-training set size it is read at
    ties: list[str] = field(default_factory=list)  # picks resting on an exact dev tie between rates (`tied_sweeps`)
    extra: dict[str, Estimate] = field(default_factory=dict)  # comparisons reported beside the verdict, not judged


def outcome(part: Part, est: Estimate) -> str:
    """holds / fails / inconclusive / not established (n seeds) for one part, from its 95% interval."""
    if est.n < MIN_SEEDS or math.isnan(est.lo):
        return f"not established ({est.n} seed{'s' if est.n != 1 else ''})"
    m = part.margin
    if part.kind == "greater":
        return "holds" if est.lo > m else "fails" if est.hi < m else "inconclusive"
    if part.kind == "less":
        return "holds" if est.hi < -m else "fails" if est.lo > -m else "inconclusive"
    return "holds" if -m < est.lo and est.hi < m else "fails" if est.lo > m or est.hi < -m else "inconclusive"


OUTCOMES = ("held", "failed", "inconclusive", "not established")  # the counts' keys, in the label's order


def _count_key(outcome_text: str) -> str:
    return {"holds": "held", "fails": "failed", "inconclusive": "inconclusive"}.get(outcome_text, "not established")


@dataclass
class Judgement:
    verdict: str
    outcomes: dict[str, str]
    failed_checks: list[str]

    @property
    def counts(self) -> dict[str, int]:
        """How many parts held, failed, were inconclusive or not established."""
        keys = [_count_key(o) for o in self.outcomes.values()]
        return {k: keys.count(k) for k in OUTCOMES}

    @property
    def label(self) -> str:
        """The verdict with its counts: 'partly reproduces: 1 of 3 held, 2 failed'."""
        c = self.counts
        rest = [f"{c[k]} {k}" for k in OUTCOMES[1:] if c[k]]
        counts = f"{c['held']} of {len(self.outcomes)} held" + "".join(f", {r}" for r in rest)
        return f"{self.verdict}; its parts read {counts}" if self.failed_checks else f"{self.verdict}: {counts}"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "label": self.label, "counts": self.counts, "outcomes": self.outcomes,
                "failed_checks": self.failed_checks}


def judge(rule: Rule, ev: Evidence) -> Judgement:
    """The verdict the rule gives on the evidence (see the module docstring)."""
    missing = [p.key for p in rule.parts if p.key not in ev.parts]
    if missing:
        raise ValueError(f"{rule.experiment}: no evidence for rule part(s) {missing}")
    outs = {p.key: outcome(p, ev.parts[p.key]) for p in rule.parts}
    failed = [c for c in rule.preconditions if ev.checks.get(c, (False, "not checked"))[0] is False]
    held = sum(o == "holds" for o in outs.values())  # Judgement.counts keeps every outcome's count
    if failed:
        verdict = "not established (precondition not met: " + ", ".join(failed) + ")"
    elif held == len(outs):
        verdict = "reproduces"
    elif held:
        verdict = "partly reproduces"
    elif any(o == "fails" for o in outs.values()):
        verdict = "does not reproduce"
    elif any(o == "inconclusive" for o in outs.values()):
        verdict = "inconclusive"
    else:
        verdict = f"not established (fewer than {MIN_SEEDS} seeds)"
    return Judgement(verdict, outs, failed)


def registered(rule: Rule) -> Rule:
    """The rule as fixed before the results: its parts without those added after the results were read."""
    return Rule(rule.experiment, rule.claim, tuple(p for p in rule.parts if not p.added), rule.metric, rule.selection,
                rule.test, rule.preconditions)


def flags(rule: Rule, ev: Evidence, j: Judgement) -> dict[str, list[str]]:
    """What a reader should weigh beside each part's outcome: "post hoc" (added after the results were read),
    "p = …" (decided, holds or fails, with `FRAGILE_P` <= p: one more seed could undo it), "out of regime" (read at
    fewer pre-training images than the paper itself needs to see the effect), "tie-driven" (the rates it rests on
    were picked on an exact dev tie, `Evidence.ties`)."""
    out: dict[str, list[str]] = {}
    for p in rule.parts:
        e, f = ev.parts[p.key], []
        if p.added:
            f.append("post hoc")
        if j.outcomes[p.key] in ("holds", "fails") and p.kind != "equivalent" and e.p is not None and e.p >= FRAGILE_P:
            f.append(f"p = {e.p:.2g}")
        if p.regime_images and p.key in ev.images and ev.images[p.key] < p.regime_images:
            f.append(f"out of regime ({ev.images[p.key]:,} images; the paper: ≥ {p.regime_images / 1e6:g}M)")
        if ev.ties:
            f.append("tie-driven")
        out[p.key] = f
    return out


def tied_sweeps(res: dict[str, Any]) -> list[str]:
    """The pre-training rate sweeps of a result (each model's, MPP's) whose best dev accuracy is reached by more than
    one rate: the pick (the smaller, `stats.pick_rate`) rests on an exact tie."""
    sweeps = dict(res.get("lr_sweeps") or {})
    if "mpp_lr_sweep" in res:
        sweeps["MPP"] = res["mpp_lr_sweep"]
    return [f"{key}: {', '.join(f'{lr:.3g}' for lr in sorted(best_rates(sw)))} tie at "
            f"{100 * max(r['dev'] for r in sw):.2f} dev" for key, sw in sweeps.items() if len(best_rates(sw)) > 1]


# -- reading the evidence out of each experiment's result JSON ----------------------------------------------

def _by_seed(rows: list[dict[str, Any]], metric: str, **match: Any) -> dict[int, float]:
    return {int(r.get("seed", 0)): r[metric] for r in rows if all(r.get(k) == v for k, v in match.items())}


def paired_by_seed(a: dict[int, float], b: dict[int, float]) -> Estimate:
    """a - b over the seeds both sides have (seed i against seed i)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no seed in common between the two sides of a comparison")
    return paired([a[s] for s in seeds], [b[s] for s in seeds])


def at_flops(points: list[tuple[float, float]], x: float) -> float | None:
    """A curve of (FLOPs, value) read at x, linearly in log10 FLOPs between its measured points; None outside them
    (never extrapolated)."""
    pts = sorted(points)
    if not pts or not pts[0][0] <= x <= pts[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * math.log10(x / x0) / math.log10(x1 / x0)
    return pts[0][1]


def matched_flops_gap(rows: list[dict[str, Any]], a: str, b: str, metric: str, x: float,
                      **match: Any) -> Estimate | None:
    """Family a minus family b at x training FLOPs, each read off its own curve (interpolated in log FLOPs, per
    seed, over the rows matching `match`), paired by seed; None where x is outside either curve."""
    def curve(fam: str, seed: int) -> list[tuple[float, float]]:
        return [(r["train_flops"], r[metric]) for r in rows
                if r["family"] == fam and int(r.get("seed", 0)) == seed and all(r.get(k) == v for k, v in match.items())]

    seeds = sorted({int(r.get("seed", 0)) for r in rows})
    va, vb = {}, {}
    for s in seeds:
        ya, yb = at_flops(curve(a, s), x), at_flops(curve(b, s), x)
        if ya is not None and yb is not None:
            va[s], vb[s] = ya, yb
    return paired_by_seed(va, vb) if va else None


def _gaps(rows: list[dict[str, Any]], metric: str, **match: Any) -> dict[int, float]:
    """ViT − ResNet seed by seed over the rows matching `match`."""
    a, b = (_by_seed(rows, metric, family=f, **match) for f in ("ViT", "ResNet"))
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def _narrows(rows: list[dict[str, Any]], metric: str, small: int, big: int, **match: Any) -> Estimate:
    """(ViT − ResNet) at `big` images minus at `small`, paired by seed: how much the gap closes with data."""
    return paired_by_seed(_gaps(rows, metric, images=big, **match), _gaps(rows, metric, images=small, **match))


def _fig4(res: dict[str, Any]) -> Evidence:
    rows, m = res["rows"], "digits_test_5shot"
    sizes = sorted({r["images"] for r in rows})
    gap = {n: paired_by_seed(_by_seed(rows, m, family="ViT", images=n), _by_seed(rows, m, family="ResNet", images=n))
           for n in sizes}
    ctx = ["ViT − ResNet, 5-shot digits: " + "; ".join(f"{n:,} images {g.text(signed=True)}" for n, g in gap.items())]
    ratio = flops_ratio(rows, "B")
    if ratio is not None:
        ctx.append(f"matched steps only: ViT-B spends {ratio:.2f}× ResNet-B's training FLOPs")
    parts = {"small": gap[sizes[0]], "large": gap[sizes[-1]], "narrows": _narrows(rows, m, sizes[0], sizes[-1])}
    return Evidence(parts, _lr_checks(res.get("lr_sweeps")), ctx,
                    images={"small": sizes[0], "large": sizes[-1], "narrows": sizes[-1]}, ties=tied_sweeps(res))


def flops_ratio(rows: list[dict[str, Any]], size: str) -> float | None:
    """The ViT's training FLOPs over the ResNet's at the same schedule, both of `size` (None: the rows keep no
    FLOPs)."""
    def flops(fam: str) -> list[float]:
        return [r["train_flops"] for r in rows if (r["family"], r.get("size")) == (fam, size) and "train_flops" in r]

    vit, resnet = flops("ViT"), flops("ResNet")
    return max(vit) / max(resnet) if vit and resnet else None


def fig5_points(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The training FLOPs experiment 2's rule reads: "mid", the middle (in log FLOPs) of the range ViT and ResNet
    both cover ("lo", "hi" its ends); "lo_h" and "hi_h", the smallest and largest FLOPs ViT and hybrid both cover."""
    span = {f: [r["train_flops"] for r in rows if r["family"] == f] for f in ("ViT", "ResNet", "Hybrid")}
    lo, hi = max(min(span["ViT"]), min(span["ResNet"])), min(max(span["ViT"]), max(span["ResNet"]))
    return {"mid": math.sqrt(lo * hi), "lo": lo, "hi": hi, "lo_h": max(min(span["ViT"]), min(span["Hybrid"])),
            "hi_h": min(max(span["ViT"]), max(span["Hybrid"]))}


def _fig5(res: dict[str, Any]) -> Evidence:
    rows, m = res["rows"], "avg_5shot"
    at = fig5_points(rows)
    lo, hi, mid, lo_h, hi_h = at["lo"], at["hi"], at["mid"], at["lo_h"], at["hi_h"]
    small_h, large_h = (matched_flops_gap(rows, "Hybrid", "ViT", m, x) for x in (lo_h, hi_h))
    parts = {"vit_vs_resnet": matched_flops_gap(rows, "ViT", "ResNet", m, mid), "hybrid_vs_vit_small": small_h}
    if small_h is not None and large_h is not None and len(small_h.values) == len(large_h.values) > 0:
        parts["hybrid_gap_closes"] = paired(small_h.values, large_h.values)  # the same seeds, in order
    ctx = [f"matched compute: ViT vs ResNet at {mid:.3g} FLOPs (middle of the range both cover, {lo:.3g}–{hi:.3g}); "
           f"hybrid vs ViT at {lo_h:.3g} FLOPs and {hi_h:.3g} FLOPs (the smallest and largest both cover)"]
    if large_h is not None:
        ctx.append(f"hybrid − ViT at {hi_h:.3g} FLOPs: {large_h.text(signed=True)}")
    whole = max((r.get("images", 0) for r in rows), default=0)
    return Evidence({k: v for k, v in parts.items() if v is not None}, _lr_checks(res.get("lr_sweeps")), ctx,
                    images={k: whole for k in parts} if whole else {}, ties=tied_sweeps(res))


def _size(res: dict[str, Any]) -> Evidence:
    rows, m = res["rows"], "digits_test_5shot"
    sizes = sorted({r["images"] for r in rows})
    small, big = sizes[0], sizes[-1]

    def at(f: str, s: str, n: int) -> dict[int, float]:
        return _by_seed(rows, m, family=f, size=s, images=n)

    def gain(f: str, s: str) -> dict[int, float]:
        a, b = at(f, s, big), at(f, s, small)
        return {seed: a[seed] - b[seed] for seed in a if seed in b}

    parts = {"vit_gain": paired_by_seed(gain("ViT", "B"), gain("ViT", "S")),
             "vit_large": paired_by_seed(at("ViT", "B", big), at("ViT", "S", big))}
    ctx = [f"ResNet-B's gain from data minus ResNet-S's: {paired_by_seed(gain('ResNet', 'B'), gain('ResNet', 'S')).text(signed=True)}",
           f"ViT-B − ViT-S at {small:,} images: {paired_by_seed(at('ViT', 'B', small), at('ViT', 'S', small)).text(signed=True)}",
           f"ResNet-B − ResNet-S at {small:,} / {big:,} images: "
           f"{paired_by_seed(at('ResNet', 'B', small), at('ResNet', 'S', small)).text(signed=True)} / "
           f"{paired_by_seed(at('ResNet', 'B', big), at('ResNet', 'S', big)).text(signed=True)}"]
    ratio = flops_ratio(rows, "B")
    if ratio is not None:
        ctx.append(f"matched steps only: ViT-B spends {ratio:.2f}× ResNet-B's training FLOPs")
    return Evidence(parts, _lr_checks(res.get("lr_sweeps")), ctx, images={k: big for k in parts},
                    ties=tied_sweeps(res))


def _optim(res: dict[str, Any]) -> Evidence:
    r, m = res["results"], "digits_test_5shot"
    gap = paired_by_seed(dict(enumerate(r["adamw"][m]["values"])), dict(enumerate(r["sgd"][m]["values"])))
    up = paired_by_seed(dict(enumerate(r["adamw"]["glyph_test_top1"]["values"])),
                        dict(enumerate(r["sgd"]["glyph_test_top1"]["values"])))
    return Evidence({"adam_better": gap}, _lr_checks(res["lr_sweeps"]),
                    [f"upstream (glyph test), not part of the verdict: Adam − SGD {up.text(signed=True)}"],
                    ties=tied_sweeps(res))


def _fig7(res: dict[str, Any]) -> Evidence:
    models = res.get("per_seed") or [res]  # a seeded run keeps one entry per pre-training seed

    def against_zero(values: list[float]) -> Estimate:  # mean, 95% interval and the one-sample t-test's p
        return paired(values, [0.0] * len(values))

    rowcol = against_zero([r["posemb_same_row_or_column_minus_other"] for r in models])
    slope = against_zero([r["attention_distance_slope_per_layer"] for r in models])
    wide = against_zero([(r["first_layer_head_range"][1] - r["uniform_attention_distance"]) / r["max_distance"]
                         for r in models])  # farthest first-layer head beyond uniform attention, as a share
    return Evidence({"grid": rowcol, "depth": slope, "global_heads": wide}, _lr_checks(res.get("lr_sweeps")),
                    ties=tied_sweeps(res))


def _hires(res: dict[str, Any]) -> Evidence:
    r = res["results"]
    ft = None if "finetune_sweeps" not in r["16px"] else [sw for px in ("16px", "32px") for sw in r[px]["finetune_sweeps"]]
    seeded = "values" in r["16px"]  # from 2026-11-25: pre-training seed i fine-tuned with seed i
    independent = (True, "pre-training seed i fine-tuned with seed i") if seeded else (
        False, "one pre-trained model: its fine-tuning seeds are not independent replicates (pseudo-replication)")
    return Evidence({"gain": paired(r["32px"]["accs"], r["16px"]["accs"])},
                    {**_lr_checks(res.get("lr_sweeps")), **_finetune_checks(ft), INDEPENDENT: independent},
                    ties=tied_sweeps(res),
                    context=["per-seed accuracies (16 px; 32 px): " + "; ".join(
                        ", ".join(f"{100 * a:.1f}" for a in r[px]["accs"]) for px in ("16px", "32px"))])


# Result files written before per-seed values were kept (the full-scale runs of 2026-11-23/24) hold [mean,
# population std] pairs; the seeds they averaged were the full scale's of that time (2 posemb pre-training seeds,
# 3 fine-tuning seeds), the smoke scale's for a smoke run.
LEGACY_SEEDS = {"full": {"posemb_seeds": 2, "finetune_seeds": 3}}


def legacy_seeds(res: dict[str, Any], attr: str) -> int:
    """How many seeds a legacy [mean, std] entry of `res` averaged (`attr`: "posemb_seeds" or "finetune_seeds")."""
    scale = res.get("scale")
    if scale in LEGACY_SEEDS:
        return LEGACY_SEEDS[scale][attr]
    if scale in SCALES:
        return len(getattr(SCALES[scale], attr))
    raise ValueError(f"a result of scale {scale!r} keeps [mean, std] pairs: how many seeds they average is unknown")


def _diff(res_a: Any, res_b: Any, n: int) -> Estimate:
    """a - b: paired by seed where both entries keep their seeds, else Welch on the summaries."""
    if isinstance(res_a, dict) and isinstance(res_b, dict):
        return paired_by_seed(dict(enumerate(res_a["values"])), dict(enumerate(res_b["values"])))
    return welch(stored(res_a, n), stored(res_b, n))


def _posemb(res: dict[str, Any]) -> Evidence:
    r, n, m = res["results"], legacy_seeds(res, "posemb_seeds"), "digits_test_5shot"
    parts = {"none_worse": _diff(r["none"][m], r["learn1d"][m], n),
             "2d_same": _diff(r["learn2d"][m], r["learn1d"][m], n),
             "relative_same": _diff(r["relative"][m], r["learn1d"][m], n)}
    ctx = [] if isinstance(r["none"][m], dict) else [
        f"the result file kept mean and population std over {n} seeds, not the seeds: differences are unpaired (Welch)"]
    return Evidence(parts, _lr_checks(res.get("lr_sweeps")), ctx, ties=tied_sweeps(res))


def _mpp(res: dict[str, Any]) -> Evidence:
    """MPP (longest) against scratch given the same compute and against supervised pre-training, paired by seed: by
    the seeds the file names (seed i of every arm: pre-training seed i fine-tuned with seed i), else by fine-tuning
    seed (files before 2026-11-26: one pre-training run per arm), else Welch on [mean, std] pairs."""
    n = legacy_seeds(res, "finetune_seeds")
    seeds = res.get("seeds")

    def diff(a: Any, b: Any) -> Estimate:
        if seeds is not None:
            return paired_by_seed(dict(zip(seeds, a["values"])), dict(zip(seeds, b["values"])))
        return _diff(a, b, n)

    longest = max(res["mpp"], key=int)
    parts = {"beats_scratch": diff(res["mpp"][longest], res["equal_budget_scratch"][longest]["top1"]),
             "behind_supervised": diff(res["mpp"][longest], res["supervised"])}
    usual = diff(res["mpp"][longest], res["scratch"])
    ctx = [f"MPP {longest} steps; from scratch with the same total compute: "
           f"{res['equal_budget_scratch'][longest]['steps']} fine-tuning steps",
           f"against the usual {scratch_steps(res)}-step scratch run (a fraction of the compute; not part of the "
           f"verdict): {usual.text(signed=True)}"]
    if seeds is not None:
        ctx.append(f"paired by seed {seeds}: {res.get('pairing', 'seed i of every arm')}")
    else:
        ctx.append("one MPP and one supervised pre-training run (seed 0); seeds at fine-tuning only")
    if not isinstance(res["scratch"], dict):
        ctx.append(f"the result file kept mean and population std over {n} fine-tuning seeds: differences are "
                   "unpaired (Welch)")
    if "mpp_lr_sweep" in res:
        sweep = res["mpp_lr_sweep"]
        ok: bool | None = bracketed(sweep)
        why = ("MPP pre-training rate (digits dev after fine-tuning, seed 0): "
               + sweep_text(sweep) + f"; picked {res['mpp_lr']:.3g}")
    else:  # the file's runs used the supervised ViT-B's rate for MPP: nothing was swept, so nothing to check
        ok, why = None, "not checked: no sweep in this file (files before 2026-11-26 ran MPP at the supervised rate)"
    independent = (True, "MPP and supervised pre-training seed i fine-tuned with seed i") if seeds is not None else (
        False, "one MPP and one supervised pre-training run: fine-tuning seeds are not independent replicates "
        "(pseudo-replication)")
    return Evidence(parts, {**_finetune_checks(res.get("finetune_sweeps")), MPP_RATE: (ok, why),
                            INDEPENDENT: independent}, ctx, ties=tied_sweeps(res), extra={"usual_scratch": usual})


def crossover_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run's row of a crossover result; a legacy file keeps the seed check's runs only as per-seed gaps."""
    return list(res["rows"]) + list(res.get("check_rows", []))


def matched_flops_point(rows: list[dict[str, Any]]) -> tuple[int, float]:
    """The crossover's matched-FLOPs point (named in advance): the ViT's longest schedule at the largest data size
    whose training FLOPs lie inside the ResNet's range there; (its steps, its FLOPs)."""
    big = max(r["images"] for r in rows)
    vit_flops = sorted({(r["steps"], r["train_flops"]) for r in rows if r["family"] == "ViT" and r["images"] == big})
    res_span = [r["train_flops"] for r in rows if r["family"] == "ResNet" and r["images"] == big]
    inside = [(t, x) for t, x in vit_flops if min(res_span) <= x <= max(res_span)]
    if not inside:
        raise ValueError(f"no ViT run at {big:,} images lies inside the ResNet's FLOPs range there "
                         f"({min(res_span):.3g}-{max(res_span):.3g})")
    return inside[-1]


def _crossover(res: dict[str, Any]) -> Evidence:
    rows, m = crossover_rows(res), "digits_test_5shot"
    sizes = sorted({r["images"] for r in rows})
    big, small = sizes[-1], sizes[0]

    def gap_at(steps: int, n: int, metric: str = m) -> Estimate:
        a, b = (_by_seed(rows, metric, family=f, steps=steps, images=n) for f in ("ViT", "ResNet"))
        for c in res.get("seed_check", []):  # legacy: the extra seeds survive only as gaps
            if (c["steps"], c["images"], c["metric"]) == (steps, n, metric) and "check_rows" not in res:
                return paired(c["gaps"], [0.0] * len(c["gaps"]))
        return paired_by_seed(a, b)

    longest_at = {n: max(r["steps"] for r in rows if r["images"] == n) for n in (small, big)}
    t_match, x_match = matched_flops_point(rows)
    shared = max(t for t in {r["steps"] for r in rows} if {small, big} <= {r["images"] for r in rows if r["steps"] == t})
    parts = {"small_data": gap_at(longest_at[small], small), "large_data_steps": gap_at(longest_at[big], big),
             "large_data_flops": matched_flops_gap(rows, "ViT", "ResNet", m, x_match, images=big),
             "narrows": _narrows(rows, m, small, big, steps=shared)}
    checks = _lr_checks(res.get("lr_sweeps", {}), [f"{int(t):,} steps: not tuned (took the {u:,}-step picks)"
                                                    for t, u in res.get("lr_from", {}).items()])
    ctx = [f"matched FLOPs: the ViT's {t_match:,}-step run at {big:,} images ({x_match:.3g} FLOPs) against the "
           "ResNet's curve over its schedule lengths at the same data, interpolated in log FLOPs",
           f"the gap's change with data: {small:,} → {big:,} images at {shared:,} steps (the longest schedule run at "
           "both)"]
    up = {"large_data_steps": gap_at(longest_at[big], big, "glyph_test_top1"),
          "large_data_flops": matched_flops_gap(rows, "ViT", "ResNet", "glyph_test_top1", x_match, images=big)}
    ctx.append("upstream (glyph test), not part of the verdict: ViT − ResNet at matched steps "
               f"{up['large_data_steps'].text(signed=True)}; at matched FLOPs {up['large_data_flops'].text(signed=True)}")
    seen = [c for c in res.get("seed_check", []) if c["metric"] in (m, "glyph_test_top1")]
    for c in seen:
        e = paired(c["gaps"], [0.0] * len(c["gaps"]))
        ctx.append(f"seed check at {c['steps']:,} steps, {c['images']:,} images (point chosen after the grid was "
                   f"seen), ViT − ResNet {c['metric']}: {e.text(signed=True)}")
    return Evidence({k: v for k, v in parts.items() if v is not None}, checks, ctx,
                    images={"small_data": small, "large_data_steps": big, "large_data_flops": big, "narrows": big},
                    ties=tied_sweeps(res))


_SEEDS = (f"at least {MIN_SEEDS} pre-training seeds per number; mean with the 95% t-interval from the sample std; "
          "differences paired by seed, with the two-sided paired t-test p-value")
_DEV = "the early-stopping step and every learning rate picked on the digits dev split; test reported, never selected on"
# the pre-training rate of every model a verdict compares (tuning.py), and the precondition that checks it
_TUNED = ("each model's pre-training rate picked on a grid bracketed on both sides (the whole set, seed 0, 5-shot "
          "digits dev), then used for all its seeds and data sizes; ")
_LR = (LR_BRACKETED,)
_ADDED = ("2026-11-27, after both seeded runs were read (issue 51's review): the paper's claim is about how the gap "
          "changes with data, which the fixed-point parts do not test")

RULES: dict[str, Rule] = {r.experiment: r for r in (
    Rule("fig4", "ResNet better with little pre-training data, ViT better with a lot (Fig. 3–4)",
         (Part("small", "ViT − ResNet at the smallest data size", "less"),
          Part("large", "ViT − ResNet at the largest data size", "greater", regime_images=VIT_WINS_IMAGES),
          Part("narrows", "(ViT − ResNet) at the largest data size minus at the smallest (the gap narrows with "
               "data)", "greater", added=_ADDED)),
         "5-shot linear digits test accuracy (Fig. 4's metric) at the early-stopping step",
         "the B models, the same schedule for both families; " + _TUNED + _DEV, _SEEDS, preconditions=_LR),
    Rule("fig5", "at matched pre-training compute ViTs transfer better than ResNets; hybrids beat ViTs at small "
         "compute (Fig. 5)",
         (Part("vit_vs_resnet", "ViT − ResNet at matched FLOPs (middle of the range both cover)", "greater",
               regime_images=VIT_WINS_IMAGES),
          Part("hybrid_vs_vit_small", "Hybrid − ViT at the smallest FLOPs both cover", "greater"),
          Part("hybrid_gap_closes", "(Hybrid − ViT) at the smallest FLOPs both cover minus at the largest",
               "greater")),
         "5-shot linear accuracy, mean of digits and lfw",
         "each family's curve over its sizes read at the matched FLOPs, interpolated in log FLOPs, never extrapolated; "
         + _TUNED + _DEV, _SEEDS, preconditions=_LR),
    Rule("fig7", "position embeddings learn the 2-D grid; attention distance grows with depth; some first-layer "
         "heads attend globally (Fig. 7)",
         (Part("grid", "E_pos cosine similarity, same row/column minus other patches", "greater", unit=""),
          Part("depth", "slope of the mean attention distance per layer", "greater", unit="px"),
          Part("global_heads", "farthest first-layer head minus uniform attention, as a share of the largest "
               "distance", "greater", unit="")),
         "the inspection measures of ViT-L on 64 glyph test images",
         "the last checkpoint; " + _TUNED.rstrip("; ") + " (what a model learns is read off a trained one)",
         f"at least {MIN_SEEDS} pre-training seeds; mean with the 95% t-interval", preconditions=_LR),
    Rule("hires", "fine-tuning at a higher resolution than pre-training is beneficial (§3.2)",
         (Part("gain", "32 px − 16 px", "greater"),),
         "digits test accuracy after fine-tuning",
         _TUNED + "the fine-tuning rate picked on the digits dev split from a sweep bracketed on both sides",
         f"at least {MIN_SEEDS} seeds, paired by seed (pre-training seed i fine-tuned with seed i at both "
         "resolutions; result files before 2026-11-25 hold one pre-trained model: its fine-tuning seeds are not "
         "replicates, not established); 95% t-interval and paired t-test",
         preconditions=(LR_BRACKETED, FT_BRACKETED, INDEPENDENT)),
    Rule("posemb", "no position embedding is worse; 1-D, 2-D and relative perform about the same (D.4, Table 8)",
         (Part("none_worse", "none − learned 1-D", "less"),
          Part("2d_same", "learned 2-D − learned 1-D", "equivalent", 0.02),
          Part("relative_same", "relative − learned 1-D", "equivalent", 0.02)),
         "5-shot linear digits test accuracy at the last step",
         _TUNED + "the last step (no selection); equivalence margin ±2 points fixed in advance", _SEEDS,
         preconditions=_LR),
    Rule("mpp", "masked patch prediction beats training from scratch and stays behind supervised pre-training (§4.6)",
         (Part("beats_scratch", "MPP (longest) − from scratch with the same total compute", "greater"),
          Part("behind_supervised", "MPP (longest) − supervised pre-training", "less")),
         "digits test accuracy after fine-tuning",
         "the longest MPP run (named in advance); MPP's pre-training rate picked at that length on a grid extended "
         "past an edge that wins, by the digits dev accuracy after fine-tuning (seed 0); fine-tuning learning rate "
         "picked on the digits dev split from a sweep bracketed on both sides",
         f"at least {MIN_SEEDS} seeds (from 2026-11-26: MPP and supervised pre-training seed i fine-tuned with "
         "seed i; earlier files hold one pre-training run per arm: their fine-tuning seeds are not replicates, not "
         "established); 95% t-interval of the difference (paired by seed where kept, else Welch)",
         preconditions=(FT_BRACKETED, MPP_RATE, INDEPENDENT)),
    Rule("pooling", "a class token and global average pooling work equally well, each with its own learning rate "
         "(appendix D.3, Fig. 9)",
         (Part("same", "global average pooling − class token", "equivalent", 0.02),),
         "5-shot linear digits test accuracy at the early-stopping step",
         "each variant's pre-training rate picked on a grid bracketed on both sides (seed 0, 5-shot digits dev), "
         "then every seed at that rate; " + _DEV, _SEEDS, preconditions=_LR),
    Rule("size", "larger ViTs gain more from more pre-training data than smaller ones, and with enough data the "
         "larger ViT is the better one (§4.2, Fig. 3)",
         (Part("vit_gain", "ViT-B's gain from the smallest to the whole set minus ViT-S's", "greater",
               regime_images=LARGER_VIT_WINS_IMAGES),
          Part("vit_large", "ViT-B − ViT-S on the whole set", "greater", regime_images=LARGER_VIT_WINS_IMAGES)),
         "5-shot linear digits test accuracy at the early-stopping step",
         "two sizes per family, the smallest and the whole set, the same schedule; " + _TUNED + _DEV, _SEEDS,
         preconditions=_LR),
    Rule("optim", "pre-training the ResNet with Adam transfers better than with SGD with momentum (appendix D.1, "
         "Table 7)",
         (Part("adam_better", "Adam − SGD (ResNet-B, the whole set)", "greater"),),
         "5-shot linear digits test accuracy at the early-stopping step",
         "each optimiser's pre-training rate picked on a grid bracketed on both sides (seed 0, 5-shot digits dev), "
         "then every seed at that rate; " + _DEV, _SEEDS, preconditions=_LR),
    Rule("crossover", "with little data the ResNet wins; with enough data and compute the ViT overtakes it, also "
         "per unit of compute (§4.2, Fig. 3–5)",
         (Part("small_data", "ViT − ResNet at the smallest data size, its longest schedule", "less"),
          Part("large_data_steps", "ViT − ResNet at the largest data size, the longest schedule (matched steps)",
               "greater", regime_images=VIT_WINS_IMAGES),
          Part("large_data_flops", "ViT − ResNet at the largest data size, matched training FLOPs (the ViT's "
               "longest run inside the ResNet's FLOPs range; the ResNet interpolated in log FLOPs)", "greater",
               regime_images=VIT_WINS_IMAGES),
          Part("narrows", "(ViT − ResNet) at the largest data size minus at the smallest, at the longest schedule "
               "run at both (the gap narrows with data)", "greater", added=_ADDED)),
         "5-shot linear digits test accuracy at the early-stopping step (upstream glyph accuracy reported beside it)",
         "fixed grid points named in advance (no maximum over data sizes); " + _DEV, _SEEDS,
         preconditions=_LR),
)}


def _lr_checks(sweeps: dict[str, list[dict[str, float]]] | None, untuned: list[str] = ()
               ) -> dict[str, tuple[bool | None, str]]:
    """The precondition "lr grids bracketed": every pre-training sweep the result rests on has a tried rate on each
    side of its best. A result without sweeps failed it (its rates were not tuned); one written before results
    recorded them (`sweeps` None: no `lr_sweeps` key) is not checked, its verdict what it was."""
    if sweeps is None:
        return {LR_BRACKETED: (None, "a result written before each model's rate sweep was recorded")}
    bad = [f"{key}: " + sweep_text(sweep) for key, sweep in sweeps.items() if not bracketed(sweep)] + list(untuned)
    ok = bool(sweeps) and not bad
    why = "; ".join(bad) if bad else ("every sweep has a rate on each side of its best" if sweeps else
                                      "no learning-rate sweep: the pre-training rate was not tuned at this scale")
    return {LR_BRACKETED: (ok, why)}


def _finetune_checks(sweeps: list[list[dict[str, float]]] | None) -> dict[str, tuple[bool | None, str]]:
    """The precondition "fine-tuning lr grids bracketed": every fine-tune's sweep (by digits dev accuracy) has a tried
    rate on each side of its pick; None (a result written before fine-tunes recorded their sweeps): not checked."""
    if sweeps is None:
        return {FT_BRACKETED: (None, "a result written before the fine-tuning sweeps were recorded")}
    bad = [sweep_text(sw, "dev_top1") for sw in sweeps if not bracketed(sw, "dev_top1")]
    why = (f"{len(bad)} of {len(sweeps)} sweeps not bracketed: " + "; ".join(bad[:3]) + ("; …" if len(bad) > 3 else "")
           if bad else f"all {len(sweeps)} sweeps have a rate on each side of their pick")
    return {FT_BRACKETED: (bool(sweeps) and not bad, why)}


def _pooling(res: dict[str, Any]) -> Evidence:
    r, m = res["results"], "digits_test_5shot"
    gap = paired_by_seed(dict(enumerate(r["gap"][m]["values"])), dict(enumerate(r["token"][m]["values"])))
    up = paired_by_seed(dict(enumerate(r["gap"]["glyph_test_top1"]["values"])),
                        dict(enumerate(r["token"]["glyph_test_top1"]["values"])))
    return Evidence({"same": gap}, _lr_checks(res["lr_sweeps"]),
                    [f"upstream (glyph test), not part of the verdict: gap − token {up.text(signed=True)}"])


EVIDENCE: dict[str, Callable[[dict[str, Any]], Evidence]] = {
    "fig4": _fig4, "size": _size, "fig5": _fig5, "optim": _optim, "fig7": _fig7, "hires": _hires, "posemb": _posemb, "mpp": _mpp, "pooling": _pooling,
    "crossover": _crossover,
}


def verdict(name: str, result: dict[str, Any]) -> tuple[Rule, Evidence, Judgement]:
    """The rule of experiment `name`, the evidence in its result JSON, and the verdict."""
    if name not in RULES:
        raise ValueError(f"no rule for experiment {name!r}; rules exist for {sorted(RULES)}")
    rule = RULES[name]
    ev = EVIDENCE[name](result)
    return rule, ev, judge(rule, ev)


def rule_markdown(rule: Rule) -> str:
    """The rule, as stated before the results."""
    lines = [f"*Rule (fixed before the results).* Claim: {rule.claim}. Metric: {rule.metric}. Selection: "
             f"{rule.selection}. Test: {rule.test}.", "", "| part | difference | claimed |", "|---|---|---|"]
    lines += [f"| {p.key} | {p.what}{f' (*added after the results were read*: {p.added})' if p.added else ''} | "
              f"{p.inequality()} |" for p in rule.parts]
    if rule.preconditions:
        lines += ["", "Preconditions: " + ", ".join(rule.preconditions) + "."]
    lines += ["", "A part holds when its 95% interval lies wholly on the claimed side, fails when it lies wholly on "
              "the other side, and is inconclusive otherwise; with fewer than "
              f"{MIN_SEEDS} seeds it is not established. Every part holds: reproduces; some: partly; none holds "
              "and one fails: does not reproduce; none holds or fails: inconclusive, or not established with too "
              "few seeds. A precondition not met: not established."]
    return "\n".join(lines)


def judgement_markdown(rule: Rule, ev: Evidence, j: Judgement) -> str:
    """The evidence per part (points: mean [95% interval] (n, p)) and the verdict the rule gives."""
    lines = ["| part | difference (points unless named) | claimed | outcome | flags |", "|---|---|---|---|---|"]
    fl = flags(rule, ev, j)
    for p in rule.parts:
        e = ev.parts[p.key].text(p.scale, 1 if p.unit == "points" else 3, signed=True)
        lines.append(f"| {p.key} | {e} {p.unit if p.unit != 'points' else ''} | {p.inequality()} | "
                     f"{j.outcomes[p.key]} | {'; '.join(fl[p.key])} |")
    for name, (ok, why) in ev.checks.items():
        lines.append(f"\nPrecondition {name}: {'not checked' if ok is None else 'met' if ok else 'NOT met'} ({why}).")
    lines += [f"\n{c}." for c in ev.context]
    if ev.ties:
        lines.append("\nPicks on an exact dev tie (the smaller rate is the pick): " + "; ".join(ev.ties) + ".")
    lines.append(f"\n**Verdict by the rule: {j.label}.**")
    return "\n".join(lines)
