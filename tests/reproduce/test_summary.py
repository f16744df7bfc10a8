"""The reproduction's documents cannot lie about their files: SUMMARY.md is exactly what the committed JSON gives,
every link and image of REPRODUCTION.md and SUMMARY.md exists, and the figures follow the honesty rules."""

from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from tests.helpers import figures_drawn_not_encoded
from vitkit.cli import main
from vitkit.reproduce import CROSSOVER_SCALES, SCALES, plots
from vitkit.reproduce.plan import SCALE_OPTIONS, scale_label
from vitkit.reproduce.stats import mean_ci
from vitkit.reproduce.summary import ORDER, load_results, summary_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "reproduce"
FIGURES = ROOT / "docs" / "reproduction"
# the seeded runs, by --scale (`vitkit reproduce --all`: laptop 2026-11-25/26; long from 2026-11-26, in sittings):
# their JSON and SUMMARY.md in RESULTS/<scale>, their figures in FIGURES/<scale>
SEEDED = ("laptop", "long")
LAPTOP_RESULTS, LAPTOP_FIGURES = RESULTS / "laptop", FIGURES / "laptop"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _links(md: Path) -> list[str]:
    return [t for t in LINK.findall(md.read_text()) if not re.match(r"[a-z]+://|#|mailto:", t)]


@pytest.mark.parametrize("doc", ["REPRODUCTION.md", "docs/reproduction/history.md", "benchmarks/results/reproduce/SUMMARY.md",
                                 *(f"benchmarks/results/reproduce/{s}/SUMMARY.md" for s in SEEDED)])
def test_every_link_and_image_of_the_reproduction_documents_exists(doc: str) -> None:
    md = ROOT / doc
    links = _links(md)
    assert links, f"{doc} links nothing"
    missing = [t for t in links if not (md.parent / t.split("#")[0]).exists()]
    assert not missing, f"{doc}: links to missing files {missing}"


@pytest.mark.parametrize("scale", SEEDED)
def test_a_seeded_runs_summary_is_what_its_json_gives(scale: str) -> None:
    results_dir, figures = RESULTS / scale, FIGURES / scale
    summary = results_dir / "SUMMARY.md"
    results = load_results(results_dir)
    want = summary_markdown(results, lambda n, f: os.path.relpath(figures / f, summary.parent),
                            "vitkit reproduce: the committed results")
    assert summary.read_text() == want, (f"benchmarks/results/reproduce/{scale}/SUMMARY.md is stale: run `vitkit "
                                         f"reproduce --redraw benchmarks/results/reproduce/{scale} --figures "
                                         f"docs/reproduction/{scale}`")
    for res in results.values():
        assert scale_label(res["scale"]) == scale  # every result of the folder ran at that --scale
        assert all((figures / f).is_file() for f in res["figures"])


def test_the_committed_summary_is_what_the_committed_json_gives() -> None:
    summary = RESULTS / "SUMMARY.md"
    want = summary_markdown(load_results(RESULTS), lambda n, f: os.path.relpath(FIGURES / f, summary.parent),
                            "vitkit reproduce: the committed results")
    assert summary.read_text() == want, ("benchmarks/results/reproduce/SUMMARY.md is stale: run `vitkit reproduce "
                                         "--redraw benchmarks/results/reproduce --figures docs/reproduction`")
    results = load_results(RESULTS)
    # the single-seed runs of 2026-11-23/24: experiments 8-10 (pooling, size, optim) ran only at the laptop scale
    assert set(results) == set(ORDER) - {"pooling", "size", "optim"}
    for n, res in results.items():  # every committed result has a verdict line and its figures, each file present
        assert f"| {n} | " in want
        assert all((FIGURES / f).is_file() for f in res["figures"])


