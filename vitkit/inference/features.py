"""Features for image files, outside training: what `vitkit embed` and `vitkit.embed(...)` compute and write.

Images (files, folders, lists: `vitkit.inference.predict.expand_inputs`) are streamed in batches through the model's own
preprocessing (decode, resize + crop, normalise: the checkpoint's) and a `Predictor` that returns one vector per
image. The default vector is the family's pooled output as its own library returns it (eq. 4's y through the
pre-logits layer where there is one): transformers' `pooler_output` -- DINOv2's class token after the final
LayerNorm, SigLIP's attention-pool output, CLIP's post-LayerNorm class token, or, where the file has CLIP's
`visual_projection`, its image embedding (`image_embeds`); DeiTModel's pooler (dense + tanh) where the file has it;
for timm's files, `forward_head(pre_logits=True)` (a distilled DeiT's: the mean of its two tokens). `FEATURES` names the others. Rows are written as
.npz (`paths`, `features`), .parquet or .jsonl, atomically; an unreadable file is named and left out.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.data.base import FileDataset
from vitkit.formats.families import pooled_feature
from vitkit.inference.backends import ExportedModel, is_exported, load_exported
from vitkit.inference.evaluate import check_finite, eval_loader
from vitkit.inference.predict import expand_inputs, native_batches, native_runner
from vitkit.inference.runtime import build_predictor
from vitkit.models.features import check_feature
from vitkit.models.features import feature as model_feature
from vitkit.models.packing import PackedBatch
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.vit import VisionTransformer
from vitkit.utils.files import OutputFile, claim_output

# What one image becomes: "pooled" (the family's pooled output, see the module docstring), or one of the model's own
# features, each defined once in vitkit/models/features.py and read there by few-shot evaluation too: "cls", "mean",
# "cls_mean", "pre_logits", "logits", "patch" (N x P x D).
FEATURES = ("pooled", "cls", "mean", "cls_mean", "pre_logits", "logits", "patch")
EMBED_SUFFIXES = (".npz", ".parquet", ".jsonl")


def default_feature(model: nn.Module) -> tuple[str, str]:
    """The family's pooled output, and a note where the file decides it (`Family.pooled_feature`, each family's rule
    in its own file: CLIP with its projection gives the projected image embedding, DeiT its pooler or class token);
    every other model the head's input (HF's pooler_output; a classifier's pre-logits)."""
    found = pooled_feature(model.config)
    return found if found is not None else ("pre_logits", _distilled_note(model.config))


def _distilled_note(cfg: Any) -> str:
    return ("DeiT (distilled) without a pooler: pre_logits is timm's, the mean of the class and distillation tokens "
            "after the final LayerNorm") if getattr(cfg, "distill_token", False) and not cfg.representation_size \
        else ""


