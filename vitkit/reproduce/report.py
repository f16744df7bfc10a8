"""REPRODUCTION.md's generated tables, written from the committed result JSON by the rules' own code.

The report is prose around tables; every table that holds a number is generated here: the answer (section 0), the
rules (1), each experiment's parts at both scales (3), the deviations that can be computed (4), the multiplicity
count, and the long run's sittings from its committed log (5). REPRODUCTION.md keeps each one between
`<!-- generated: NAME -->` and `<!-- end: NAME -->`; `render` rewrites those blocks and leaves the prose alone,
`python -m vitkit.reproduce.report` updates the file, and a test checks that the committed file equals its rendering
of the committed JSON, so the report cannot fall behind its results.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitkit.reproduce.rules import (
    FRAGILE_P,
    RULES,
    Evidence,
    Judgement,
    Part,
    Rule,
    flags,
    flops_ratio,
    judge,
    registered,
    verdict,
)
from vitkit.reproduce.stats import LEVEL, Estimate, sweep_text
from vitkit.reproduce.summary import load_results
from vitkit.utils.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "reproduce"
SCALES = ("laptop", "long")  # the seeded runs: RESULTS/<scale>
# REPRODUCTION.md numbers the experiments as the paper's sections are read
NUMBERED = {1: "fig4", 2: "fig5", 3: "fig7", 4: "hires", 5: "posemb", 6: "mpp", 7: "crossover", 8: "pooling",
            9: "size", 10: "optim"}
TITLES = {"fig4": "data size (Fig. 3–4)", "fig5": "compute, hybrids (Fig. 5)", "fig7": "what the ViT learns (Fig. 7)",
          "hires": "higher-resolution fine-tuning (§3.2)", "posemb": "position embeddings (D.4)",
          "mpp": "masked patch prediction (§4.6)", "crossover": "the crossover (§4.2, Fig. 3–5)",
          "pooling": "class token vs GAP (D.3)", "size": "model size × data (Fig. 3)",
          "optim": "Adam vs SGD for the ResNet (D.1)"}
CLAIMS = {"fig4": "ResNet wins with little data, ViT with a lot; the gap narrows with data",
          "fig5": "at matched compute ViT > ResNet; hybrids > ViT at small compute, the lead closing",
          "fig7": "E_pos learns the 2-D grid; attention distance grows with depth; some early heads global",
          "hires": "fine-tuning at 2× resolution helps", "posemb": "no E_pos worse; 1-D ≈ 2-D ≈ relative",
          "mpp": "MPP beats scratch, trails supervised", "crossover": "ViT overtakes ResNet with data and compute",
          "pooling": "class token ≈ GAP, each at its own rate", "size": "the larger ViT gains more from data",
          "optim": "Adam > SGD for the ResNet"}
# the part whose paired interval the answer table shows: the paper's headline for the experiment
HEADLINE = {"fig4": "large", "fig5": "vit_vs_resnet", "fig7": "grid", "hires": "gain", "posemb": "none_worse",
            "mpp": "beats_scratch", "crossover": "large_data_flops", "pooling": "same", "size": "vit_large",
            "optim": "adam_better"}
# experiments that compare the families at matched steps only (the ViT spends more FLOPs per step)
MATCHED_STEPS = ("fig4", "size")
SHORT = {"reproduces": "reproduces", "partly reproduces": "partly", "does not reproduce": "does not reproduce",
         "inconclusive": "inconclusive"}


def _verdict_word(j: Judgement) -> str:
    return SHORT.get(j.verdict, "not established")


def _counts(j: Judgement) -> str:
    c = j.counts
    return f"{c['held']}/{c['failed']}/{c['inconclusive']}" + (f" (+{c['not established']} n.e.)"
                                                                 if c["not established"] else "")


def part_text(p: Part, e: Estimate) -> str:
    """A part's difference as the summaries write it: mean [95% interval] (n, p), in points or the part's unit."""
    unit = "" if p.unit in ("points", "") else f" {p.unit}"
    return e.text(p.scale, 1 if p.unit == "points" else 3, signed=True) + unit


def _judged(name: str, results: dict[str, dict[str, Any]]) -> tuple[Rule, Evidence, Judgement]:
    if name not in results:
        raise ValueError(f"no result for experiment {name!r} (expected {name}.json among {sorted(results)})")
    return verdict(name, results[name])


def answer_table(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Section 0: per experiment the paper's claim, the verdict at each scale with its parts held / failed /
    inconclusive, the headline part's paired interval, and what makes a part fragile."""
    lines = ["| # | experiment | the paper's claim | laptop: verdict (held/failed/inconcl.) | long | headline "
             "difference, laptop; long | fragile parts |", "|---|---|---|---|---|---|---|"]
    for i, name in NUMBERED.items():
        cells, heads, fragile = [], [], []
        for scale in SCALES:
            rule, ev, j = _judged(name, runs[scale])
            cells.append(f"**{_verdict_word(j)}** {_counts(j)}")
            p = next(q for q in rule.parts if q.key == HEADLINE[name])
            heads.append(f"{part_text(p, ev.parts[p.key]).split(' (n=')[0]} → {j.outcomes[p.key]}")
            marked = [f"{key} ({', '.join(f.split(' (')[0] for f in fl)})" for key, fl in flags(rule, ev, j).items() if fl]
            if marked:
                fragile.append(f"{scale}: {', '.join(marked)}")
        ratios = [flops_ratio(runs[s][name]["rows"], "B") for s in SCALES] if name in MATCHED_STEPS else []
        what = TITLES[name] + (" — matched steps only: ViT-B spends " + " / ".join(f"{r:.2f}×" for r in ratios if r)
                               + " ResNet-B's FLOPs" if ratios else "")
        lines.append(f"| {i} | {what} | {CLAIMS[name]} | {cells[0]} | {cells[1]} | {'; '.join(heads)} | "
                     f"{'; '.join(fragile) or '—'} |")
    return "\n".join(lines)


