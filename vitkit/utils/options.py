"""The values a user types, each with one owner: its names, its one parser, its default and its help text.

The commands' argparse options and the library's tables are built from here (import-light: no torch), so a value
is spelled, parsed and described the same way on the command line, in a recipe and in Python.

| value            | names / syntax                                     | read by                                        |
|------------------|----------------------------------------------------|------------------------------------------------|
| image size       | `S` (a square side) or `HxW`, in pixels            | every command's --img-size, bench's comma list |
| precision        | fp32, bf16, bf16-autocast, int8 (+ auto)           | `vitkit.utils.precision`, predict / eval /     |
|                  |                                                    | bench --precision, recipes' train.precision    |
| loading hints    | --num-heads, --gelu, --pooling, --ln-eps, --posemb | every command that loads a checkpoint          |
| native res.      | --native, --max-patches N (NaViT)                  | train / finetune (data.max_patches), predict / |
|                  |                                                    | eval / embed (packed batches in torch)         |

The inference backends (runtimes and their export formats) are one table, `vitkit.inference.backends`; the
checkpoint formats are `vitkit.formats`'; the experiments of `vitkit reproduce` are `vitkit.reproduce`'s.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence

# ---------------------------------------------------------------------------------------------------------------
# image size: `S` or `HxW`

IMG_SIZE_METAVAR = "S|HxW"
IMG_SIZE_SYNTAX = "a size S or HxW in pixels (e.g. 384 or 384x512)"


def parse_img_size(text: str | int | Sequence[int], what: str = "--img-size") -> int | tuple[int, int]:
    """The one image-size syntax: `S` (a square side) or `HxW`, in pixels, as text or already a number / a pair.
    A ValueError names `what` and the value otherwise."""
    if isinstance(text, bool):
        parts: list[int] = []
    elif isinstance(text, int):
        parts = [text]
    elif isinstance(text, str):
        try:
            parts = [int(v) for v in text.strip().lower().split("x")]
        except ValueError:
            parts = []
    else:
        parts = list(text) if all(isinstance(v, int) and not isinstance(v, bool) for v in text) else []
    if len(parts) not in (1, 2) or min(parts) <= 0:
        raise ValueError(f"{what}: expected {IMG_SIZE_SYNTAX}, got {text!r}")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


def img_size_arg(text: str) -> int | tuple[int, int]:
    """argparse `type=` of an image size: one word (`S` or `HxW`), so that a command's image arguments may
    follow it."""
    try:
        return parse_img_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {IMG_SIZE_SYNTAX}, got {text!r}") from None


def img_sizes_arg(text: str) -> list[int | tuple[int, int]]:
    """argparse `type=` of a comma list of image sizes (`vitkit bench --img-size 224,384x512`)."""
    return [img_size_arg(v) for v in text.split(",") if v]


def legacy_img_size(values: list[int | tuple[int, int]] | None, flag: str = "--img-size") -> int | tuple[int, int] | None:
    """The size of an option that once took `H [W]` (two words) and now takes the one syntax: two plain numbers
    are still read as H W, with a note that names the new spelling."""
    if values is None:
        return None
    if len(values) == 1:
        return values[0]
    if len(values) == 2 and all(isinstance(v, int) for v in values):
        warnings.warn(f"{flag} {values[0]} {values[1]} is deprecated: write {flag} {values[0]}x{values[1]}",
                      FutureWarning, stacklevel=2)
        return (values[0], values[1])
    raise ValueError(f"{flag}: expected {IMG_SIZE_SYNTAX}, got {' '.join(map(str, values))!r}")


def add_img_size_argument(p: argparse.ArgumentParser, help: str, dest: str | None = None,
                          legacy_pair: bool = False) -> None:
    """--img-size in the one syntax; `legacy_pair`: also the old `H W` (two words; see `legacy_img_size`)."""
    kw = {"dest": dest} if dest else {}
    if legacy_pair:
        kw["nargs"] = "+"
    p.add_argument("--img-size", type=img_size_arg, default=None, metavar=IMG_SIZE_METAVAR,
                   help=help, **kw)


# ---------------------------------------------------------------------------------------------------------------
# precision: one vocabulary for inference, training and the benchmarks

PRECISIONS = ("fp32", "bf16", "bf16-autocast", "int8")
PRECISION_CHOICES = ("auto", *PRECISIONS)
#: the precisions torch runs (the benchmark suite's, the torch backend's)
TORCH_PRECISIONS = ("fp32", "bf16", "bf16-autocast")
#: what each name means, for help texts
PRECISION_MEANING = {
    "fp32": "fp32 weights and matmuls: the checkpoint's own answer",
    "bf16": "bf16 weights (inference: torch, OpenVINO)",
    "bf16-autocast": "fp32 weights, bf16 matmuls under torch.autocast (training's fp32 master weights)",
    "int8": "dynamic int8 quantisation of every MatMul/Gemm (onnxruntime)",
    "auto": "bf16 where the hardware multiplies bf16 natively (a CPU with AVX512_BF16 / AMX, a GPU that supports "
            "it), else fp32",
}
#: what a faster precision costs against fp32, said when `auto` picks it (the measured figures: docs/serving.md)
PRECISION_COST = {
    "bf16": "answers are no longer fp32's: bf16 weights move the logits slightly and can change a close top-1 "
            "(docs/serving.md); --precision fp32 gives the checkpoint's own answer",
    "bf16-autocast": "answers are no longer fp32's: bf16 matmuls move the logits slightly and can change a close "
                     "top-1 (docs/serving.md); --precision fp32 gives the checkpoint's own answer",
}
#: the default of every command that answers with a model (predict, eval, embed): the reference answer
INFERENCE_PRECISION = "fp32"
#: what a training run may use (training keeps fp32 master weights), and its default
TRAIN_PRECISIONS = ("fp32", "bf16-autocast")
TRAIN_PRECISION = "fp32"
#: what `vitkit export` writes: the fp32 graph, and with int8 its quantisation beside it
EXPORT_PRECISIONS = ("fp32", "int8")


def precision_help(allowed: Sequence[str] = PRECISION_CHOICES, default: str = INFERENCE_PRECISION) -> str:
    """The help text of a --precision option that takes `allowed`."""
    return "; ".join(f"{n}: {PRECISION_MEANING[n]}" for n in allowed) + f" (default: {default})"


def parse_precision(name: str, allowed: Sequence[str] = PRECISION_CHOICES, what: str = "--precision") -> str:
    """`name` if it is one of `allowed`; a ValueError naming `what` and the choices otherwise."""
    if name not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}; got {name!r}")
    return name


def precision_list_arg(text: str) -> list[str]:
    """argparse `type=` of a comma list of precisions (`vitkit bench --precision fp32,bf16`)."""
    try:
        return [parse_precision(v, PRECISIONS) for v in text.split(",") if v]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).split(" must ", 1)[-1]) from None


# ---------------------------------------------------------------------------------------------------------------
# token merging (ToMe, vitkit/models/tome.py): --merge R on the commands that run a model for inference

MERGE_METAVAR = "R|R1,R2,..."
MERGE_HELP = ("token merging (ToMe): merge R patch tokens in every block (or R_i in block i), by bipartite matching of "
              "the attention keys, with proportional attention; fewer tokens, faster, at a small accuracy cost "
              "(docs/serving.md); 0: off (default)")


def merge_arg(text: str) -> int | list[int]:
    """argparse `type=` of --merge: `R` (every block) or `R1,R2,...` (one per block), each a count >= 0."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected R or R1,R2,... (tokens merged per block, >= 0), got {text!r}")
    return values[0] if len(values) == 1 else values


