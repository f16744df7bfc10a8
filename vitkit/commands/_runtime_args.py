"""Options shared by the commands that run a model for inference (`predict`, `eval`): precision, runtime,
compilation, threads; and the `Predictor` they describe, with each automatic choice printed. `--native` and
`--max-patches` (`predict`, `embed`): images at their own aspect ratio, packed (NaViT), in torch."""

from __future__ import annotations

import argparse
import sys

from torch import nn

from vitkit.inference.export import DEFAULT_GRID, INT8_GRIDS
from vitkit.inference.mixed import parse_keep_float
from vitkit.inference.runtime import RUNTIMES, Predictor, build_predictor
from vitkit.utils.options import INFERENCE_PRECISION, PRECISION_CHOICES, native_asked, precision_help


def add_runtime_arguments(p: argparse.ArgumentParser, default_runtime: str | None,
                          default_precision: str | None = None) -> None:
    """`default_runtime=None`: torch (the reference numbers), except for int8: onnxruntime (the portable int8);
    `default_precision=None`: fp32, the checkpoint's own answer (`vitkit.utils.options.INFERENCE_PRECISION`)."""
    p.add_argument("--precision", default=default_precision, choices=PRECISION_CHOICES,
                   help=precision_help(PRECISION_CHOICES, default_precision or INFERENCE_PRECISION))
    p.add_argument("--runtime", default=default_runtime, choices=RUNTIMES,
                   help="torch, onnxruntime or openvino; auto: the fastest installed CPU runtime for the precision "
                   "as measured on this kind of CPU (vitkit/inference/runtime_speeds.json), torch for small jobs and "
                   "on a GPU (default: "
                   f"{default_runtime or 'torch; onnxruntime for int8'})")
    p.add_argument("--compile", action="store_true",
                   help="torch runtime: torch.compile with inductor, weights frozen (seconds to compile)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's, all cores)")
    p.add_argument("--calibrate", nargs="+", default=None, metavar="PATH",
                   help="int8: static quantisation calibrated on these images of your own (files, folders, lists; a "
                   "few hundred, at most 512 read) instead of dynamic quantisation; OpenVINO int8 (NNCF) needs it")
    add_int8_arguments(p)


def add_int8_arguments(p: argparse.ArgumentParser) -> None:
    """--int8-keep-float and --int8-grid (`predict`, `eval`, `embed`, `export`)."""
    p.add_argument("--int8-keep-float", default=None, metavar="N|LAYERS",
                   help="int8 mixed precision: keep N layers in float, those with the largest int8 error measured "
                   "on the --calibrate images, or the layers named (comma-separated module paths, e.g. "
                   "blocks.11.mlp.fc2); the choice is printed and stored in an export (default: all int8)")
    p.add_argument("--int8-grid", default=None, choices=tuple(INT8_GRIDS),
                   help="static int8 on onnxruntime (with --calibrate): w7, s8 weights on 7 bits (the fast u8-by-s8 "
                   "kernels); u8, u8 weights on 8 bits (closer to fp32, slower on CPUs without VNNI); both exact on "
                   f"every CPU; printed and stored in an export (default: {DEFAULT_GRID})")


def predictor_for(model: nn.Module, args: argparse.Namespace, n_images: int | None = None) -> Predictor:
    """`model` as the Predictor the options ask for (`build_predictor` decides); its choices go to stderr."""
    calibration = None
    if getattr(args, "calibrate", None):
        from vitkit.inference.predict import calibration_images

        if args.precision != "int8":
            raise ValueError(f"--calibrate is for --precision int8 (static quantisation), not {args.precision}")
        calibration = calibration_images(args.calibrate, model.preprocess)
    keep = parse_keep_float(getattr(args, "int8_keep_float", None))
    return build_predictor(model, args.precision, args.runtime, args.compile, getattr(args, "device", "cpu"),
                           args.threads, log=lambda m: print(m, file=sys.stderr), n_images=n_images,
                           calibration=calibration, keep_float=keep, int8_grid=getattr(args, "int8_grid", None))


def check_native(args: argparse.Namespace) -> None:
    """--native's option checks, before any work: --max-patches only with --native; torch only (an exported graph
    has one input size; int8 runs in onnxruntime; --compile would recompile for every packed shape)."""
    from vitkit.models.config import MAX_TOKENS
    from vitkit.utils import check_int

    if not native_asked(args):
        return
    if args.max_patches is not None:
        check_int("--max-patches", args.max_patches, high=MAX_TOKENS)  # (10^6 asked the allocator for 1 TB)
    if args.runtime not in (None, "auto", "torch"):
        raise ValueError(f"--native runs in torch: an exported {args.runtime} graph has one fixed input size, not "
                         "packed images of their own sizes; use --runtime torch")
    if args.compile:
        raise ValueError("--native with --compile: every packed batch has its own shape (a recompile each); "
                         "leave out --compile")
    if (getattr(args, "calibrate", None) or args.precision == "int8" or getattr(args, "int8_keep_float", None)
            or getattr(args, "int8_grid", None)):
        raise ValueError("--native runs in torch (fp32 / bf16); int8 runs in onnxruntime at a fixed input size")


def native_precision(model: nn.Module, args: argparse.Namespace) -> tuple[str, int]:
    """(precision, max patches) of a --native run, checked against the model (refused by name before any image is
    read) and said on stderr."""
    from vitkit.utils.precision import resolve

    model.check_packable()
    precision, why = resolve(args.precision, getattr(args, "device", "cpu"))
    n = args.max_patches or model.config.num_patches
    print(f"native resolution: at most {n} patches per image, no crop; precision {precision} ({why}); runtime torch "
          "(packed images)", file=sys.stderr)
    return precision, n
