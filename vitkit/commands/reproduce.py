"""Re-run the paper's findings at laptop scale: pre-training on a procedurally drawn glyph set (nothing
downloaded), transfer to real images no run trains on (scikit-learn's digits, scikit-image's lfw_subset), ViT vs
ResNet (BiT) vs hybrid.

Experiments: fig4 (pre-training data size, Fig. 3-4), size (model size x data, Fig. 3), fig5 (pre-training
compute, hybrids included, Fig. 5), fig7 (what the ViT learns, Fig. 7), hires (fine-tuning at twice the resolution,
§3.2), posemb (position-embedding variants, appendix D.4), mpp (masked patch prediction, §4.6), pooling (class
token vs global average pooling, appendix D.3), optim (Adam vs SGD for the ResNet, appendix D.1), crossover (where
the ViT overtakes the ResNet as data and compute grow, at matched steps and matched FLOPs). Each writes
<out>/<name>/result.json and PNG plots drawn from it; <out>/SUMMARY.md (rules, tables, verdicts) is rewritten by
every run. A killed run continues where it stopped when started again with the same --out; Ctrl-C or SIGTERM
stops the worker processes of --jobs with it (a unit being trained resumes from its last checkpoint). REPRODUCTION.md
discusses the results.
"""

from __future__ import annotations

import argparse

from vitkit.reproduce.plan import CROSSOVER_SCALE_NAMES, EXPERIMENT_NAMES, SCALE_OPTIONS

NAMES = EXPERIMENT_NAMES  # the library's experiments, in its order
HELP = f"re-run the paper's experiments at laptop scale ({' '.join(NAMES)}, or --all)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=f"one or more of {', '.join(NAMES)}")
    p.add_argument("--all", action="store_true", help="run every experiment (laptop scale, 3 seeds at every point a "
                   "verdict reads; run times: REPRODUCTION.md)")
    p.add_argument("--out", default="runs/reproduce", help="output folder; an interrupted run resumes from it "
                   "(default: runs/reproduce, runs/reproduce-smoke with --smoke)")
    p.add_argument("--smoke", action="store_true", help="a small version that checks the plumbing, not the "
                   "findings (tiny models, 4 steps, 1,000 images: seconds per experiment)")
    p.add_argument("--scale", choices=[s for s in CROSSOVER_SCALE_NAMES if s != "smoke"], default="laptop",
                   help="laptop (default: 20,000 images, 500 steps; the crossover on up to 40,000 images at 300, "
                   "600 and 1,200 steps; 3 seeds everywhere, every learning rate a verdict needs tuned on a bracketed "
                   "grid) or long (100,000 images, 1,000 steps, ViT-L at full width; the crossover on a 10^6-image "
                   "stream at 1,000 to 12,000 steps; run times: REPRODUCTION.md)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (every run; a folder holds runs of one kind)")
    p.add_argument("--jobs", type=int, default=1, help="training runs at once, in worker processes: the rate "
                   "sweeps' rounds, the planned pre-training runs and fine-tunes, and the crossover's (small models "
                   "leave a GPU or several cores idle); every run trains with cores // jobs threads")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--redraw", metavar="JSON_DIR", default=None, help="train nothing: redraw the figures from "
                   "the result JSON in JSON_DIR (e.g. benchmarks/results/reproduce) and rewrite JSON_DIR/SUMMARY.md "
                   "with links to them")
    p.add_argument("--figures", metavar="DIR", default=None, help="with --redraw: where the figures go "
                   "(default: JSON_DIR; the repository's are in docs/reproduction); SUMMARY.md links there")


def run(args: argparse.Namespace) -> int:

    from vitkit.reproduce import redraw

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
    if not names:  # say the exact command: no default (even the laptop scale is many minutes)
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
    if args.threads is not None:  # NumPy's BLAS too (the few-shot solves): spinning BLAS threads on a busy machine
        from threadpoolctl import threadpool_limits

        with threadpool_limits(args.threads):
            return _run(args, names)
    return _run(args, names)


def _run(args: argparse.Namespace, names: list[str]) -> int:
    from vitkit.reproduce import CROSSOVER_SCALES, SCALES, run_experiments

    scale = SCALES[SCALE_OPTIONS["smoke" if args.smoke else args.scale]]
    crossover = CROSSOVER_SCALES["smoke" if args.smoke else args.scale]
    out = args.out if args.out != "runs/reproduce" or not args.smoke else "runs/reproduce-smoke"
    results = run_experiments(names, out, scale, progress=not args.no_progress, crossover=crossover,
                              device=args.device, jobs=args.jobs)
    for name, res in results.items():
        print(f"{name}: {out}/{name}/result.json, " + ", ".join(f"{out}/{name}/{f}" for f in res["figures"]))
    print(f"summary: {out}/SUMMARY.md")
    return 0
