"""Export a checkpoint for deployment (dynamic batch axis): ONNX (optionally int8, dynamic quantisation),
OpenVINO IR, or a `torch.export` + AOTInductor package; check each against PyTorch and time it beside."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.commands._merge_args import add_merge_argument, apply_merge
from vitkit.commands._runtime_args import add_int8_arguments
from vitkit.inference.backends import EXPORT_SUFFIXES, FORMATS
from vitkit.inference.export import DEFAULT_OPSET
from vitkit.utils.options import EXPORT_PRECISIONS, add_img_size_argument, precision_help

HELP = "export a model to ONNX (optional int8), OpenVINO IR or an AOTInductor package, checked against PyTorch"
SUFFIX = EXPORT_SUFFIXES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="checkpoint path (any format vitkit reads) or a registry name (random weights)")
    p.add_argument("--format", choices=list(FORMATS), default="onnx",
                   help="; ".join(f"{n} ({b.suffix}, run by {b.name}): {b.description}" for n, b in FORMATS.items())
                   + " (default: onnx)")
    p.add_argument("--out", type=Path, default=None,
                   help="output file (default: model.onnx / model.xml / model.pt2 next to the checkpoint)")
    add_img_size_argument(p, "export at this resolution (E_pos resampled)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                   help=f"ONNX opset version (default: {DEFAULT_OPSET}, which fuses the tanh GELU; SDPA needs >= 14)")
    p.add_argument("--precision", choices=EXPORT_PRECISIONS, default=None,
                   help=precision_help(EXPORT_PRECISIONS, "fp32") + "; the fp32 file is always written, int8 "
                   "beside it: onnx as <out>.int8.onnx (dynamic quantisation, or static with --calibrate), openvino "
                   "as <out>.int8.xml + .bin (NNCF, calibrated: needs --calibrate)")
    p.add_argument("--int8", action="store_true", help="deprecated: --precision int8")
    p.add_argument("--overwrite", action="store_true", help="replace files an earlier export wrote at --out")
    p.add_argument("--calibrate", nargs="+", default=None, metavar="PATH",
                   help="with --precision int8: static quantisation calibrated on these images of your own (files, "
                   "folders, lists; a few hundred, at most 512 read) instead of dynamic quantisation")
    add_int8_arguments(p)
    p.add_argument("--no-check", action="store_true", help="skip the parity check against PyTorch")
    p.add_argument("--bench", action="store_true", help="time PyTorch and the exported files side by side")
    p.add_argument("--batch", type=int, default=8, help="batch size of the --bench timing (default: 8)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats of --bench, interleaved (default: 7)")
    p.add_argument("--eval-digits", action="store_true", help="accuracy of every export on the digits test split")
    add_load_arguments(p)
    add_merge_argument(p)


def export_int8(precision: str | None, int8_flag: bool) -> bool:
    """Whether to write the int8 file: `--precision int8`, or the deprecated `--int8` (said once, by name)."""
    if int8_flag:
        warnings.warn("--int8 is deprecated: write --precision int8", FutureWarning, stacklevel=2)
        if precision not in (None, "int8"):
            raise ValueError(f"--int8 disagrees with --precision {precision}; --int8 is deprecated: keep --precision")
    return precision == "int8" or int8_flag


def _load(source: str, hints: dict):  # noqa: ANN202
    import torch

    import vitkit
    from vitkit.formats.hub import is_hub_id

    if Path(source).exists() or is_hub_id(source):  # a hub id: fetched through huggingface_hub's cache
        return vitkit.load_pretrained(source, **hints), Path(source)
    if source.lower() in vitkit.list_models() or vitkit.models.registry.canonical_name(source) in vitkit.list_models():
        print(f"note: {source} is a registry name: exporting random weights (random head, not the zero init)")
        model = vitkit.create_model(source)
        torch.nn.init.normal_(model.head.weight, std=0.02)  # a zero head would make every check trivially pass
        return model, Path(".")
    raise FileNotFoundError(f"{source}: neither a checkpoint nor a registered model name")


def run(args: argparse.Namespace) -> int:
    from vitkit.bench.exported import bench_exports
    from vitkit.bench.timing import MAX_BATCH, MAX_REPEATS
    from vitkit.inference.backends import (
        check_export,
        check_parity,
        export_model,
        output_paths,
        refuse_overwriting_inputs,
    )
    from vitkit.utils import check_int

    args.int8 = export_int8(args.precision, args.int8)
    check_export(args.format, args.int8, bool(args.calibrate))
    # --bench's input batch and its repeats, before any work: 10^6 images asked the allocator for 12 GB ("enforce fail
    # at alloc_cpu.cpp")
    check_int("--batch", args.batch, low=1, high=MAX_BATCH)
    if args.bench:
        check_int("--repeats", args.repeats, low=3, high=MAX_REPEATS)
    if args.format == "onnx":  # before torch's exporter, whose own message is about its internals
        import onnx

        top = onnx.defs.onnx_opset_version()
        if not 14 <= args.opset <= top:
            raise ValueError(f"--opset {args.opset}: vitkit's ONNX export needs opset 14 (attention) to {top} (the "
                             "newest this onnx knows)")
    if args.calibrate and not args.int8:
        raise ValueError("--calibrate calibrates the int8 quantisation: add --precision int8")
    from vitkit.inference.mixed import check_keep_float, parse_keep_float

    keep = parse_keep_float(args.int8_keep_float)
    check_keep_float(keep, "int8" if args.int8 else (args.precision or "fp32"), bool(args.calibrate))
    from vitkit.inference.export import check_int8_grid

    check_int8_grid(args.int8_grid, "int8" if args.int8 else (args.precision or "fp32"), bool(args.calibrate),
                    "openvino" if args.format == "openvino" else None)
    from vitkit.formats.hub import is_hub_id

    src = Path(args.source)
    if args.out is None and not src.exists() and is_hub_id(args.source):
        raise ValueError(f"{args.source}: a hub id has no folder of yours to write next to (its snapshot is in the "
                         "Hugging Face cache): give --out")
    out = args.out or ((src if src.is_dir() else src.parent) / f"model{SUFFIX[args.format]}")
    if out.suffix != SUFFIX[args.format]:
        raise ValueError(f"--out {out}: a {args.format} export is a {SUFFIX[args.format]} file")
    refuse_overwriting_inputs(output_paths(args.format, out, args.int8), src if src.exists() else None)
    taken = [p for p in output_paths(args.format, out, args.int8) if p.exists() or p.is_symlink()]
    if taken and (not args.overwrite or taken[0].is_dir()):  # the rule of every writer: never silently replaced
        raise FileExistsError(f"{taken[0]} already exists{' (a folder)' if taken[0].is_dir() else ''}; choose "
                              f"another --out{'' if taken[0].is_dir() else ', or --overwrite'}")
    model, src = _load(args.source, load_hints(args))
    model = model.float().eval()
    if args.img_size:
        model.set_img_size(args.img_size)
    apply_merge(model, args)  # recorded in the file's metadata (vitkit.token_merging)
    calibration = None
    if args.calibrate:
        from vitkit.inference.predict import calibration_images

        calibration = calibration_images(args.calibrate, model.preprocess)
        print(f"calibrating int8 on {len(calibration)} images")
    paths = export_model(model, args.format, out, args.opset, args.int8, calibration, keep, log=print,
                         grid=args.int8_grid)
    for name, p in paths.items():
        print(f"wrote {p}" + (f" (dynamic batch, {model.config.img_size[0]}x{model.config.img_size[1]})"
                              if name.endswith("fp32") else ""))
    if not args.no_check:
        for name, p in paths.items():  # on the calibration images where there are some: int8's ranges fit them
            r = check_parity(model, p, images=calibration)
            note = ("; int8 on noise says little of int8 on images: check those with --calibrate or --eval-digits"
                    if r.inputs == "random inputs" and "int8" in name else "")
            print(
                f"{name} vs pytorch on {r.inputs}, batches {r.batch_sizes}: max |dlogit| {r.max_abs_diff:.2e} "
                f"(max |logit| {r.max_abs_logit:.2f}), top-1 agreement {r.top1_agreement:.3f}{note}"
            )
    if args.eval_digits:
        _eval_digits(model, paths)
    if args.bench:  # the reliability rules of `vitkit bench`: medians of interleaved repeats, spread, flags
        from vitkit.bench.timing import unreliable

        t = bench_exports(model, paths, batch=args.batch, repeats=args.repeats)
        base = t["pytorch"]
        for name, tm in t.items():
            why = "; ".join(x for x in (unreliable(tm), unreliable(base) if name != "pytorch" else "") if x)
            print(f"{name:10s} batch {args.batch}: {tm.median * 1e3:8.1f} ms (spread {100 * tm.spread:.0f}%, "
                  f"{args.repeats} repeats)  {base.median / tm.median:.2f}x pytorch"
                  + (f"  UNRELIABLE: {why} (a busy machine? rerun with more --repeats)" if why else ""))
    return 0


def _eval_digits(model, paths: dict[str, Path]) -> None:  # noqa: ANN001
    import torch

    from vitkit.data.digits import load_digits_split
    from vitkit.inference.evaluate import compare_exports

    _, test = load_digits_split()
    pre = model.preprocess
    res = compare_exports(model, paths, pre.normalize(pre.resize(test.images)), torch.from_numpy(test.labels))
    print(f"digits test ({len(test)} images): pytorch fp32 accuracy {res.pop('pytorch')['accuracy']:.4f}")
    for name, r in res.items():
        print(f"  {name}: accuracy {r['accuracy']:.4f}, top-1 agreement with pytorch {r['agreement']:.4f}, "
              f"max |dlogit| {r['max_abs_diff']:.2e}")
