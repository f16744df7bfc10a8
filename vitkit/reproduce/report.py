"""REPRODUCTION.md's generated tables, written from the committed result JSON by the rules' own code.

The report is prose around tables; every table that holds a number is generated here: the answer (section 0), the
rules (1), each experiment's parts at both scales (3), the deviations that can be computed (4), the multiplicity
count, both scales' times from their committed logs and the laptop re-run on a second CPU (5). REPRODUCTION.md keeps
each one between `<!-- generated: NAME -->` and `<!-- end: NAME -->` (the re-run's sweep-by-sweep table is in
docs/reproduction/history.md: `PAGES` says which page holds which block); `render` rewrites those blocks and leaves
the prose alone, `python -m vitkit.reproduce.report` updates the pages, and a test checks that each committed page
equals its rendering of the committed JSON, so the report cannot fall behind its results.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitkit.reproduce.plan import LAPTOP, Pretrain
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
from vitkit.reproduce.stats import LEVEL, Estimate, best_rates, bracketed, pick_rate, sweep_text
from vitkit.reproduce.summary import load_results
from vitkit.reproduce.tuning import model_name
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


# a result's numbers that are not measurements: the plan (sizes, seeds, grids, counts) and the runs' timings
NOT_MEASURED = frozenset({"images", "seed", "seeds", "params", "forward_flops_per_image", "train_flops", "steps",
                          "scratch_steps", "glyph_images", "glyph_classes", "batch", "eval_every", "finetune_steps",
                          "finetune_batch", "fewshot_seeds", "shots", "sizes", "schedules", "mpp_lrs", "pooling_lrs",
                          "lr_grid", "mpp_lr_grid", "train_s", "train_s_from_step", "threads", "wall_s", "flops", "x",
                          # the plan itself, and the words
                          "scale", "crossover_scale", "device", "markdown", "figures", "claim", "experiment"})


def measured_numbers(res: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], float]:
    """Every measured number of a result JSON by its path (list items by index): accuracies per run and per seed,
    their means and intervals, rates picked, early-stopping steps; the plan's numbers and timings left out."""
    out: dict[tuple[str, ...], float] = {}
    if isinstance(res, dict):
        for k, v in res.items():
            if k not in NOT_MEASURED:
                out.update(measured_numbers(v, (*path, str(k))))
    elif isinstance(res, list):
        for i, v in enumerate(res):
            out.update(measured_numbers(v, (*path, str(i))))
    elif isinstance(res, (int, float)) and not isinstance(res, bool):
        out[path] = float(res)
    return out


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two runs of one experiment, number by number (`measured_numbers`): how many are equal bit for bit, how many
    differ, the largest difference among accuracies (values in [0, 1], in points) and where, and what only one has."""
    na, nb = measured_numbers(a), measured_numbers(b)
    common = sorted(set(na) & set(nb))
    differ = [k for k in common if na[k] != nb[k]]
    acc = [k for k in differ if 0.0 <= na[k] <= 1.0 and 0.0 <= nb[k] <= 1.0]
    worst = max(acc, key=lambda k: abs(na[k] - nb[k]), default=None)
    return {"compared": len(common), "equal": len(common) - len(differ), "differ": len(differ),
            "largest": None if worst is None else (100 * abs(na[worst] - nb[worst]), "/".join(worst)),
            "only_one": len(set(na) ^ set(nb))}


def replication_table(first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]) -> str:
    """The laptop run against its re-run on another CPU: per experiment, the verdicts by the same rule, the picked
    rates, and the measured numbers equal bit for bit or not (the largest accuracy difference, in points)."""
    lines = ["| # | experiment | committed run: verdict | re-run: verdict | rates picked | measured numbers: "
             "equal / differ (largest accuracy difference, points) |", "|---|---|---|---|---|---|"]
    for i, name in NUMBERED.items():
        if name not in second:
            lines.append(f"| {i} | {TITLES[name]} | {_judged(name, first)[2].label} | (not in the re-run) | | |")
            continue
        ja, jb = _judged(name, first)[2], _judged(name, second)[2]
        c = compare_runs(first[name], second[name])
        same_picks = _picks(first[name]) == _picks(second[name])
        big = f" ({c['largest'][0]:.1f})" if c["largest"] else ""
        extra = f"; {c['only_one']} in one run only" if c["only_one"] else ""
        lines.append(f"| {i} | {TITLES[name]} | {ja.label} | {'the same' if ja.label == jb.label else f'**{jb.label}**'} | "
                     f"{'the same' if same_picks else 'differ'} | {c['equal']:,} / {c['differ']:,}{big}{extra} |")
    return "\n".join(lines)


def _picks(res: dict[str, Any]) -> dict[str, Any]:
    """The rates a result picked: its `lr` and `mpp_lr` as written, and each sweep's pick (the smaller of a tie)."""
    return {"lr": res.get("lr"), "mpp_lr": res.get("mpp_lr"),
            "sweeps": {k: pick_rate(v) for k, v in (res.get("lr_sweeps") or {}).items()}}


