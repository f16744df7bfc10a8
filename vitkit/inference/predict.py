"""Predictions for image files, outside training: the inputs `vitkit predict` takes, its top-k rows, their table.

`expand_inputs` turns files, folders (searched recursively) and list files into image paths; `predict_files`
streams them in batches through a model's own preprocessing and a `Predictor` (or the model itself), yielding
one row per readable image and naming the unreadable ones; `predict_native` does the same with each image at its own
aspect ratio (NaViT: packed, at most N patches, no crop); `write_predictions` writes the rows as CSV or JSONL,
atomically.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.data.base import FileDataset
from vitkit.data.collate import NativePacker
from vitkit.data.folders import IMAGE_EXTENSIONS, check_inside
from vitkit.inference.evaluate import check_finite, eval_loader
from vitkit.inference.runtime import inference_model
from vitkit.models.packing import PackedBatch
from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils import precision as precision_mod
from vitkit.utils.files import OutputFile, claim_output, read_text_file

LIST_SUFFIXES = (".txt", ".lst")
OUTPUT_SUFFIXES = (".csv", ".jsonl")


def expand_inputs(items: list[str]) -> list[str]:
    """Image paths in the order given: files as they are, folders searched recursively (sorted), list files
    (`.txt` / `.lst`: one path per line, relative to the list; what follows the path, e.g. a label, is ignored)."""
    out: list[str] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS)
            for f in found:  # the rule of every data folder: a link that leads outside it is refused
                check_inside(Path(f), p)
            if not found:
                raise ValueError(f"{p}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) in this folder")
            out += found
        elif p.is_file() and p.suffix.lower() in LIST_SUFFIXES:
            listed = [line.split()[0] for line in read_text_file(p, "list file").splitlines()
                      if line.strip() and not line.strip().startswith("#")]
            if not listed:
                raise ValueError(f"{p}: this list file names no image (one path per line; # starts a comment)")
            out += [str(f if f.is_absolute() else p.parent / f) for f in map(Path, listed)]
        else:
            out.append(item)  # a file (an unreadable or missing one is named and skipped later)
    if not out:
        raise ValueError("no images given: name image files, folders or list files")
    return out


def predict_files(net: nn.Module | Callable[[torch.Tensor], torch.Tensor], preprocess: PreprocessConfig,
                  paths: list[str], topk: int = 5, batch_size: int = 32, workers: int = 0,
                  max_pixels: int | None = None, skipped: list[str] | None = None,
                  progress: Callable[[int], Any] | None = None) -> Iterator[dict[str, Any]]:
    """{"path", "labels", "probs"} (the top-k by softmax probability) for each readable image of `paths`, in order.
    An unreadable file is left out and its message appended to `skipped`; `progress(n)` is told of every n files
    done. `net` takes normalised (B, C, H, W) float images and returns logits (a Predictor, or the model)."""
    ds = FileDataset(paths, [0] * len(paths), [""], preprocess.channels, max_pixels)
    loader = eval_loader(ds, preprocess, batch_size, workers)
    labels = preprocess.labels
    for b in loader.iterate(0, len(loader)):
        if skipped is not None:
            skipped.extend(b.skipped)
        if len(b.y):
            with torch.inference_mode():
                probs = check_finite(net(b.x).float(), "logits").softmax(-1).cpu()
            top = probs.topk(min(topk, probs.shape[-1]))
            for j, ps, ix in zip(b.indices, top.values.tolist(), top.indices.tolist()):
                yield {"path": paths[j], "labels": [labels[i] if i < len(labels) else str(i) for i in ix],
                       "probs": [round(p, 6) for p in ps]}
        if progress is not None:
            progress(len(b.indices) + len(b.skipped))


def native_runner(model: nn.Module, precision: str = "fp32", device: str | torch.device = "cpu"
                  ) -> Callable[[Any], torch.Tensor]:
    """Packed images (`PackedBatch`) -> `model.forward_packed` in fp32 (a ViT's logits; a FeatureNet's features), in
    torch: a snapshot of `model` (`inference_model`: eval mode, the precision's weights, the fused CPU blocks for
    fp32, which honour the packing mask). Refused, naming the reason, where the model cannot run packed images
    (`check_packable`) or the precision is not torch's."""
    if not hasattr(model, "forward_packed"):
        raise ValueError(f"--native: packed images of their own sizes run on ViTs, not a {type(model).__name__}")
    model.check_packable()
    prec = precision_mod.get(precision, ("fp32", "bf16", "bf16-autocast"), "--precision with --native")
    net = inference_model(model, prec, device=device)

    @torch.inference_mode()
    def run(batch: Any) -> torch.Tensor:
        with prec.context(device):
            return net.forward_packed(batch.to(device, prec.input_dtype)).float()

    return run