class FeatureNet(nn.Module):
    """`model` returning one feature per image ((B, D), or (B, P, D) for "patch"), L2-normalised if asked. It
    carries the model's `config` and `preprocess`, so runtimes export it as they export the model. A ViT's features
    are `vitkit.models.features.feature` of its token record (merged tokens weighted by their sizes); another
    model (a BiT ResNet) gives its head's input or output."""

    def __init__(self, model: nn.Module, feature: str = "pooled", normalize: bool = False) -> None:
        super().__init__()
        if feature not in FEATURES:
            raise ValueError(f"unknown feature {feature!r}; one of {', '.join(FEATURES)}")
        self.model, self.normalize = model, normalize
        cfg = model.config
        # note: how the file decided the feature, where it did (for the log)
        self.feature, self.note = default_feature(model) if feature == "pooled" else (
            feature, _distilled_note(cfg) if feature == "pre_logits" else "")
        if self.feature == "logits" and cfg.num_classes == 0:
            raise ValueError(f"--pool {feature}: this model has no head (num_classes = 0)")
        if isinstance(model, VisionTransformer):
            try:
                check_feature(model, self.feature)
            except ValueError as e:
                raise ValueError(f"--pool {feature}: {e}") from None
        elif self.feature not in ("pre_logits", "logits"):
            raise ValueError(f"--pool {feature}: a {type(model).__name__} has no tokens; use pooled, pre_logits or "
                             "logits")

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def preprocess(self) -> PreprocessConfig:
        return self.model.preprocess

    def set_img_size(self, img_size: int | tuple[int, int]) -> None:
        self.model.set_img_size(img_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, f = self.model, self.feature
        if isinstance(m, VisionTransformer):
            z = model_feature(m, m.tokens(x), f)
        else:
            z = m(x) if f == "logits" else m.forward_head(m.forward_features(x), pre_logits=True)
        return torch.nn.functional.normalize(z, dim=-1) if self.normalize else z

    def check_packable(self) -> None:
        """A ValueError naming why this feature of this model cannot come from packed images of their own sizes."""
        if not isinstance(self.model, VisionTransformer):
            raise ValueError(f"--native: packed images of their own sizes run on ViTs, not a "
                             f"{type(self.model).__name__}")
        if self.feature == "patch":
            raise ValueError("--native with --pool patch: each image has its own patch grid; a table of features "
                             "needs one shape (leave out --native, or pick a pooled feature)")
        self.model.check_packable()

    def forward_packed(self, batch: PackedBatch) -> torch.Tensor:
        """The feature of each packed image (NaViT, `VisionTransformer.tokens_packed`), (n_images, D)."""
        z = model_feature(self.model, self.model.tokens_packed(batch), self.feature)
        return torch.nn.functional.normalize(z, dim=-1) if self.normalize else z


@dataclass
class Embeddings:
    """The features of the readable images, in input order, and the messages naming the unreadable ones."""

    paths: list[str]
    features: np.ndarray  # float32, (N, D) or (N, P, D) for "patch"
    skipped: list[str] = field(default_factory=list)
    feature: str = "pooled"


def prefetched(batches: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """`batches`, produced by a background thread `depth` ahead: decoding and resizing (which release the GIL) run
    while the model runs on the previous batch. The thread runs torch single-threaded: a resize or a normalisation
    of one image is too small to share, and on a busy machine each parallel region waits for its slowest thread
    (measured: BENCHMARKS.md, "File to features")."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        torch.set_num_threads(1)  # this thread's own OpenMP setting; the caller's stays
        try:
            for b in batches:
                if stop.is_set():
                    return
                q.put(b)
            q.put(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            q.put(e)

    t = threading.Thread(target=produce, name="vitkit-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.01)


def embed_files(net: Callable[[torch.Tensor], torch.Tensor], preprocess: PreprocessConfig, paths: list[str],
                batch_size: int = 32, workers: int = 0, max_pixels: int | None = None,
                progress: Callable[[int, list[str]], Any] | None = None) -> Embeddings:
    """`net` (a Predictor of a `FeatureNet`, or one itself) over the image files `paths`, in batches through
    `preprocess` (8-bit images resized in uint8: `PreprocessConfig.resize`); `progress(n, skipped)` is told after
    each batch. Unreadable files are left out and named."""
    # 8-bit images are resized in uint8 (as Pillow, transformers and timm resize them), ~20x faster than in float
    ds = FileDataset(paths, [0] * len(paths), [""], preprocess.channels, max_pixels, keep_uint8=True)
    loader = eval_loader(ds, preprocess, batch_size, workers)
    kept: list[str] = []
    chunks: list[np.ndarray] = []
    skipped: list[str] = []
    for b in prefetched(loader.iterate(0, len(loader))):
        skipped.extend(b.skipped)
        if len(b.y):
            with torch.inference_mode():
                chunks.append(check_finite(net(b.x).float(), "features").cpu().numpy())
            kept += [paths[j] for j in b.indices]
        if progress is not None:
            progress(len(b.indices) + len(b.skipped), b.skipped)
    feats = np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros((0, 0), np.float32)
    return Embeddings(kept, feats, skipped)


def embed_native(fnet: FeatureNet, paths: list[str], max_patches: int, batch_size: int = 32,
                 precision: str = "fp32", device: str | torch.device = "cpu", max_pixels: int | None = None,
                 progress: Callable[[int, list[str]], Any] | None = None) -> Embeddings:
    """`embed_files` with each image at its own aspect ratio (NaViT): at most `max_patches` patches, no crop,
    packed (`native_batches`), run by `native_runner` (torch)."""
    run = native_runner(fnet, precision, device)
    kept: list[str] = []
    chunks: list[np.ndarray] = []
    skipped: list[str] = []
    said = 0
    for at, batch, done in native_batches(fnet.preprocess, fnet.config.patch_size, paths, max_patches, batch_size,
                                          max_pixels, skipped):
        if batch is not None:
            chunks.append(check_finite(run(batch), "features").cpu().numpy())
            kept += [paths[j] for j in at]
        if progress is not None:
            progress(done, skipped[said:])
        said = len(skipped)
    feats = np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros((0, 0), np.float32)
    return Embeddings(kept, feats, skipped)


def embed(model: nn.Module | str | Path, images: list[str] | str | Path, feature: str = "pooled",
          normalize: bool = False, batch_size: int = 32, precision: str | None = None, runtime: str | None = None,
          threads: int | None = None, workers: int = 0, device: str = "cpu",
          progress: Callable[[int, list[str]], Any] | None = None,
          log: Callable[[str], None] | None = None, skip_unreadable: bool = False) -> Embeddings:
    """Features of image files, folders or list files (`vitkit embed`'s Python twin): `model` a loaded model, any
    checkpoint `load_pretrained` reads, or one of vitkit's exports (`.onnx`, `.xml`, `.pt2`: run on its own runtime
    with its own preprocessing, as `vitkit embed --model m.onnx`); `feature` one of `FEATURES` ("pooled": the
    family's own pooled output); `normalize`: unit L2 norm (cosine retrieval). Precision and runtime as
    `build_predictor` takes them (None: fp32 in torch; an export's own). An input that cannot be read raises,
    naming it (a path that does not exist before any work); `skip_unreadable=True` keeps the readable ones' rows
    and names the others in `.skipped`, as the command line does."""
    items = list(images) if isinstance(images, (list, tuple)) else [images]
    bad = next((i for i in items if not isinstance(i, (str, Path))), None)
    if bad is not None:
        raise TypeError(f"vitkit.embed takes image file paths, folders or list files (str or Path), got "
                        f"{type(bad).__module__}.{type(bad).__name__}: save in-memory images to files first")
    paths = expand_inputs([str(i) for i in items])
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing and not skip_unreadable:  # a typo, named before the model is loaded
        raise FileNotFoundError(f"no such image file: {', '.join(missing[:3])}"
                                + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    if isinstance(model, (str, Path)) and is_exported(model):
        model = load_exported(model)
    elif isinstance(model, (str, Path)):
        from vitkit.formats import load_pretrained  # noqa: PLC0415 - formats sits below; loaded only for a path

        model = load_pretrained(model)
    if isinstance(model, ExportedModel):
        fnet: Any = model.as_features(feature, normalize)
    else:
        fnet = FeatureNet(model, feature, normalize)  # the predictor runs a snapshot in eval mode
        runtime = "torch" if runtime is None else runtime
    if fnet.note and log is not None:
        log(fnet.note)
    net = build_predictor(fnet, precision, runtime, False, device, threads, log=log, n_images=len(paths))
    out = embed_files(net, model.preprocess, paths, batch_size, workers, progress=progress)
    if out.skipped and (not skip_unreadable or not out.paths):  # the CLI names each and exits 1
        raise ValueError(f"{len(out.skipped)} of the {len(paths)} images could not be read: "
                         + "; ".join(out.skipped[:3]) + (f"; and {len(out.skipped) - 3} more" if len(out.skipped) > 3
                                                         else "")
                         + ("" if skip_unreadable else " (skip_unreadable=True keeps the others' features)"))
    out.feature = fnet.feature
    return out


def check_embed_output(path: str | Path, overwrite: bool = False) -> Path:
    """`path` if it names a file `write_embeddings` writes (.npz, .parquet, .jsonl) and does not exist (or
    `overwrite`), else an error naming it (checked before any work)."""
    path = Path(path)
    if path.suffix not in EMBED_SUFFIXES:
        raise ValueError(f"--output {path}: write a {', '.join(EMBED_SUFFIXES)} file")
    if path.exists() and not overwrite:
        raise FileExistsError(f"--output {path} exists; remove it, name another file or pass --overwrite")
    return path


def write_embeddings(emb: Embeddings, path: str | Path | OutputFile, overwrite: bool = False) -> Path:
    """The features as .npz (`paths` as str, `features` as float32, no pickles), .parquet (columns `path`,
    `feature`: a fixed-size list of float32; the shape of one feature in the file's metadata) or .jsonl
    ({"path", "feature"} per line), written as every output is (`OutputFile`: claimed, the old file kept until the
    new one is whole)."""
    check_embed_output(path.path if isinstance(path, OutputFile) else path, True)
    with claim_output(path, overwrite) as out, out.replacing() as tmp:
        path = out.path
        if path.suffix == ".npz":
            with open(tmp, "wb") as f:
                np.savez(f, paths=np.asarray(emb.paths, dtype=str), features=emb.features)
        elif path.suffix == ".jsonl":
            with open(tmp, "w") as f:
                f.writelines(json.dumps({"path": p, "feature": v.tolist()}) + "\n"
                             for p, v in zip(emb.paths, emb.features))
        else:
            try:
                import pyarrow as pa  # noqa: PLC0415 - optional, for .parquet only
                import pyarrow.parquet as pq  # noqa: PLC0415
            except ImportError as e:
                raise ValueError("--output .parquet needs pyarrow: pip install 'vitkit[embed]'") from e
            n = emb.features.shape[0]
            flat = emb.features.reshape(n, -1)
            col = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), pa.float32()), max(flat.shape[1], 1)
                                                   ) if n else pa.array([], pa.list_(pa.float32()))
            table = pa.table({"path": pa.array(emb.paths, pa.string()), "feature": col})
            table = table.replace_schema_metadata({"vitkit.feature": emb.feature,
                                                   "vitkit.shape": json.dumps(list(emb.features.shape[1:]))})
            pq.write_table(table, str(tmp))
    return path