# `vitkit bench` times several merging rates side by side: a list of rows, not one model's per-block schedule, so
# it has its own name (its old spelling `bench --merge R1,R2` read like --merge's per-block list; deprecated)
MERGE_ROWS_METAVAR = "R1,R2,..."
MERGE_ROWS_HELP = ("also time vitkit with token merging (ToMe) at each R: one row per value, R tokens merged in every "
                   "block (inference); --merge R elsewhere sets one model's merging")


def merge_rows_arg(text: str) -> list[int]:
    """argparse `type=` of bench's --merge-rows: a comma list of merge rates, one benchmark row each, each >= 1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected R1,R2,... (one row per rate, tokens merged per block, >= 1), "
                                         f"got {text!r}")
    return values


def merge_rows(rows: list[int] | None, old: list[int] | None) -> tuple[int, ...]:
    """bench's rows of merge rates from --merge-rows, or from the deprecated `bench --merge` (said once, by name)."""
    if old is None:
        return tuple(rows or ())
    spelled = ",".join(map(str, old))
    if rows is not None and list(rows) != list(old):
        raise ValueError(f"bench --merge {spelled} disagrees with --merge-rows {','.join(map(str, rows))}; "
                         "--merge is deprecated in bench: keep --merge-rows")
    warnings.warn(f"bench --merge {spelled} is deprecated (it times one row per rate, unlike --merge elsewhere): "
                  f"write --merge-rows {spelled}", FutureWarning, stacklevel=2)
    return tuple(old)


