"""Classify images with a saved model: the top-k classes with probabilities, for files, folders and lists.

Inputs are image files, folders (searched recursively for images) and list files (`.txt` / `.lst`: one
image path per line, relative to the list; anything after the path, such as a label, is ignored). They
are streamed in batches through the model's own preprocessing (stored with the checkpoint, so no flags
are needed to match training), with a progress bar. Any PIL-readable file in any mode works; an
unreadable file is named and skipped, the others still run, and the exit code is 1. `--output` writes a
CSV or JSONL table (path, top-k labels, probabilities). `--precision auto` runs bf16 only where the
hardware multiplies bf16 natively; `--runtime auto` runs the fastest installed CPU runtime for that
precision (`vitkit.runtime`); both say what they chose.
"""

from __future__ import annotations

import argparse
import sys

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.commands._runtime_args import add_runtime_arguments, predictor_for

HELP = "top-k predictions for image files, folders and list files (batched; CSV / JSONL output)"
LIST_SUFFIXES = (".txt", ".lst")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("images", nargs="+", help="image files, folders of images, or .txt / .lst lists of image paths")
    p.add_argument("--model", required=True, help="checkpoint (any format vitkit reads)")
    p.add_argument("--topk", type=int, default=5, help="how many classes to report per image (default: 5)")
    p.add_argument("--output", default=None,
                   help="also write the predictions to this .csv or .jsonl file (path, labels, probabilities)")
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    p.add_argument("--workers", type=int, default=0, help="image-decoding processes (default: 0, in-process)")
    add_runtime_arguments(p, default_runtime="auto", default_precision="auto")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--max-pixels", type=int, default=None,
                   help="skip images with more pixels than this as unreadable (default: Pillow's 179M limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_load_arguments(p)


def expand_inputs(items: list[str]) -> list[str]:
    """Image paths in the order given: files as they are, folders searched recursively (sorted), lists read."""
    from pathlib import Path

    from vitkit.data.folders import IMAGE_EXTENSIONS

    out: list[str] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS)
            if not found:
                raise ValueError(f"{p}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) in this folder")
            out += found
        elif p.is_file() and p.suffix.lower() in LIST_SUFFIXES:
            for line in p.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    f = Path(line.split()[0])
                    out.append(str(f if f.is_absolute() else p.parent / f))
        else:
            out.append(item)  # a file (an unreadable or missing one is named and skipped later)
    return out


def run(args: argparse.Namespace) -> int:
    import csv
    import json

    from tqdm.auto import tqdm

    from vitkit.data.base import FileDataset
    from vitkit.data.preprocess import max_image_pixels
    from vitkit.distributed import check_device
    from vitkit.evaluate import check_finite, eval_loader
    from vitkit.formats import load_pretrained
    from vitkit.utils import check_int

    check_int("--topk", args.topk)
    check_int("--batch-size", args.batch_size)
    check_int("--workers", args.workers, low=0)
    check_device(args.device)
    max_image_pixels(args.max_pixels)  # --max-pixels 0 or a bad $VITKIT_MAX_IMAGE_PIXELS: refused before any work
    if args.output and not args.output.endswith((".csv", ".jsonl")):
        raise ValueError(f"--output {args.output}: write a .csv or a .jsonl file")
    model = load_pretrained(args.model, **load_hints(args))
    if model.config.num_classes == 0:
        raise ValueError(f"{args.model} has no classifier head (num_classes=0): it gives features, not classes; "
                         "use `vitkit fewshot` to evaluate its features, or fine-tune it with `vitkit finetune`")
    pp = model.preprocess
    k = min(args.topk, model.config.num_classes)
    if k < args.topk:
        print(f"note: {args.model} predicts {k} classes; showing {k}", file=sys.stderr)
    paths = expand_inputs(args.images)
    ds = FileDataset(paths, [0] * len(paths), [""], model.config.in_chans, args.max_pixels)
    loader = eval_loader(ds, pp, args.batch_size, args.workers)
    net = predictor_for(model, args, n_images=len(paths))
    rows, failed = [], []
    show = not args.no_progress and len(paths) > args.batch_size
    bar = tqdm(total=len(paths), desc="predict", unit="img", disable=not show, file=sys.stderr)
    for b in loader.iterate(0, len(loader)):
        for msg in b.skipped:
            print(f"skipped: {msg}", file=sys.stderr)
        failed += b.skipped
        readable = [paths[j] for j in b.indices]
        if len(b.y):
            probs = check_finite(net(b.x).float(), "logits").softmax(-1).cpu()
            top = probs.topk(k)
            for name, ps, ix in zip(readable, top.values.tolist(), top.indices.tolist()):
                labels = [pp.labels[i] if i < len(pp.labels) else str(i) for i in ix]
                rows.append({"path": name, "labels": labels, "probs": [round(p, 6) for p in ps]})
                if not args.output:
                    print(f"{name}: " + ", ".join(f"{lab} ({100 * p:.1f}%)" for lab, p in zip(labels, ps)))
        bar.update(len(b.indices) + len(b.skipped))
    bar.close()
    if args.output:
        from vitkit.utils.atomic import atomic_path

        with atomic_path(args.output) as tmp, open(tmp, "w", newline="") as f:
            if args.output.endswith(".jsonl"):
                f.writelines(json.dumps(r) + "\n" for r in rows)
            else:
                w = csv.writer(f)
                w.writerow(["path"] + [c for i in range(1, k + 1) for c in (f"label_{i}", f"prob_{i}")])
                for r in rows:
                    w.writerow([r["path"]] + [v for lab, p in zip(r["labels"], r["probs"]) for v in (lab, p)])
        print(f"wrote {len(rows)} predictions to {args.output}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(paths)} images could not be read", file=sys.stderr)
    return 1 if failed else 0