TIME_FIELDS = {"wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", "user": r"User time \(seconds\): (\S+)",
               "system": r"System time \(seconds\): (\S+)", "rss_kb": r"Maximum resident set size \(kbytes\): (\d+)",
               "exit": r"Exit status: (\d+)"}


def time_log(log: Path) -> dict[str, Any]:
    """A reproduction's committed log (its `start` / `end` stamps, `uptime` lines and GNU time's `-v` report): the
    start and end, the wall clock (seconds), the CPU seconds (user + system), the peak RSS of the largest process,
    and the load average at the start and at the end."""
    if not log.is_file():
        raise ValueError(f"{log}: the run's log is missing")
    text = log.read_text()
    got: dict[str, Any] = {}
    for key, pat in TIME_FIELDS.items():
        m = re.search(pat, text)
        if m is None:
            raise ValueError(f"{log}: no GNU time line for {key!r} (expected /usr/bin/time -v's report)")
        got[key] = m[1]
    secs = 0.0
    for part in got["wall"].split(":"):
        secs = secs * 60 + float(part)
    loads = re.findall(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", text)
    stamps = {k: (re.search(rf"^{k} (\S+)", text, re.M) or [None, None])[1] for k in ("start", "end")}
    return {"start": stamps["start"], "end": stamps["end"], "wall_s": secs,
            "cpu_s": float(got["user"]) + float(got["system"]), "rss_gib": int(got["rss_kb"]) / 2**20,
            "exit": int(got["exit"]), "load_start": loads[0] if loads else None,
            "load_end": loads[-1] if len(loads) > 1 else None}


def _shown(path: Path) -> Path:
    """A path as the page names it: from the repository root where it lies inside."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def clock_text(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m // 60} h {m % 60} min {s} s" if m >= 60 else f"{m} min {s} s"


COMMITTED_LAPTOP = ("| the committed run, 2026-11-26 | 2-core Intel Xeon (AVX512_BF16, AMX) | 39 min 48 s | 3,685 s | 0.88 GiB | "
                    "not recorded (the test suite ran beside it for its first 15 minutes) | commit cd5829f's text; no log "
                    "exists |")


def laptop_times_table(log: Path | None) -> str:
    """Section 5: the laptop scale's invocations: the committed run (no log exists: the figures of commit cd5829f)
    and the re-run, from its committed log (`None`: not committed yet, said)."""
    lines = ["| invocation | machine | wall clock | CPU (user + system) | peak RSS | load average (1, 5, 15 min) | "
             "source |", "|---|---|---|---|---|---|---|", COMMITTED_LAPTOP]
    if log is None:
        return "\n".join([*lines, f"| the re-run on a second CPU | | | | | | its log is not committed yet "
                                   f"(`{_shown(RESULTS)}/laptop/rerun_<date>.log`) |"])
    r = time_log(log)
    load = (f"{', '.join(r['load_start'])} at the start" if r["load_start"] else "not recorded") + (
        f"; {', '.join(r['load_end'])} at the end" if r["load_end"] else "")
    return "\n".join([*lines,
        f"| the re-run, {(r['start'] or '')[:10]} (exit {r['exit']}) | 2-core AMD EPYC (AVX2 only) | "
        f"{clock_text(r['wall_s'])} | {r['cpu_s']:,.0f} s | {r['rss_gib']:.2f} GiB | {load} | "
        f"[{log.name}](benchmarks/results/reproduce/laptop/{log.name}) |"])


def _sgd_rate_source(res: dict[str, Any]) -> str:
    """How a result's SGD rate came to be: trained at a rate given to benchmarks/reproduce_tied_rate.py (its record),
    or its sweep's pick (outright, or the smaller of an exact dev tie)."""
    rate, sweep = res["lr"]["sgd"], res["lr_sweeps"]["sgd"]
    if "tied_rate" in res:
        t = res["tied_rate"]
        same = {True: "equal bit for bit", False: "**different**", None: "not in the sweep"}[t["seed0_equals_sweep"]]
        return (f"trained at this rate (benchmarks/reproduce_tied_rate.py, {t['cpu']}); seed 0's dev "
                f"{100 * t['seed0_dev']:.2f} against the sweep's own run: {same}")
    if f"{rate:g}" != f"{pick_rate(sweep):g}":
        return f"not its sweep's pick ({pick_rate(sweep):.3g})"
    best = sorted(best_rates(sweep))
    top = max(r["dev"] for r in sweep)
    if len(best) > 1:
        return f"its pick: {' and '.join(f'{r:.3g}' for r in best)} tie at {100 * top:.2f} dev, the smaller by rule"
    second = max((r for r in sweep if r["dev"] < top), key=lambda r: r["dev"], default=None)
    return f"its pick, outright: {100 * top:.2f} dev" + (
        f" against {100 * second['dev']:.2f} at {second['lr']:.3g}" if second else "")


def ties_table(runs: dict[str, dict[str, Any]], alternatives: dict[str, dict[str, Any]]) -> str:
    """Experiment 10 under each rate of a tied SGD pick: the verdict at the pick and at every other tied rate
    (`alternatives`: a label -> the result as it reads with that rate, benchmarks/reproduce_tied_rate.py), and how
    each row's rate was picked or trained (`_sgd_rate_source`)."""
    rule = RULES["optim"]
    p = rule.parts[0]
    lines = ["| run | SGD rate | Adam − SGD, 5-shot digits (paired by seed) | outcome | verdict | the rate |",
             "|---|---:|---|---|---|---|"]
    for label, res in {**runs, **alternatives}.items():
        _, ev, j = verdict("optim", res)
        lines.append(f"| {label} | {res['lr']['sgd']:.3g} | {part_text(p, ev.parts[p.key])} | {j.outcomes[p.key]} | "
                     f"{j.label} | {_sgd_rate_source(res)} |")
    return "\n".join(lines)


RERUN = RESULTS / "laptop_rerun"  # the laptop run again, on a second CPU (a replication beside the committed run)


def replication_block(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Section 5's replication: the committed laptop run against its re-run (`RERUN`), or that it is not committed."""
    if not RERUN.is_dir():
        return f"The re-run's results are not committed yet (`{_shown(RERUN)}/<experiment>.json`)."
    return replication_table(runs["laptop"], load_results(RERUN))


def rerun_log() -> Path | None:
    """The laptop re-run's committed log (`laptop/rerun_<date>.log`, the latest), or None."""
    logs = sorted((RESULTS / "laptop").glob("rerun_*.log"))
    return logs[-1] if logs else None


def _snapshot_unit(optimizer: str, lr: float, seed: int) -> dict[str, Any] | None:
    """The re-run's pre-training unit of ResNet-B (the whole set) at `lr` and `seed` in its snapshot (`SNAPSHOT`)."""
    if not SNAPSHOT.is_file():
        return None
    return next((u for u in json.loads(SNAPSHOT.read_text())["units"]
                 if (u["family"], u["size"], u["optimizer"], u["seed"], u["images"]) ==
                 ("ResNet", "B", optimizer, seed, LAPTOP.glyph_images) and f"{u['lr']:g}" == f"{lr:g}"), None)


def _tied_rate_note(path: Path, res: dict[str, Any]) -> str:
    """A trained tied-rate result's record: its seed 0 against the re-run's own sweep run at that rate (dev, 5-shot
    test and glyph test, bit for bit) and its time from its committed log (`<name>_<date>.log` beside it)."""
    rate, sgd = res["lr"]["sgd"], res["results"]["sgd"]
    unit = _snapshot_unit("sgd", rate, 0)
    if unit is None:
        same = "the re-run's sweep run at this rate is not in its snapshot"
    else:
        pairs = [("dev", res["tied_rate"]["seed0_dev"], unit["dev"]),
                 ("5-shot test", sgd["digits_test_5shot"]["values"][0], unit["digits_test_5shot"]),
                 ("glyph test", sgd["glyph_test_top1"]["values"][0], unit["glyph_test_top1"])]
        same = "seed 0 against the re-run's own sweep run at this rate: " + ", ".join(
            f"{k} {100 * a:.2f} {'equal bit for bit' if a == b else f'**different** ({100 * b:.2f})'}"
            for k, a, b in pairs)
    logs = sorted(path.parent.glob(f"{path.stem}_*.log"))
    if logs:
        t = time_log(logs[-1])
        load = (f"; load {t['load_start'][0]} at the start, {t['load_end'][0]} at the end (1-min, a shared machine)"
                if t["load_start"] and t["load_end"] else "")
        took = (f"{clock_text(t['wall_s'])} wall clock, {t['cpu_s']:,.0f} CPU s{load} "
                f"([{logs[-1].name}](benchmarks/results/reproduce/laptop_rerun/{logs[-1].name}))")
    else:
        took = f"its log is not committed (`{path.stem}_<date>.log`)"
    return f"SGD at {rate:.3g} on the re-run's CPU: {same}; {took}."


def ties_block(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Experiment 10's laptop verdict under each tied SGD rate: the committed run at its pick, the re-run at its pick,
    and each rate `benchmarks/reproduce_tied_rate.py` trained (`RERUN/optim_sgd<rate>.json`); then which rates of
    the committed run's tie have a verdict on which CPU, and why a row is missing."""
    committed = runs["laptop"]["optim"]
    picks = {"committed run (Intel Xeon), its pick": committed}
    rerun = load_results(RERUN)["optim"] if (RERUN / "optim.json").is_file() else None
    if rerun is not None:
        picks["re-run (AMD EPYC), its pick"] = rerun
    others, notes = {}, []
    for path in sorted(RERUN.glob("optim_sgd*.json")):
        res = json.loads(path.read_text())
        others[f"re-run (AMD EPYC), SGD at {res['lr']['sgd']:.3g}: [{path.name}]"
               f"(benchmarks/results/reproduce/laptop_rerun/{path.name})"] = res
        if "tied_rate" in res:
            notes.append(_tied_rate_note(path, res))
    text = ties_table(picks, others)
    tie = sorted(best_rates(committed["lr_sweeps"]["sgd"]))
    if len(tie) < 2:
        return text + "\n\nThe committed run's SGD pick is not tied on dev: it has no other rate."
    amd: dict[str, str] = {}  # the rates with a verdict on the re-run's CPU, and how
    if rerun is not None:
        amd[f"{rerun['lr']['sgd']:g}"] = "the re-run's own pick"
    for r in others.values():
        amd.setdefault(f"{r['lr']['sgd']:g}", "trained at it by benchmarks/reproduce_tied_rate.py")
    done = [r for r in tie if f"{r:g}" in amd]
    missing = [r for r in tie if f"{r:g}" not in amd]
    rest = [r for r in tie if r != committed["lr"]["sgd"]]
    out = [f"Which rows exist. The committed run's SGD sweep ties {' and '.join(f'{r:.3g}' for r in tie)} on dev; "
           f"the pick, {committed['lr']['sgd']:.3g}, follows from the tie rule alone."]
    if rerun is not None:
        tied_there = len(best_rates(rerun["lr_sweeps"]["sgd"])) > 1
        out.append(f"The re-run's sweep {'ties too' if tied_there else 'has no tie'} "
                   f"({sweep_text(rerun['lr_sweeps']['sgd'])}).")
    which = ", ".join(f"{r:.3g} ({amd[f'{r:g}']})" for r in done)
    if not done:
        amd_text = "no rate of the committed run's tie has a verdict yet"
    elif not missing:
        amd_text = f"every rate of the committed run's tie has a verdict: {which}"
    else:
        amd_text = f"of the committed run's tie only {which} has a verdict"
    if missing:
        amd_text += (f"; {' and '.join(f'{r:.3g}' for r in missing)} {'is' if len(missing) == 1 else 'are'} not "
                     "trained yet there (`python benchmarks/reproduce_tied_rate.py --rate R` trains it)")
    out.append(f"On the AMD EPYC {amd_text}.")
    out.append(f"On the Intel Xeon only the pick has one: the committed run at {', '.join(f'{r:.3g}' for r in rest)} "
               "has no row. Its seed-0 run there is the sweep's (dev and glyph accuracy in the committed JSON, no 5-shot "
               "test), and seeds 0–2 at that rate would have to be trained on the Xeon: on another CPU the same seeds "
               "give other numbers (§5), so nothing trained here stands in for it.")
    return "\n\n".join([text, " ".join(out), *notes])


SNAPSHOT = RESULTS / "laptop" / "rerun_units_partial.json"  # the re-run's finished units while it runs
# experiments 8 and 10 name their sweeps by variant; the models they are (tuning.model_name)
VARIANT_MODELS = {"pooling": {"token": "ViT-B", "gap": "ViT-B pool-gap"},
                  "optim": {"adamw": "ResNet-B", "sgd": "ResNet-B sgd"}}


def committed_sweeps(results: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """A run's pre-training rate sweeps by model name (`tuning.model_name`), the crossover's (per schedule length)
    left out."""
    out: dict[str, list[dict[str, float]]] = {}
    for name, res in results.items():
        if name != "crossover":
            for k, v in (res.get("lr_sweeps") or {}).items():
                out[VARIANT_MODELS.get(name, {}).get(k, k)] = v
    return out


def sweep_replication(results: dict[str, dict[str, Any]], snapshot: dict[str, Any]) -> str:
    """The re-run's finished seed-0 sweep runs (`snapshot`, benchmarks/reproduce_rerun_snapshot.py) against the
    committed run's sweeps, rate by rate: equal bit for bit or not, the largest dev difference, and each finished
    (bracketed) sweep's pick against the committed pick."""
    mine: dict[str, list[dict[str, float]]] = {}
    for u in snapshot["units"]:
        if (u["seed"], u["objective"], u["images"], u["steps"]) == (0, "classify", LAPTOP.glyph_images, LAPTOP.steps):
            m = model_name(Pretrain(u["family"], u["size"], posemb=u["posemb"], pooling=u["pooling"],
                                    optimizer=u["optimizer"]))
            mine.setdefault(m, []).append({"lr": u["lr"], "dev": u["dev"], "glyph_test_top1": u["glyph_test_top1"]})
    lines = ["| model | committed run: rate → dev (%) | re-run | largest dev difference (points) | pick: "
             "committed → re-run |", "|---|---|---|---|---|"]
    equal = differ = 0
    worst: tuple[float, str] = (0.0, "")
    moved, kept = [], 0
    for m, sw in committed_sweeps(results).items():
        got = sorted(mine.get(m, []), key=lambda r: r["lr"])
        if not got:
            continue
        by_rate = {f"{r['lr']:g}": r for r in sw}
        gaps = []
        for g in got:
            c = by_rate.get(f"{g['lr']:g}")
            if c is not None:
                same = c["dev"] == g["dev"] and c["glyph_test_top1"] == g["glyph_test_top1"]
                equal, differ = equal + same, differ + (not same)
                gaps.append(100 * abs(c["dev"] - g["dev"]))
                worst = max(worst, (gaps[-1], f"{m} at {g['lr']:.3g}"))
        done = bracketed(got)
        pick = f"{pick_rate(sw):.3g} → {pick_rate(got):.3g}" if done else f"{pick_rate(sw):.3g} → (sweep unfinished)"
        if done:
            kept += pick_rate(sw) == pick_rate(got)
            if pick_rate(sw) != pick_rate(got):
                moved.append(m)
        lines.append(f"| {m} | {sweep_text(sw, bold=True)} | {sweep_text(got, bold=done)} | "
                     f"{max(gaps, default=0):.1f} | {pick} |")
    lines += ["", f"{equal + differ} sweep runs of the re-run had finished by {snapshot['taken']}: {equal} equal bit "
              f"for bit to the committed run's, {differ} different (the largest dev difference {worst[0]:.1f} points, "
              f"{worst[1]}); of {kept + len(moved)} finished sweeps, {kept} pick the committed rate"
              + (f", {len(moved)} another: {', '.join(moved)}" if moved else "") + "."]
    return "\n".join(lines)


def sweeps_block(runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The history page: the re-run's sweeps against the committed run's, or that no snapshot is committed."""
    if not SNAPSHOT.is_file():
        return f"No snapshot of the re-run is committed (`{_shown(SNAPSHOT)}`)."
    return sweep_replication(runs["laptop"], json.loads(SNAPSHOT.read_text()))


BLOCKS: dict[str, Callable[[dict[str, dict[str, dict[str, Any]]]], str]] = {
    "answer": answer_table, "rules": lambda runs: rules_table(), "deviations": deviations_table, "picks": picks_table,
    "multiplicity": multiplicity, "sittings": lambda runs: sittings_table(RESULTS / "long" / "sittings.log"),
    "replication": replication_block, "laptop-times": lambda runs: laptop_times_table(rerun_log()),
    "optim-ties": ties_block, "rerun-sweeps": sweeps_block,
    **{f"parts-{name}": (lambda runs, name=name: parts_table(name, runs)) for name in NUMBERED.values()},
}
BLOCK = re.compile(r"(<!-- generated: ([a-z0-9-]+) -->\n).*?(<!-- end: \2 -->)", re.S)
# the pages that hold generated blocks, and which: the report, and its history page, which keeps the laptop re-run's
# sweep-by-sweep detail (section 5 of the report summarises it)
HISTORY_BLOCKS = ("rerun-sweeps",)
PAGES: dict[Path, tuple[str, ...]] = {
    ROOT / "REPRODUCTION.md": tuple(b for b in BLOCKS if b not in HISTORY_BLOCKS),
    ROOT / "docs" / "reproduction" / "history.md": HISTORY_BLOCKS,
}


def render(text: str, runs: dict[str, dict[str, dict[str, Any]]]) -> str:
    """`text` with every generated block rewritten from `runs` ({scale: {experiment: result}}); an unknown block
    name is refused."""
    def fill(m: re.Match[str]) -> str:
        if m[2] not in BLOCKS:
            raise ValueError(f"no generator for block {m[2]!r} (a reproduction page's generated block); known: "
                             f"{sorted(BLOCKS)}")
        return f"{m[1]}{BLOCKS[m[2]](runs)}\n{m[3]}"

    return BLOCK.sub(fill, text)


def committed_runs(root: Path = RESULTS) -> dict[str, dict[str, dict[str, Any]]]:
    """The seeded runs' committed results, {scale: {experiment: result}}."""
    return {s: load_results(root / s) for s in SCALES}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated blocks of every page in `PAGES` (or of the files given) from the committed JSON."""
    paths = [Path(a) for a in (argv or sys.argv[1:])] or list(PAGES)
    runs = committed_runs()
    for path in paths:
        atomic_write_text(path, render(path.read_text(), runs))
        print(f"{path}: generated blocks rewritten from {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