def rules_table() -> str:
    """Section 1: the ten rules in one table (parts, metric, preconditions), as fixed before the runs; a part added
    after the results were read says so."""
    lines = ["| # | experiment | parts: difference, claimed | metric | preconditions |", "|---|---|---|---|---|"]
    for i, name in NUMBERED.items():
        rule = RULES[name]
        parts = "; ".join(f"*{p.key}*: {p.what} {p.inequality()}" + (" (**added after the results**)" if p.added
                                                                       else "") for p in rule.parts)
        lines.append(f"| {i} | {TITLES[name]} | {parts} | {rule.metric} | "
                     f"{', '.join(rule.preconditions) or '—'} |")
    return "\n".join(lines)


def parts_table(name: str, runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Section 3: one experiment's parts at both scales, side by side (difference → outcome, flags), the verdicts
    with their counts, and what the evidence reports beside the verdict."""
    judged = {s: _judged(name, runs[s]) for s in SCALES}
    rule = RULES[name]
    lines = ["| part | claimed | laptop | long |", "|---|---|---|---|"]
    for p in rule.parts:
        cells = []
        for s in SCALES:
            _, ev, j = judged[s]
            fl = flags(rule, ev, j)[p.key]
            cells.append(f"{part_text(p, ev.parts[p.key])} → **{j.outcomes[p.key]}**" + (f" ({'; '.join(fl)})"
                                                                                         if fl else ""))
        lines.append(f"| {p.key}: {p.what} | {p.inequality()} | {cells[0]} | {cells[1]} |")
    lines.append(f"| **verdict** | | {judged['laptop'][2].label} | {judged['long'][2].label} |")
    for s in SCALES:
        _, ev, _ = judged[s]
        notes = list(ev.context) + ([f"picks on an exact dev tie: {'; '.join(ev.ties)}"] if ev.ties else [])
        if notes:
            lines += ["", f"*{s}:* " + "; ".join(notes) + "."]
    return "\n".join(lines)


PREFIX = {"pooling": "ViT-B, pooling: ", "optim": "ResNet-B, optimiser: ", "crossover": "crossover: "}


def picks_table(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Section 2: every pre-training rate sweep at both scales (5-shot digits dev, seed 0; MPP's: digits dev after
    fine-tuning), the pick in bold, ties going to the smaller rate; a sweep several experiments share appears once."""
    sweeps: dict[str, dict[str, list[dict[str, float]]]] = {}
    for s in SCALES:
        for name in NUMBERED.values():
            res = runs[s][name]
            found = {PREFIX.get(name, "") + k: v for k, v in (res.get("lr_sweeps") or {}).items()}
            if "mpp_lr_sweep" in res:
                found["MPP ViT-B (digits dev after fine-tuning)"] = res["mpp_lr_sweep"]
            for k, v in found.items():
                seen = sweeps.setdefault(k, {})
                if s in seen and seen[s] != v:
                    raise ValueError(f"{s}: two different sweeps named {k!r} (one is {name}'s)")
                seen[s] = v
    lines = ["| model | laptop: rate → dev accuracy (%) | long |", "|---|---|---|"]
    for k, by in sweeps.items():
        lines.append(f"| {k} | " + " | ".join(sweep_text(by[s], bold=True) if s in by else "—" for s in SCALES) + " |")
    return "\n".join(lines)


def without_schedule(res: dict[str, Any], steps: int) -> dict[str, Any]:
    """A crossover result as it was before its `steps`-step schedule existed: those runs and their sweeps left out."""
    out = copy.deepcopy(res)
    out["rows"] = [r for r in res["rows"] if r["steps"] != steps]
    out["check_rows"] = [r for r in res.get("check_rows", []) if r["steps"] != steps]
    out["lr_sweeps"] = {k: v for k, v in res.get("lr_sweeps", {}).items() if f"{steps:,} steps" not in k}
    return out


def deviations_table(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Section 4's computed rows: what each post-hoc change moved, recomputed from the committed JSON."""
    lines = ["| change | what it moved (recomputed from the committed JSON) |", "|---|---|"]
    for name in ("fig4", "crossover"):
        for s in SCALES:
            rule, ev, j = _judged(name, runs[s])
            pre = judge(registered(rule), Evidence({k: v for k, v in ev.parts.items()
                                                    if any(p.key == k for p in registered(rule).parts)}, ev.checks))
            added = [p for p in rule.parts if p.added]
            lines.append(f"| {TITLES[name]}, {s}: part *{', '.join(p.key for p in added)}* added after the results "
                         f"were read | with it: {j.label}; the parts fixed before the runs alone: {pre.label}; the "
                         f"added part: {'; '.join(part_text(p, ev.parts[p.key]) for p in added)} |")
    res = runs["laptop"]["crossover"]
    longest = max(r["steps"] for r in res["rows"])
    rule, ev, j = verdict("crossover", res)
    _, ev0, j0 = verdict("crossover", without_schedule(res, longest))
    moved = "; ".join(f"*{k}* {part_text(p, ev0.parts[k])} → {j0.outcomes[k]} became {part_text(p, ev.parts[k])} → "
                      f"{j.outcomes[k]}" for k, p in ((q.key, q) for q in rule.parts)
                      if k in ("large_data_steps", "large_data_flops"))
    lines.append(f"| the crossover, laptop: the {longest:,}-step schedule added after the run of 2026-11-25 was read | "
                 f"{moved}; verdict without it: {j0.label}; with it: {j.label} |")
    for s in SCALES:
        _, ev, j = _judged("mpp", runs[s])
        lines.append(f"| MPP, {s}: the comparator (scratch at equal total compute) chosen after a result was read | "
                     f"against it (the rule's): {part_text(RULES['mpp'].parts[0], ev.parts['beats_scratch'])} → "
                     f"{j.outcomes['beats_scratch']}; against the usual from-scratch run: "
                     f"{part_text(RULES['mpp'].parts[0], ev.extra['usual_scratch'])} |")
    return "\n".join(lines)


def multiplicity(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """How many parts each scale tests, how many were decided, and which decided parts a Bonferroni correction over
    the parts fixed before the runs would keep (two-sided p < 0.05 / their number); equivalence parts have no
    such p and none of them held."""
    lines = []
    for s in SCALES:
        n_reg = sum(len(registered(RULES[name]).parts) for name in NUMBERED.values())
        n_all = sum(len(RULES[name].parts) for name in NUMBERED.values())
        decided, kept, fragile = [], [], []
        for i, name in NUMBERED.items():
            rule, ev, j = _judged(name, runs[s])
            for p in rule.parts:
                e, out = ev.parts[p.key], j.outcomes[p.key]
                if out in ("holds", "fails"):
                    tag = f"{i} {p.key} ({out}, p = {e.p:.2g})"
                    decided.append(tag)
                    if p.kind != "equivalent" and e.p is not None and e.p < (1 - LEVEL) / n_reg:
                        kept.append(tag)
                    if p.kind != "equivalent" and e.p is not None and e.p >= FRAGILE_P:
                        fragile.append(tag)
        lines.append(f"- **{s}**: {n_reg} parts fixed before the runs ({n_all} with the added ones), {len(decided)} "
                     f"decided: {'; '.join(decided)}. Bonferroni over {n_reg} (p < {(1 - LEVEL) / n_reg:.2g}) keeps "
                     f"{len(kept)}: {'; '.join(kept) or 'none'}. Decided with p ≥ {FRAGILE_P:g}: "
                     f"{'; '.join(fragile) or 'none'}.")
    return "\n".join(lines)


SITTING = re.compile(r"^sitting (start|end) (\S+ \S+)(?: .*?wall_s=(\d+))?")
FIRST = re.compile(r"^sitting (\d+): (\S+ \S+) -> (\S+) \((.*?)[;)]")


def sittings_table(log: Path) -> str:
    """Section 5: the long run's sittings, from its committed log (benchmarks/results/reproduce/long/sittings.log):
    the stamped start and end of each, and the wall clock the end stamp records."""
    if not log.is_file():
        raise ValueError(f"{log}: the long run's sittings log is missing")
    rows, start, total = [], None, 0
    for ln in log.read_text().splitlines():
        first = FIRST.match(ln)  # a sitting logged after the fact, on one line: "sitting 1: START -> END (why)"
        if first:
            rows.append(f"| {first[1]} | {first[2]} | {first[3]} | not stamped ({first[4]}) |")
        m = SITTING.match(ln)
        if not m:
            continue
        if m[1] == "start":
            start = m[2]
        else:
            wall = int(m[3]) if m[3] else None
            total += wall or 0
            rows.append(f"| {len(rows) + 1} | {start} | {m[2]} | "
                        f"{f'{wall:,} s ({wall / 3600:.2f} h)' if wall else 'no end stamp'} |")
    head = ["| sitting | start (UTC) | end | wall clock (GNU time) |", "|---:|---|---|---:|"]
    return "\n".join(head + rows + [f"| | | stamped total | {total:,} s ({total / 3600:.2f} h) |"])


BLOCKS: dict[str, Callable[[dict[str, dict[str, dict[str, Any]]]], str]] = {
    "answer": answer_table, "rules": lambda runs: rules_table(), "deviations": deviations_table, "picks": picks_table,
    "multiplicity": multiplicity, "sittings": lambda runs: sittings_table(RESULTS / "long" / "sittings.log"),
    **{f"parts-{name}": (lambda runs, name=name: parts_table(name, runs)) for name in NUMBERED.values()},
}
BLOCK = re.compile(r"(<!-- generated: ([a-z0-9-]+) -->\n).*?(<!-- end: \2 -->)", re.S)


def render(text: str, runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """`text` with every generated block rewritten from `runs` ({scale: {experiment: result}}); an unknown block
    name is refused."""
    def fill(m: re.Match[str]) -> str:
        if m[2] not in BLOCKS:
            raise ValueError(f"REPRODUCTION.md: no generator for block {m[2]!r}; known: {sorted(BLOCKS)}")
        return f"{m[1]}{BLOCKS[m[2]](runs)}\n{m[3]}"

    return BLOCK.sub(fill, text)


def committed_runs(root: Path = RESULTS) -> dict[str, dict[str, dict[str, Any]]]:
    """The seeded runs' committed results, {scale: {experiment: result}}."""
    return {s: load_results(root / s) for s in SCALES}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated blocks of REPRODUCTION.md (or the file given) from the committed JSON."""
    path = Path((argv or sys.argv[1:] or [str(ROOT / "REPRODUCTION.md")])[0])
    atomic_write_text(path, render(path.read_text(), committed_runs()))
    print(f"{path}: generated blocks rewritten from {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
