"""Re-run the paper's findings at laptop scale: pre-training on a procedurally drawn glyph set (up to 10^5
images, nothing downloaded), transfer to real images no run trains on (scikit-learn's digits, scikit-image's
lfw_subset), ViT vs ResNet (BiT) vs hybrid.

Experiments: fig4 (pre-training data size, Fig. 3-4), fig5 (pre-training compute, Fig. 5), fig7 (what the
ViT learns, Fig. 7), hires (fine-tuning at 2x the resolution, §3.2), posemb (position-embedding variants,
appendix D.4), mpp (masked patch prediction, §4.6), pooling (class token vs global average pooling, appendix
D.3), crossover (where the ViT overtakes the ResNet as
data and compute grow: nested subsets of a 10^6-image glyph stream at several schedule lengths). Each writes
<out>/<name>/result.json and PNG plots; <out>/SUMMARY.md collects the tables. A killed run continues where it
stopped when started again with the same --out. REPRODUCTION.md discusses the full-scale results.
"""

from __future__ import annotations

import argparse

from vitkit.reproduce.plan import CROSSOVER_SCALE_NAMES, EXPERIMENT_NAMES

NAMES = EXPERIMENT_NAMES  # the library's experiments, in its order
HELP = f"re-run the paper's experiments at laptop scale ({' '.join(NAMES)}, or --all)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=f"one or more of {', '.join(NAMES)}")
    p.add_argument("--all", action="store_true", help="run every experiment (hours on 2 CPU cores with the full "
                   "scale's 3 seeds)")
    p.add_argument("--out", default="runs/reproduce", help="output folder; an interrupted run resumes from it "
                   "(default: runs/reproduce, runs/reproduce-smoke with --smoke)")
    p.add_argument("--smoke", action="store_true", help="a small version that checks the plumbing, not the "
                   "findings (tiny data, a few steps; over a minute for fig4 on 2 cores)")
    p.add_argument("--scale", choices=[s for s in CROSSOVER_SCALE_NAMES if s != "smoke"], default="laptop",
                   help="the crossover's grid: laptop (1,000 and 4,000 steps on 4 data sizes up to 10^6 images, one "
                   "seed) or long (laptop's runs, 12,000 steps on the two largest sizes, 3 seeds everywhere, every "
                   "schedule's learning rate tuned on a bracketed grid; several hours on 2 cores)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (every run; a folder holds runs of one kind)")
    p.add_argument("--jobs", type=int, default=1, help="crossover pre-training runs at once, in worker processes "
                   "(small models leave a GPU or several cores idle)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--redraw", metavar="JSON_DIR", default=None, help="train nothing: redraw the figures and "
                   "SUMMARY.md from the result JSON in JSON_DIR (e.g. benchmarks/results/reproduce)")
    p.add_argument("--figures", metavar="DIR", default=None, help="with --redraw: where the figures go "
                   "(default: JSON_DIR)")


def run(args: argparse.Namespace) -> int:

    from vitkit.reproduce import CROSSOVER_SCALES, SCALES, redraw, run_experiments

    if args.redraw is not None:
        if args.experiments or args.all:
            raise ValueError("--redraw trains nothing: give it no experiment names and no --all")
        for name, figs in redraw(args.redraw, args.figures).items():
            print(f"{name}: " + ", ".join(figs))
        print(f"summary: {args.redraw}/SUMMARY.md")
        return 0
    if args.figures is not None:
        raise ValueError("--figures goes with --redraw")
    names = list(NAMES) if args.all else list(dict.fromkeys(args.experiments))
    if not names:  # say the exact command: one smoke experiment takes over a minute on 2 cores, so no default
        flags = " --smoke" if args.smoke else ""
        raise ValueError(f"name the experiments to run ({', '.join(NAMES)}), e.g. `vitkit reproduce{flags} "
                         f"{NAMES[0]}`, or run them all with `vitkit reproduce --all{flags}`")
    if args.all and args.experiments:
        raise ValueError("give experiment names or --all, not both")
    if args.smoke and args.scale != "laptop":
        raise ValueError("--smoke and --scale are two sizes: give one")
    from vitkit import distributed as dist
    from vitkit.utils.hardware import set_threads

    dist.check_device(args.device)
    set_threads(args.threads)
    scale = SCALES["smoke" if args.smoke else "full"]
    crossover = CROSSOVER_SCALES["smoke" if args.smoke else args.scale]
    out = args.out if args.out != "runs/reproduce" or not args.smoke else "runs/reproduce-smoke"
    results = run_experiments(names, out, scale, progress=not args.no_progress, crossover=crossover,
                              device=args.device, jobs=args.jobs)
    for name, res in results.items():
        print(f"{name}: {out}/{name}/result.json, " + ", ".join(f"{out}/{name}/{f}" for f in res["figures"]))
    print(f"summary: {out}/SUMMARY.md")
    return 0