def test_redraw_writes_figures_and_summary_from_json_alone(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = tmp_path / "json"
    src.mkdir()
    for n in ("hires", "mpp", "crossover"):
        (src / f"{n}.json").write_text((RESULTS / f"{n}.json").read_text())
    assert main(["reproduce", "--redraw", str(src), "--figures", str(tmp_path / "figs"), "--no-progress"]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "crossover_compute.png", "crossover_data.png", "hires.png", "mpp.png"]
    text = (src / "SUMMARY.md").read_text()
    assert "| mpp | not established (precondition not met: independent pre-training seeds); its parts read 1 of 2 " \
        "held, 1 failed |" in text and "![hires.png](../figs/hires.png)" in text
    assert main(["reproduce", "--redraw", str(tmp_path / "nothing")]) == 2
    assert "no experiment result" in capsys.readouterr().err
    assert main(["reproduce", "fig4", "--figures", str(tmp_path)]) == 2


def test_axes_start_at_zero_or_say_where_they_are_cut(tmp_path: Path) -> None:
    rows = [{"family": f, "images": n, "seed": s, "m": 0.8 + 0.01 * s + (0.05 if f == "ViT" else 0)}
            for f in ("ViT", "ResNet") for n in (1000, 10_000) for s in range(3)]
    fig, ax = plt.subplots()
    for fam in ("ViT", "ResNet"):
        est = plots._seed_groups([r for r in rows if r["family"] == fam], lambda r: r["images"], "m")
        plots._curve(ax, sorted(est), [est[x] for x in sorted(est)], fam)
    plots._finish_axis(ax, "images", "t")
    lo = ax.get_ylim()[0]
    assert lo > 0 and f"axis cut: starts at {lo:.0f}" in ax.get_ylabel()
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["ViT (95% CI, 3+ seeds)", "ResNet (95% CI, 3+ seeds)"]  # error bars drawn and named
    assert plots._short(2e12) == "2e12" and plots._short(20_000) == "20k" and plots._short(1e6) == "1M"
    plt.close(fig)
    one = [r for r in rows if r["seed"] == 0]
    fig, ax = plt.subplots()
    est = plots._seed_groups(one, lambda r: (r["family"], r["images"]), "m")
    plots._curve(ax, [1, 2], [est["ViT", 1000], est["ViT", 10_000]], "ViT")
    assert ax.get_legend_handles_labels()[1] == ["ViT (1 seed, no error bars)"] and not ax.containers
    plt.close(fig)


def test_bars_start_at_zero_and_draw_intervals_only_with_seeds(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    fig = _drawn(monkeypatch, lambda: plots.bars(["a", "b"], {"s": [mean_ci([0.9, 0.91, 0.92]), mean_ci([0.95])]},
                                                 "t", "acc", tmp_path / "b.png"), laid_out=False)["b.png"]
    ax = fig.axes[0]
    assert ax.get_ylim() == (0.0, 100.0)
    assert len(ax.containers) == 3  # two bars and one error bar: the one-seed bar has none
    assert "95% t-interval over 3 seeds" in ax.get_title()
    plt.close(fig)


def test_glyph_samples_fill_every_cell_or_refuse(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (60, 1, 8, 8), dtype=np.uint8)
    labels = np.repeat(np.arange(12), 5)
    labels[:3] = 99  # class 0 keeps 2 images: left out, the next full classes fill the columns
    plots.samples(images, labels, 10, 5, tmp_path / "s.png", "t")
    with pytest.raises(ValueError, match="only 11 classes have 5 images"):
        plots.samples(images, labels, 12, 5, tmp_path / "s.png", "t")


def _seeded(values: list[float]) -> dict:
    return {"values": values}


def _mpp_result(**extra) -> dict:  # noqa: ANN003
    ft = [0.5, 0.52, 0.54]
    return {"scale": "laptop", "scratch": _seeded(ft), "supervised": _seeded([0.9, 0.91, 0.89]),
            "mpp": {"100": _seeded([0.6, 0.63, 0.61])}, "equal_budget_scratch": {"100": {"steps": 250,
                                                                                        "top1": _seeded(ft)}},
            "masked_colour_test": {"100": 0.5}, "majority_colour": 0.37, "fewshot": {"supervised": 0.6, "mpp_100": 0.2},
            "markdown": "the run's old text", **extra}


def test_the_mpp_text_reads_the_scratch_runs_length_and_says_what_its_cells_are() -> None:
    from vitkit.reproduce.rules import verdict
    from vitkit.reproduce.summary import result_markdown

    res = _mpp_result()  # no scratch_steps kept: the scale's finetune_steps (150 at laptop scale)
    text = result_markdown("mpp", res)
    assert "from scratch (150 steps)" in text and "mean [95% CI] over fine-tuning seeds" in text
    assert "±" not in text.splitlines()[0]  # the header names the cells: intervals, not a std
    assert any("usual 150-step scratch run" in c for c in verdict("mpp", res)[1].context)
    kept = _mpp_result(scratch_steps=77)  # a run's own record wins
    assert "from scratch (77 steps)" in result_markdown("mpp", kept)
    assert any("usual 77-step scratch run" in c for c in verdict("mpp", kept)[1].context)


def test_fig7_and_crossover_texts_are_worded_by_the_data() -> None:
    from vitkit.reproduce.summary import result_markdown

    laptop = load_results(LAPTOP_RESULTS)
    fig7 = result_markdown("fig7", laptop["fig7"])
    n = len(laptop["fig7"]["embedding_filter_variance_top5"])
    assert f"the first {n} components" in fig7 and n == 4  # a 2x2 patch has 4
    assert "pre-training seed 0's model; the verdict reads all 3 seeds" in fig7
    assert "one pre-training seed" in result_markdown("fig7", load_results(RESULTS)["fig7"])
    res = laptop["crossover"]
    assert res["crossover_scale"]["scale"]["glyph_stream"] is False
    assert "40,000-image glyph set (drawn once and held)" in result_markdown("crossover", res)
    streamed = {**res, "crossover_scale": {**res["crossover_scale"],
                                           "scale": {**res["crossover_scale"]["scale"], "glyph_stream": True}}}
    assert "40,000-image glyph stream (drawn as loaded)" in result_markdown("crossover", streamed)


def test_intervals_past_100_are_clipped_and_the_figure_says_so(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    high, low = mean_ci([0.97, 0.99, 0.90]), mean_ci([0.6, 0.62, 0.64])
    assert high.hi > 1.0
    err, clipped = plots._yerr([high, low])
    assert clipped and abs(high.mean + err[1][0] / 100 - 1.0) < 1e-12 and abs(err[1][1] / 100 - (low.hi - low.mean)) < 1e-12
    assert not plots._yerr([low])[1]
    figs = _drawn(monkeypatch, lambda: [plots.bars(["a", "b"], {"s": [high, low]}, "t", "acc", tmp_path / "b.png"),
                                        plots.bars(["b"], {"s": [low]}, "t", "acc", tmp_path / "c.png")],
                 laid_out=False)
    assert plots.CLIP_NOTE in [t.get_text() for t in figs["b.png"].texts]
    # value labels never sit on an error bar: beyond the interval (or the seeds), or beside it
    labels = [(t.get_text(), t.xy) for a in figs["b.png"].axes for t in a.texts]
    for (text, (x, y)), e, xc in zip(labels, (high, low), (0, 1)):
        assert text == f"{100 * e.mean:.1f}"
        assert y >= 100 * max(min(e.hi, 1), *e.values) or y <= 100 * min(e.lo, *e.values) or x != xc
    assert plots.CLIP_NOTE not in [t.get_text() for t in figs["c.png"].texts]
    for fig in figs.values():
        plt.close(fig)


def test_posemb_draws_the_rules_differences_with_its_equivalence_band() -> None:
    res = load_results(LAPTOP_RESULTS)["posemb"]
    diffs, bands = plots.rule_differences("posemb", res, {"2d_same": "2-D − 1-D"})
    assert bands == {"2-D − 1-D": 0.02, "relative − learned 1-D": 0.02}  # the rule's ±2 points, equivalence parts only
    assert diffs["2-D − 1-D"].n == 3 and diffs["none − learned 1-D"].mean < 0


def _drawn(monkeypatch, draw, laid_out: bool = True) -> dict:  # noqa: ANN001
    """Run `draw` with plots._save wrapped and figures left open: each figure as laid out by `plots._save` (its
    legends placed, tight_layout) and drawn, by file name; no PNG encoded (`figures_drawn_not_encoded`: these tests
    read the figure's artists; test_redraw_writes_figures_and_summary_from_json_alone writes the files).
    `laid_out=False` for a test that reads what is drawn (data, texts, fixed ticks), not where: tight_layout skipped."""
    seen = {}
    real = plots._save

    def keep(fig, path):  # noqa: ANN001, ANN202
        name = real(fig, path)
        seen[name] = fig
        return name

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: None)
    figures_drawn_not_encoded(monkeypatch, laid_out)
    draw()
    monkeypatch.undo()
    return seen


def test_legends_cover_no_data_and_no_labels_and_shared_sizes_are_dodged(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    results = load_results(LAPTOP_RESULTS)
    figs = _drawn(monkeypatch, lambda: [plots.draw(n, results[n], tmp_path) for n in ("fig4", "pooling", "crossover")])
    assert {"fig4_data_size.png", "pooling.png", "crossover_data.png", "crossover_compute.png"} <= set(figs)
    for name, fig in figs.items():
        r = fig.canvas.get_renderer()
        legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
        assert legends, name
        obstacles = [a.bbox for a in fig.axes] + [
            t.get_window_extent(r) for a in fig.axes for t in [*a.get_xticklabels(), a.xaxis.label] if t.get_text()]
        for leg in legends:  # 2 px apart at least: a legend neither covers data nor touches a label
            box = leg.get_window_extent(r).padded(2)
            assert not any(box.overlaps(o) for o in obstacles), (name, [t.get_text() for t in leg.get_texts()])
    assert "untrained network" in " ".join(t.get_text() for t in figs["fig4_data_size.png"].legends[0].get_texts())
    # crossover_data: the six series share their data sizes; each is drawn at its own x, the ticks at the true sizes
    ax = figs["crossover_data.png"].axes[0]
    sizes = {float(r["images"]) for r in plots.crossover_rows(results["crossover"])}
    drawn = [tuple(c.lines[0].get_xdata()) for c in ax.containers]  # each series' line of means (error bars: seeds)
    assert len(drawn) == 6 and len({xs[-1] for xs in drawn}) == 6  # six at the largest size, each at its own x
    ticks = {float(t) for t in ax.xaxis.get_majorticklocs()} | {float(t) for t in ax.xaxis.get_minorticklocs()}
    assert ticks == sizes
    assert all(min(abs(np.log10(x / t)) for t in sizes) < 0.1 for xs in drawn for x in xs)  # beside its true size
    assert "dodged" in ax.get_xlabel()
    for fig in figs.values():
        plt.close(fig)


def test_the_documents_name_a_scale_as_the_command_line_does() -> None:
    """`--scale long` runs the Scale named "full" (the name its folders and JSON carry); SUMMARY.md says "long"."""
    for option, name in SCALE_OPTIONS.items():
        assert name in SCALES and option in CROSSOVER_SCALES and scale_label(name) == option == scale_label(option)
    text = (RESULTS / "SUMMARY.md").read_text()
    assert "Result (long scale)" in text and "full scale" not in text



def test_single_seed_figures_say_their_error_bars_are_not_replicates(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The single-seed hires and MPP runs fine-tuned one pre-trained model with 3 seeds: their figures say so; the
    seeded laptop run's (pre-training seed i fine-tuned with seed i) do not."""
    import json

    titles: list[str] = []

    def keep(fig, path: Path) -> str:  # noqa: ANN001
        titles.append(" ".join(ax.get_title() for ax in fig.axes))
        plt.close(fig)
        return path.name

    monkeypatch.setattr(plots, "_save", keep)
    for name in ("hires", "mpp"):
        for folder in (RESULTS, LAPTOP_RESULTS):
            plots.draw(name, json.loads((folder / f"{name}.json").read_text()), tmp_path)
    assert ["NOT ESTABLISHED" in t for t in titles] == [True, False, True, False]


def _panel(ax) -> list[tuple[float, float, float]]:  # noqa: ANN001
    """A difference panel's drawn points in drawing order: (mean, interval's low end, high end), as plotted."""
    means = [float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_marker() == "o"]
    ends = [sorted(float(y) for y in c.lines[2][0].get_segments()[0][:, 1]) for c in ax.containers]
    assert len(means) == len(ends), "a difference drawn without its interval"
    return [(m, lo, hi) for m, (lo, hi) in zip(means, ends)]


def _as_drawn(est, scale: float = 100.0) -> tuple[float, float, float]:  # noqa: ANN001
    return pytest.approx((scale * est.mean, scale * est.lo, scale * est.hi))


def _compute_result() -> dict:
    """A made-up Fig. 5 result: three families at two sizes, three seeds each, a seed-dependent spread."""
    flops = {("ViT", "S"): 1.0, ("ViT", "B"): 4.0, ("ResNet", "S"): 1.5, ("ResNet", "B"): 3.0,
             ("Hybrid", "S"): 2.0, ("Hybrid", "B"): 4.0}
    acc = {("ViT", "S"): 0.60, ("ViT", "B"): 0.70, ("ResNet", "S"): 0.60, ("ResNet", "B"): 0.62,
           ("Hybrid", "S"): 0.70, ("Hybrid", "B"): 0.72}
    jitter = (0.0, 0.013, -0.007)
    return {"rows": [{"family": f, "size": s, "seed": seed, "train_flops": x * 1e12,
                      "avg_5shot": acc[f, s] + 0.01 * seed + (jitter[seed] if f == "Hybrid" else 0.0),
                      "finetune_top1": 0.9 + 0.01 * seed} for (f, s), x in flops.items() for seed in range(3)]}


def test_the_compute_figure_draws_the_parts_its_rule_judges_where_it_reads_them(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from vitkit.reproduce.rules import fig5_points, verdict

    res = _compute_result()
    fig = _drawn(monkeypatch, lambda: plots.draw("fig5", res, tmp_path), laid_out=False)["fig5_compute.png"]
    _, ev, _ = verdict("fig5", res)
    panel = fig.axes[2]
    assert _panel(panel) == [_as_drawn(ev.parts[k]) for k in ("vit_vs_resnet", "hybrid_vs_vit_small",
                                                                "hybrid_gap_closes")]
    assert panel.get_ylabel() == "difference (points)" and "the rule's parts" in panel.get_title()
    assert [t.get_text().split("\n")[0] for t in panel.get_xticklabels()] == [
        "ViT − ResNet", "Hybrid − ViT", "(Hybrid − ViT)"]
    # the FLOPs the rule reads are marked on its metric's panel: a line at each, a hollow diamond on each curve read
    at = fig5_points(res["rows"])
    diamonds = [line for line in fig.axes[1].get_lines() if line.get_marker() == "D"]
    assert sorted({float(d.get_xdata()[0]) for d in diamonds}) == pytest.approx(sorted({at["mid"], at["lo_h"],
                                                                                       at["hi_h"]}))
    vit_at_mid = [float(d.get_ydata()[0]) for d in diamonds if d.get_xdata()[0] == at["mid"]]
    assert vit_at_mid[0] - vit_at_mid[1] == pytest.approx(100 * ev.parts["vit_vs_resnet"].mean)  # ViT, then ResNet
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    plt.close(fig)


def test_the_compute_figures_size_labels_do_not_overprint(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """ResNet-B and Hybrid-S share one FLOPs value in the long run: their labels must not overlap, nor any others."""
    for scale in SEEDED:
        res = load_results(RESULTS / scale)["fig5"]
        fig = _drawn(monkeypatch, lambda: plots.draw("fig5", res, tmp_path))["fig5_compute.png"]  # noqa: B023
        r = fig.canvas.get_renderer()
        for ax in fig.axes[:2]:
            boxes = [(t.get_text(), t.get_window_extent(r)) for t in ax.texts]
            assert len(boxes) == len(res["rows"]) // 3  # one label per family and size
            for i, (a, box) in enumerate(boxes):
                assert not any(box.overlaps(other) for _, other in boxes[i + 1:]), (scale, a)
        plt.close(fig)


def test_the_mpp_figure_draws_the_parts_its_rule_judges_and_the_usual_scratch_run_hollow(tmp_path: Path,
                                                                                           monkeypatch) -> None:  # noqa: ANN001
    from vitkit.reproduce.rules import verdict

    res = _mpp_result(scratch=_seeded([0.5, 0.58, 0.53]), supervised=_seeded([0.9, 0.95, 0.89]))
    fig = _drawn(monkeypatch, lambda: plots.draw("mpp", res, tmp_path), laid_out=False)["mpp.png"]
    _, ev, _ = verdict("mpp", res)
    panel = fig.axes[1]
    want = [ev.parts["beats_scratch"], ev.parts["behind_supervised"], ev.extra["usual_scratch"]]
    assert _panel(panel) == [_as_drawn(e) for e in want]
    faces = [line.get_markerfacecolor() for line in panel.get_lines() if line.get_marker() == "o"]
    assert faces[0] == faces[1] != faces[2] and faces[2] in ("white", (1.0, 1.0, 1.0, 1.0))  # not judged: hollow
    assert "not\njudged" in panel.get_xticklabels()[2].get_text() and panel.get_ylabel() == "difference (points)"
    assert "at 100 MPP steps" in panel.get_title()
    plt.close(fig)


def _fig7_seed(seed: int, rowcol: float, slope: float, first: tuple[float, float]) -> dict:
    layers = [8.0 + slope * i for i in range(4)]
    return {"model": f"vit-L_n100_steps4_lr0.012_seed{seed}", "posemb_same_row_or_column_minus_other": rowcol,
            "attention_distance_per_layer": layers, "attention_distance_per_head": [[x - 0.1, x + 0.1] for x in layers],
            "attention_distance_slope_per_layer": slope, "first_layer_head_range": list(first),
            "uniform_attention_distance": 8.2, "max_distance": 20.0}


def test_fig7_draws_its_rules_parts_from_the_json_at_every_scale(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from vitkit.reproduce.rules import RULES, verdict

    per_seed = [_fig7_seed(0, 0.3, 0.1, (7.9, 8.1)), _fig7_seed(1, 0.25, 0.2, (7.8, 8.6)),
                _fig7_seed(2, 0.33, 0.05, (7.7, 8.3))]
    res = {**per_seed[0], "per_seed": per_seed, "figures": ["fig7_attention_distance.png"]}
    returned = []
    figs = _drawn(monkeypatch, lambda: returned.append(plots.draw("fig7", res, tmp_path)), laid_out=False)
    assert returned[0] == plots.figure_files("fig7", res) == ["fig7_attention_distance.png", plots.FIG7_MEASURES]
    fig = figs[plots.FIG7_MEASURES]
    _, ev, _ = verdict("fig7", res)
    for ax, part in zip(fig.axes[1:], RULES["fig7"].parts):
        assert _panel(ax) == [_as_drawn(ev.parts[part.key], part.scale)]
        assert ax.get_ylabel() == plots.FIG7_UNITS[part.key] and part.key in ax.get_title()
    lines = [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    assert [list(line.get_ydata()) for line in lines] == [s["attention_distance_per_layer"] for s in per_seed]
    assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    plt.close(fig)
    # both committed scales draw it (the figure SUMMARY.md links), from their JSON alone
    for scale in SEEDED:
        fig7 = load_results(RESULTS / scale)["fig7"]
        assert plots.FIG7_MEASURES in plots.figure_files("fig7", fig7)
        assert (FIGURES / scale / plots.FIG7_MEASURES).is_file()


@pytest.mark.parametrize("name", ["pooling", "optim", "hires", "posemb"])
def test_bar_figures_draw_the_differences_their_rule_judges(name: str, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The committed laptop run's bar figures: the difference panel's judged points are the rule's parts, number
    for number and in the rule's order; a comparison beside the verdict (the glyph test) is drawn hollow after them."""
    from vitkit.reproduce.rules import RULES, verdict

    res = load_results(LAPTOP_RESULTS)[name]
    fig = _drawn(monkeypatch, lambda: plots.draw(name, res, tmp_path), laid_out=False)[f"{name}.png"]
    _, ev, _ = verdict(name, res)
    drawn = _panel(fig.axes[1])
    parts = [ev.parts[p.key] for p in RULES[name].parts]
    assert drawn[:len(parts)] == [_as_drawn(e) for e in parts]
    faces = [line.get_markerfacecolor() for line in fig.axes[1].get_lines() if line.get_marker() == "o"]
    assert len(drawn) == len(parts) + (name in ("pooling", "optim"))
    assert all(f not in ("white", (1.0, 1.0, 1.0, 1.0)) for f in faces[:len(parts)])
    assert all(f in ("white", (1.0, 1.0, 1.0, 1.0)) for f in faces[len(parts):])
    assert fig.axes[1].get_ylabel() == "difference (points)"
    plt.close(fig)


@pytest.mark.parametrize(("name", "drawer"), [("fig4", "data_size"), ("crossover", "crossover_compute"),
                                              ("size", "model_size")])
def test_data_size_figures_draw_every_part_their_rule_judges(name: str, drawer: str, tmp_path: Path,
                                                             monkeypatch) -> None:  # noqa: ANN001
    """Experiments 1, 7 and 9 (committed laptop run): beside the gap at each data size, a panel of the rule's parts
    number for number in the rule's order, the ones a data-size curve cannot show included (the gap's change with
    data, the crossover's matched-FLOPs part, the ViTs' difference in gains); the parts added after the results were
    read say so on their tick."""
    from vitkit.reproduce.rules import RULES, verdict

    res = load_results(LAPTOP_RESULTS)[name]
    fig = _drawn(monkeypatch, lambda: getattr(plots, drawer)(res, tmp_path / "f.png"), laid_out=False)["f.png"]
    _, ev, _ = verdict(name, res)
    (panel,) = [ax for ax in fig.axes if ax.get_title().startswith("the rule's parts")]
    parts = RULES[name].parts
    assert _panel(panel) == [_as_drawn(ev.parts[p.key]) for p in parts]
    ticks = [t.get_text() for t in panel.get_xticklabels()]
    assert [f"(claimed {p.inequality()})" in t for p, t in zip(parts, ticks)] == [True] * len(parts)
    assert ["post hoc" in t for t in ticks] == [bool(p.added) for p in parts]
    faces = [line.get_markerfacecolor() for line in panel.get_lines() if line.get_marker() == "o"]
    assert all(f not in ("white", (1.0, 1.0, 1.0, 1.0)) for f in faces)  # every part judged: filled
    assert panel.get_ylabel() == "difference (points)"
    plt.close(fig)