def native_batches(preprocess: PreprocessConfig, patch: int, paths: list[str], max_patches: int,
                   batch_size: int = 32, max_pixels: int | None = None, skipped: list[str] | None = None
                   ) -> Iterator[tuple[list[int], PackedBatch | None, int]]:
    """The files `paths`, `batch_size` at a time, each resized, aspect kept and no crop, to at most `max_patches`
    patches (`PreprocessConfig.native`) and packed first fit into rows of `max_patches` patches (`NativePacker`):
    (the indices of the readable files, their `PackedBatch` or None, the files done). Unreadable files are named in
    `skipped`."""
    packer = NativePacker(preprocess, patch, max_patches)
    ds = FileDataset(paths, [0] * len(paths), [""], preprocess.channels, max_pixels)
    for start in range(0, len(paths), batch_size):
        got, at = [], []
        for j in range(start, min(start + batch_size, len(paths))):
            try:
                got.append((ds.get(j)[0], 0))
                at.append(j)
            except ValueError as e:
                if skipped is not None:
                    skipped.append(str(e) if paths[j] in str(e) else f"{paths[j]}: {e}")
        yield at, packer(got, train=False).batch if got else None, min(batch_size, len(paths) - start)


def predict_native(model: nn.Module, paths: list[str], max_patches: int, topk: int = 5, batch_size: int = 32,
                   precision: str = "fp32", device: str | torch.device = "cpu", max_pixels: int | None = None,
                   skipped: list[str] | None = None, progress: Callable[[int], Any] | None = None
                   ) -> Iterator[dict[str, Any]]:
    """`predict_files`' rows with each image at its own aspect ratio (NaViT, `native_batches`), run by
    `native_runner`."""
    run = native_runner(model, precision, device)
    labels = model.preprocess.labels
    for at, batch, done in native_batches(model.preprocess, model.config.patch_size, paths, max_patches, batch_size,
                                          max_pixels, skipped):
        if batch is not None:
            probs = check_finite(run(batch), "logits").softmax(-1).cpu()
            top = probs.topk(min(topk, probs.shape[-1]))
            for j, ps, ix in zip(at, top.values.tolist(), top.indices.tolist()):
                yield {"path": paths[j], "labels": [labels[i] if i < len(labels) else str(i) for i in ix],
                       "probs": [round(p, 6) for p in ps]}
        if progress is not None:
            progress(done)


def check_output(path: str | Path) -> Path:
    """`path` if it names a table `write_predictions` writes (.csv or .jsonl), else a ValueError (checked before any
    work)."""
    path = Path(path)
    if path.suffix not in OUTPUT_SUFFIXES:
        raise ValueError(f"--output {path}: write a .csv or a .jsonl file")
    return path


def write_predictions(rows: list[dict[str, Any]], path: str | Path | OutputFile, k: int, overwrite: bool = False
                      ) -> Path:
    """The rows as a .csv (path, label_1, prob_1, ...) or a .jsonl table, written as every output is
    (`OutputFile`: an existing file only with `overwrite`, one writer, the old file kept until the new is whole)."""
    check_output(path.path if isinstance(path, OutputFile) else path)
    with claim_output(path, overwrite) as out, out.replacing() as tmp, open(tmp, "w", newline="") as f:
        path = out.path
        if path.suffix == ".jsonl":
            f.writelines(json.dumps(r) + "\n" for r in rows)
        else:
            w = csv.writer(f)
            w.writerow(["path"] + [c for i in range(1, k + 1) for c in (f"label_{i}", f"prob_{i}")])
            for r in rows:
                w.writerow([r["path"]] + [v for lab, p in zip(r["labels"], r["probs"]) for v in (lab, p)])
    return path


#: calibration images read at most (static int8): a few hundred give stable activation ranges
MAX_CALIBRATION = 512


def calibration_images(items: list[str], preprocess: PreprocessConfig, limit: int = MAX_CALIBRATION,
                       batch_size: int = 32) -> torch.Tensor:
    """The first `limit` readable images of `items` (files, folders, list files, as `expand_inputs`), through the
    model's preprocessing: the (N, C, H, W) calibration set of static int8 quantisation (`--calibrate`)."""
    paths = expand_inputs(items)[:limit]
    ds = FileDataset(paths, [0] * len(paths), [""], preprocess.channels)
    loader = eval_loader(ds, preprocess, batch_size, 0)
    batches = [b.x for b in loader.iterate(0, len(loader)) if len(b.y)]
    if not batches:
        raise ValueError(f"--calibrate {' '.join(items)}: no readable image")
    return torch.cat(batches)