# ---------------------------------------------------------------------------------------------------------------
# native resolution (NaViT, Dehghani et al. 2023): --native / --max-patches

#: what the two flags do where a model is trained (train, finetune: recipe values) and where one is run (predict,
#: eval, embed: packed batches in torch)
NATIVE_HELP = {
    True: ("native resolution (NaViT): each image at its own aspect ratio, resized whole to at most --max-patches "
           "patches, packed; sets data.max_patches and data.augment = none",
           "with --native: at most this many patches per image"),
    False: ("native resolution: keep each image's aspect ratio, resized to at most --max-patches patches, no crop; "
            "images packed together (NaViT; torch runtime)",
            "with --native: at most this many patches per image (default: the model's own patch count)"),
}


def add_native_arguments(p: argparse.ArgumentParser, training: bool = False) -> None:
    """--native and --max-patches; `training`: for train / finetune, else for the commands that run a model."""
    native, max_patches = NATIVE_HELP[training]
    p.add_argument("--native", action="store_true", help=native)
    p.add_argument("--max-patches", type=int, default=None, help=max_patches)


def native_asked(args: argparse.Namespace) -> bool:
    """Whether --native was given; --max-patches without it is refused."""
    if getattr(args, "native", False):
        return True
    if getattr(args, "max_patches", None) is not None:
        raise ValueError("--max-patches applies to --native (native resolution)")
    return False


# ---------------------------------------------------------------------------------------------------------------
# loading hints: what a checkpoint's file may not record (`vitkit.formats.load_pretrained`'s keywords)

GELU_CHOICES = ("tanh", "exact", "quick")
POOLING_CHOICES = ("token", "gap", "map")
POSEMB_CHOICES = ("sincos2d_big_vision", "none")
#: flag -> (load_pretrained keyword, argparse keywords); one description of each hint
LOAD_HINTS: dict[str, tuple[str, dict]] = {
    "--num-heads": ("num_heads", dict(
        type=int, help="attention heads, for a file that does not record them (a bare timm state dict whose width is "
        "not one of Table 1's); must agree with a file that does")),
    "--gelu": ("gelu", dict(
        choices=GELU_CHOICES, help="GELU flavour, for a file that does not record it (default: the format's own; "
        "quick: OpenAI CLIP's QuickGELU)")),
    "--pooling": ("pooling", dict(
        choices=POOLING_CHOICES, help="pooling, for a file that does not record it (a bare timm file with a class "
        "token: token, assumed and logged; gap for one trained with global_pool='avg')")),
    "--ln-eps": ("ln_eps", dict(
        type=float, help="LayerNorm eps, for a file that does not record it (default: the format's own)")),
    "--posemb": ("posemb", dict(
        choices=POSEMB_CHOICES, help="position embeddings a file does not store (a big_vision .npz trained with "
        "fixed sin-cos ones: sincos2d_big_vision, with its --img-size)")),
}
