"""SUMMARY.md of a reproduction, written from the result JSON alone, every time: rule, results, verdict, figures.

A run writes `<out>/SUMMARY.md` after every experiment it ran (figures beside each result.json); `vitkit
reproduce --redraw DIR` rewrites the committed `benchmarks/results/reproduce/SUMMARY.md` from the committed JSON
(figures in docs/reproduction/). Nothing in it is typed by hand, so it cannot fall behind its JSON; a test
checks that the committed file equals what this module makes of the committed JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitkit.reproduce.crossover import markdown as crossover_markdown
from vitkit.reproduce.plan import EXPERIMENT_NAMES, scale_label
from vitkit.reproduce.plots import figure_files
from vitkit.reproduce.rules import RULES, judgement_markdown, rule_markdown, verdict
from vitkit.reproduce.tables import fig7_markdown, mpp_markdown
from vitkit.utils.atomic import atomic_write_text

ORDER = EXPERIMENT_NAMES  # plan.py's order


def load_results(folder: str | Path) -> dict[str, dict[str, Any]]:
    """The result JSON of every experiment in `folder`: `<name>.json` (the committed layout) or `<name>/result.json`
    (a run's folder)."""
    folder = Path(folder)
    found: dict[str, dict[str, Any]] = {}
    for n in ORDER:
        for path in (folder / f"{n}.json", folder / n / "result.json"):
            if path.is_file():
                try:
                    found[n] = json.loads(path.read_text())
                except ValueError as e:
                    raise ValueError(f"{path}: not readable JSON ({e})") from e
                break
    if not found:
        raise ValueError(f"{folder}: no experiment result (expected <name>.json or <name>/result.json for one of "
                         f"{', '.join(ORDER)})")
    return found


# experiments whose tables are rebuilt from the JSON's numbers (a wording fixed in the code reaches every summary);
# a builder's None, or an experiment not listed, keeps the `markdown` the run wrote
TABLES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "fig7": fig7_markdown, "mpp": mpp_markdown,
    "crossover": lambda res: crossover_markdown(res["crossover_scale"], res, res.get("lr_sweeps", {})),
}


def result_markdown(name: str, res: dict[str, Any]) -> str:
    """Experiment `name`'s result tables: rebuilt from its numbers where summary.TABLES has a builder, else the run's."""
    built = TABLES[name](res) if name in TABLES else None
    return res["markdown"] if built is None else built


def summary_markdown(results: dict[str, dict[str, Any]], figure: Callable[[str, str], str], title: str) -> str:
    """The whole SUMMARY.md: per experiment the paper's claim, the rule (fixed before results), the tables of the
    run, the evidence and verdict the rule gives, and the figures (`figure(name, file)`: the link to use)."""
    head = [f"# {title}", "", "Written from the experiments' result JSON by `vitkit reproduce` (do not edit). Verdicts "
            "are computed by the rules in `vitkit/reproduce/rules.py`; numbers: mean [95% t-interval] (n seeds, "
            "p-value of the two-sided t-test where a sign is claimed), differences in points.", "",
            "| experiment | verdict by its rule |", "|---|---|"]
    body = []
    for n in ORDER:
        if n not in results:
            continue
        res = results[n]
        try:
            rule, ev, j = verdict(n, res)
            judged, short = judgement_markdown(rule, ev, j), j.label
        except (KeyError, ValueError, IndexError) as e:  # a result too small for its rule (a smoke run): say so
            judged, short = f"**No verdict: the result does not hold what the rule reads ({e!r}).**", "no verdict"
        head.append(f"| {n} | {short} |")
        figs = " ".join(f"![{f}]({figure(n, f)})" for f in figure_files(n, res))
        body += [f"## {n}", "", f"Paper: {res['claim']}.", "", rule_markdown(RULES[n]) if n in RULES else "", "",
                 f"Result ({scale_label(res.get('scale', '?'))} scale):", "", result_markdown(n, res), "", judged, "", figs, ""]
    return "\n".join(head + [""] + body)


def write_summary(results: dict[str, dict[str, Any]], path: Path, figure: Callable[[str, str], str],
                  title: str) -> Path:
    atomic_write_text(path, summary_markdown(results, figure, title))
    return path
