"""LoRA adapters (vitkit.models.lora) saved alone, small, beside the base checkpoint they were trained on.

Two layouts, each a folder of `adapter_config.json` + `adapter_model.safetensors`:

* vitkit's ("format": "vitkit-lora"): every trainable tensor by vitkit key (LoRA's A and B, and the classifier /
  norms / biases trained beside them), the LoRA config, the fine-tuned model's config and preprocessing, where the
  base is found again (`base_record`: its hub id and commit when it came from the Hugging Face hub, else its absolute
  path) and its identity, `base_fingerprint` (a hash of its weights, any format). `load_adapters`
  reads the base, refuses one whose weights hash otherwise, re-does the fine-tune's head and resolution change
  (§3.2) and puts the adapters on.
* peft's (`PeftModel.from_pretrained(transformers_model, folder)`), for a model that saves as transformers' ViT
  or DINOv2: `base_model.model.<module>.lora_[AB].weight` on transformers' module names (q, k and v are transformers'
  separate query / key / value Linears: vitkit's per-slice adapters are exactly theirs), the classifier as a
  `modules_to_save`. Module names differ between transformers releases (`encoder.layer.N.attention.attention.query`,
  "classic", through transformers 4 and early 5.x; `layers.N.attention.q_proj`, "current"); `layout` picks, by
  default the one the installed transformers' class has (read off it, logged). `load_adapters` also reads a folder peft wrote for a transformers ViT / DINOv2 (either
  layout, told by its module names) onto the matching vitkit model (`load_peft_adapters`); peft records no
  identity of its base, so a base is refused when its shapes, depth or modules do not fit the adapters. Its
  `base_model_name_or_path` and `revision` are written and read as vitkit's record is (a hub id: formats/hub.py).
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from vitkit.formats import families
from vitkit.formats.common import read_tensors
from vitkit.formats.hf import BLOCK_KEYS, vit_to_hf_config
from vitkit.formats.hf_families import family_problems, hf_family
from vitkit.formats.hub import is_hub_id
from vitkit.models.lora import TARGETS, LoraConfig, apply_lora, base_fingerprint, lora_state
from vitkit.models.preprocess import PreprocessConfig
from vitkit.models.vit import VisionTransformer, ViTConfig
from vitkit.utils.atomic import atomic_write_text, atomic_write_with
from vitkit.utils.files import read_json

log = logging.getLogger(__name__)

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
FORMAT_TAG = "vitkit-lora"
LAYOUTS = ("classic", "current")
BLOCK_LINEARS = ("q", "k", "v", "attn.proj", "mlp.fc1", "mlp.fc2")  # the block modules LoRA adapts (models/lora.py)
# the families whose transformers class peft's adapters are written for and read on (their `peft_modules`)
PEFT_FAMILIES = tuple(f for f in families.FAMILIES if any(f.peft_modules(k, "classic") for k in f.hf_model_types))


def _lora_of(model: nn.Module) -> LoraConfig:
    cfg = getattr(model, "lora_config", None)
    if cfg is None:
        raise ValueError("this model carries no LoRA adapters (vitkit.models.lora.apply_lora)")
    return cfg


def _fresh_folder(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(20, "an adapter folder was to be written where a file is", str(out))
    present = [n for n in (CONFIG_NAME, WEIGHTS_NAME) if (out / n).exists()]
    if present and not overwrite:
        raise FileExistsError(f"{out} already holds adapters ({', '.join(present)}); choose another folder or "
                              "pass overwrite=True")
    out.mkdir(parents=True, exist_ok=True)


def _write(out: Path, doc: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    atomic_write_with(out / WEIGHTS_NAME, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    atomic_write_text(out / CONFIG_NAME, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return out


def base_record(model: nn.Module, base: str | Path = "") -> dict[str, str]:
    """Where `load_adapters` finds the base of `model`'s adapters again: {"base_model": hub id, "base_revision":
    commit} when `base` is (or, left empty, the model records) the Hugging Face hub repo its weights came from
    (`config.extra["pretrained"]`, set by load_pretrained), else {"base_model": the absolute path of `base`}; an
    empty `base` of a model from elsewhere records none. A `base` that is neither is refused, by name."""
    known = (getattr(getattr(model, "config", None), "extra", None) or {}).get("pretrained") or {}
    hub_id, commit = known.get("hf_hub_id"), known.get("revision")
    text = str(base)
    if hub_id and commit and text in ("", hub_id):
        return {"base_model": hub_id, "base_revision": commit}
    if not text:
        return {"base_model": ""}
    if Path(text).exists():
        return {"base_model": str(Path(text).resolve())}
    if is_hub_id(text):
        raise ValueError(f"base {text!r}: a hub id, but this model's weights are not recorded as loaded from it "
                         f"({'they came from ' + hub_id if hub_id else 'no hub repo is recorded'}): load the base "
                         f"with vitkit.load_pretrained({text!r}), which records its commit")
    raise FileNotFoundError(f"base {text!r}: no checkpoint at that path (the adapters record where their base is "
                            "found again): give the base's folder or file, or its hub id")


def save_adapters(model: VisionTransformer, out: str | Path, base: str | Path = "", *, format: str = "vitkit",
                  layout: str | None = None, overwrite: bool = False) -> Path:
    """Write `model`'s adapters (not its base weights) to the folder `out`: vitkit's layout, or (`format="peft"`)
    peft's for transformers' ViT / DINOv2 classes (`layout`: "classic" or "current" module names). `base` is the
    base checkpoint (a path, or the hub id it was loaded by), recorded for `load_adapters` (`base_record`)."""
    cfg = _lora_of(model)
    out = Path(out)
    record = base_record(model, base)
    if format == "peft":
        doc, tensors = peft_adapters(model, layout, record["base_model"])
        doc["revision"] = record.get("base_revision")
    elif format == "vitkit":
        doc = {"format": FORMAT_TAG, "lora": cfg.to_dict(), **record,
               "base_fingerprint": model.lora_base_hash, "model": model.config.to_dict(),
               "preprocess": model.preprocess.to_dict()}
        tensors = lora_state(model)
    else:
        raise ValueError(f"unknown adapter format {format!r}; choose vitkit or peft")
    _fresh_folder(out, overwrite)
    return _write(out, doc, tensors)


def _adapter_doc(folder: Path) -> dict[str, Any]:
    """adapter_config.json of an adapter folder (either layout), read through the one JSON door (`read_json`: a
    regular file, never a FIFO or a device; bounded in size; never a RecursionError)."""
    path = folder / CONFIG_NAME
    if not (path.exists() or path.is_symlink()):
        raise FileNotFoundError(f"no {CONFIG_NAME} in {folder}: not an adapter folder")
    doc = read_json(path, "adapter config")
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return doc


def _adapter_weights(path: Path, doc_rank: int) -> dict[str, torch.Tensor]:
    """The adapter weights through the one tensor door (`read_tensors`: a regular file, bounded, every tensor
    floating point and finite), and the config's rank against the rank the weights hold (every LoRA A is r x in)
    before any adapter is allocated (a config's rank 10^9 is refused, not allocated)."""
    state = read_tensors(path, "adapter weights", all_weights=True)
    for key, t in state.items():
        if "lora_A" in key and (t.ndim != 2 or t.shape[0] != doc_rank):
            raise ValueError(f"{path}: {key} has shape {tuple(t.shape)}, but {CONFIG_NAME} says rank {doc_rank:,} "
                             "(the config and the weights disagree)")
    return state


def read_adapter_config(folder: str | Path) -> dict[str, Any]:
    """adapter_config.json of a vitkit adapter folder, checked for what `load_adapters` needs (peft's: see
    `load_peft_adapters`)."""
    path = Path(folder) / CONFIG_NAME
    doc = _adapter_doc(Path(folder))
    if doc.get("format") != FORMAT_TAG:
        what = "peft's adapter config (load_adapters / load_peft_adapters read it)" if "peft_type" in doc else \
            f"format {doc.get('format')!r}"
        raise ValueError(f"{path}: {what}; vitkit loads its own adapter folders (\"format\": \"{FORMAT_TAG}\")")
    missing = [k for k in ("lora", "base_fingerprint", "model", "preprocess") if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing {missing}")
    return doc


def load_adapters(folder: str | Path, base: str | Path | nn.Module | None = None) -> VisionTransformer:
    """The fine-tuned model of a vitkit adapter folder, in eval mode with its adapters on (merge with
    `vitkit.models.lora.merge_lora`): the base checkpoint (`base`: a path, an already loaded model, or None for
    the path the folder records) after the fine-tune's head and resolution change, with the adapters and the
    trained tensors loaded. A base whose weights do not hash to the recorded fingerprint is refused."""
    from vitkit.formats import adapt

    folder = Path(folder)
    peft_doc = _adapter_doc(folder)
    if "peft_type" in peft_doc:
        return load_peft_adapters(folder, base, peft_doc)
    doc = read_adapter_config(folder)
    try:
        lcfg = LoraConfig.from_dict(doc["lora"])
        tuned = ViTConfig.from_dict(doc["model"])
        pre = PreprocessConfig.from_dict(doc["preprocess"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{folder / CONFIG_NAME}: {e}") from e
    revision = None
    state = _adapter_weights(folder / WEIGHTS_NAME, lcfg.rank)
    if base is None:
        base, revision = doc.get("base_model") or None, doc.get("base_revision") or None
        if base is None:
            raise ValueError(f"{folder / CONFIG_NAME} records no base checkpoint: pass base=")
    hints = {k: getattr(tuned, k) for k in ("num_heads", "gelu", "ln_eps", "pooling", "layer_scale")}
    model, where = _base_model(base, {**hints, **({"revision": revision} if revision else {})})
    found = base_fingerprint(model)
    if found != doc["base_fingerprint"]:
        raise ValueError(f"{where} is not the base these adapters were trained on: its weights hash to "
                         f"{found[:16]}..., the adapters' base to {str(doc['base_fingerprint'])[:16]}... "
                         f"({folder})")
    model = adapt(model, num_classes=tuned.num_classes, img_size=tuned.img_size)
    apply_lora(model, lcfg)
    want = lora_state(model)
    if set(state) != set(want):
        extra, missing = sorted(set(state) - set(want)), sorted(set(want) - set(state))
        raise ValueError(f"{folder / WEIGHTS_NAME} does not fit its config: missing {missing[:4]}, unexpected "
                         f"{extra[:4]}")
    with torch.no_grad():
        for k, p in want.items():
            if state[k].shape != p.shape:
                raise ValueError(f"{folder / WEIGHTS_NAME}: {k} has shape {tuple(state[k].shape)}, expected "
                                 f"{tuple(p.shape)}")
            p.copy_(state[k])
    model.preprocess = pre
    return model.eval()


def _base_model(base: str | Path | nn.Module, hints: dict[str, Any] | None = None) -> tuple[VisionTransformer, str]:
    """(the base ViT, how to name it in a message): `base` itself, or the checkpoint at that path or hub id
    (`hints`: load_pretrained's keywords, a hub id's `revision` among them)."""
    from vitkit.formats import load_pretrained

    if isinstance(base, nn.Module):
        model, where = base, "the base model given"
    else:
        model, where = load_pretrained(base, **(hints or {})), str(base)
        if (hints or {}).get("revision"):
            where += f" (revision {hints['revision']})"
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{where}: LoRA adapters go on a ViT, got a {type(model).__name__}")
    return model, where


# ----------------------------------------------------------------------------- peft's layout
def default_layout(model: VisionTransformer) -> str:
    """The layout ("classic" or "current") whose attention module names (`_peft_module_map`'s, the ones the writer
    uses) the installed transformers' class for `model` has, read off a one-block instance of that class: not told by
    the version (5.x releases before the rename still use the classic names). Without transformers, or where the
    class has neither, refused: pass layout=."""
    try:
        import transformers
    except ImportError:
        raise ValueError("peft adapters name transformers' modules, which differ between transformers releases "
                         "(classic / current); transformers is not installed here: pass layout=") from None
    hf_type = hf_family(model.config) or "vit"
    small = transformers.AutoConfig.for_model(hf_type, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=16)
    have = {n for n, _ in transformers.AutoModel.from_config(small).named_modules()}
    attention = {layout: {n for n, (i, t) in table.items() if i == 0 and t in ("q", "k", "v", "proj")}
                 for layout, table in _peft_module_map(model).items()}
    found = [layout for layout, names in attention.items() if names <= have]
    if len(found) != 1:
        raise ValueError(f"transformers {transformers.__version__}'s {hf_type} names its attention modules in "
                         f"{'both' if found else 'neither'} of the layouts vitkit writes "
                         f"({'; '.join(sorted(n for names in attention.values() for n in names))}): pass layout=")
    log.warning("peft adapter module names: %s layout (read off transformers %s's %s); pass layout= for the other",
                found[0], transformers.__version__, hf_type)
    return found[0]


def _hf_modules(model: VisionTransformer, layout: str) -> tuple[str, dict[str, str], str]:
    """(module prefix of block i, {vitkit block module: transformers module}, classifier name) of the
    transformers class `model` saves as; refused, with the reasons, when it saves as none peft can adapt here."""
    cfg = model.config
    kind = hf_family(cfg)
    if kind is None:
        vit_to_hf_config(model)  # raises naming what a transformers ViT cannot hold
        names = BLOCK_KEYS[layout]
        base = "vit." if cfg.num_classes > 0 else ""
        return base + names["prefix"], {k: names[k] for k in BLOCK_LINEARS}, "classifier"
    fam = families.family_of_hf_type(kind)
    found = fam.peft_modules(kind, layout) if fam is not None else None
    if fam is None or found is None:
        raise ValueError(f"peft adapters are written for models that save as transformers' "
                         f"{' or '.join(['ViT', *(f.name for f in PEFT_FAMILIES)])}; this one saves as {kind!r}: merge "
                         "the adapters (merge_lora) or save them in vitkit's layout")
    problems = family_problems(kind, model)
    if problems:
        raise ValueError(f"cannot save as a Hugging Face {fam.name}: " + "; ".join(problems))
    prefix, names = found
    return prefix, {k: names[k] for k in BLOCK_LINEARS}, ""


def peft_adapters(model: VisionTransformer, layout: str | None = None, base: str = ""
                  ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """adapter_config.json and the tensors of `model`'s adapters in peft's layout (see the module docstring)."""
    cfg = _lora_of(model)
    layout = layout or default_layout(model)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if set(cfg.train) - {"head"}:
        raise ValueError(f"peft's LoRA file holds the adapters and the classifier; this model also trained "
                         f"{sorted(set(cfg.train) - {'head'})}: save it in vitkit's layout or merged")
    prefix, names, classifier = _hf_modules(model, layout)
    state = lora_state(model)
    tensors: dict[str, torch.Tensor] = {}
    modules: list[str] = []
    for i, blk in enumerate(model.blocks):
        for t in cfg.targets:
            path, _ = TARGETS[t]
            ours = names[t if t in ("q", "k", "v") else path]
            theirs = prefix.format(i=i) + ours
            modules.append(theirs)
            m = blk.get_submodule(path)
            tensors[f"base_model.model.{theirs}.lora_A.weight"] = m.lora_A[t]
            tensors[f"base_model.model.{theirs}.lora_B.weight"] = m.lora_B[t]
    saved = []
    if "head" in cfg.train and model.config.num_classes > 0 and classifier:
        saved = [classifier]
        for p in ("weight", "bias"):
            tensors[f"base_model.model.{classifier}.{p}"] = state[f"head.{p}"]
    doc = {"peft_type": "LORA", "r": cfg.rank, "lora_alpha": cfg.alpha, "lora_dropout": cfg.dropout,
           "target_modules": sorted(modules), "modules_to_save": saved or None, "bias": "none",
           "fan_in_fan_out": False, "init_lora_weights": True, "inference_mode": True, "task_type": None,
           "use_rslora": False, "use_dora": False, "rank_pattern": {}, "alpha_pattern": {},
           "layers_to_transform": None, "layers_pattern": None, "revision": None,
           "base_model_name_or_path": str(base) or None}
    return doc, tensors


# peft's LoRA options vitkit's LoraLinear cannot hold, with the value that it can
PEFT_PLAIN = {"use_dora": False, "fan_in_fan_out": False, "bias": "none"}
PEFT_KEY = re.compile(r"^base_model\.model\.(?P<module>.+?)\.(?P<part>lora_A|lora_B)\.weight$")
# a *ForImageClassification's backbone attribute (peft on it prefixes its names): ViT's, and the families'
HF_BASES = ("vit.", *(b for f in PEFT_FAMILIES for b in f.hf_bases))


def _peft_lora_config(doc: dict[str, Any], path: Path, targets: tuple[str, ...], head: bool) -> LoraConfig:
    """The LoraConfig equal to peft's `doc`; what LoraLinear cannot hold is refused by name."""
    if doc.get("peft_type") != "LORA":
        raise ValueError(f"{path}: peft_type {doc.get('peft_type')!r}; vitkit reads LoRA adapters (\"LORA\")")
    for k, plain in PEFT_PLAIN.items():
        if doc.get(k, plain) not in (plain, None):
            raise ValueError(f"{path}: {k} = {doc[k]!r}; vitkit's LoRA reads only {k} = {plain!r}")
    for k in ("rank_pattern", "alpha_pattern"):
        if doc.get(k):
            raise ValueError(f"{path}: {k} {doc[k]} gives modules their own rank / alpha; vitkit's LoRA has one "
                             "rank and alpha for all")
    if not isinstance(doc.get("r"), int) or isinstance(doc.get("r"), bool) or doc["r"] < 1:
        raise ValueError(f"{path}: r must be a positive whole number (the LoRA rank), got {doc.get('r')!r}")
    if not isinstance(doc.get("lora_alpha"), (int, float)) or isinstance(doc.get("lora_alpha"), bool):
        raise ValueError(f"{path}: lora_alpha must be a number, got {doc.get('lora_alpha')!r}")
    rank, alpha = doc["r"], float(doc["lora_alpha"])
    if doc.get("use_rslora"):  # rsLoRA scales by alpha / sqrt(r): the same update as alpha * sqrt(r) / r
        alpha *= math.sqrt(rank)
    try:
        return LoraConfig(rank=rank, alpha=alpha, dropout=float(doc.get("lora_dropout") or 0.0), targets=targets,
                          train=("head",) if head else ())
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def _peft_module_map(model: VisionTransformer) -> dict[str, dict[str, tuple[int, str]]]:
    """{layout: {transformers module name (without a classifier's backbone prefix): (block, LoRA target)}} of the
    transformers class `model` saves as."""
    out = {}
    for layout in LAYOUTS:
        prefix, names, _ = _hf_modules(model, layout)
        prefix = prefix.removeprefix("vit.")
        out[layout] = {prefix.format(i=i) + names[t if t in ("q", "k", "v") else TARGETS[t][0]]: (i, t)
                       for i in range(len(model.blocks)) for t in TARGETS}
    return out


def load_peft_adapters(folder: str | Path, base: str | Path | nn.Module | None = None,
                       doc: dict[str, Any] | None = None) -> VisionTransformer:
    """The model of an adapter folder peft wrote for a transformers ViT or DINOv2 (`PeftModel.save_pretrained`):
    the base (`base`: a checkpoint path or a loaded model; None: the config's base_model_name_or_path when that is
    a folder here) with vitkit's LoRA on the same modules and peft's A and B in it, and a trained classifier (a
    `modules_to_save`) as the head; in eval mode, adapters unmerged. q, k and v are transformers' separate Linears,
    each vitkit's slice of the fused qkv. Blocks peft left without an adapter (layers_to_transform) get vitkit's
    untrained one (B = 0: no change). Refused, by name: a base whose modules, depth or widths do not fit, and peft
    options vitkit's LoRA cannot hold (DoRA, per-module ranks, LoRA on biases, other modules_to_save)."""
    from vitkit.formats import adapt

    folder = Path(folder)
    path = folder / CONFIG_NAME
    doc = doc if doc is not None else _adapter_doc(folder)
    if "peft_type" not in doc:
        raise ValueError(f"{path}: not peft's adapter config (no peft_type)")
    weights = folder / WEIGHTS_NAME
    if not (weights.exists() or weights.is_symlink()):
        other = [n.name for n in folder.glob("adapter_model.*") if n.name != WEIGHTS_NAME]
        raise FileNotFoundError(f"no {WEIGHTS_NAME} in {folder}" + (f" (found {other}: vitkit never unpickles a .bin; "
                                                                    "re-save with safe_serialization=True)" if other else ""))
    revision = None
    if base is None:
        recorded = doc.get("base_model_name_or_path")
        if not recorded or not (Path(recorded).exists() or is_hub_id(recorded)):
            raise ValueError(f"{path} names its base as {recorded!r}, not a checkpoint here nor a hub id: pass base= "
                             "(the transformers ViT / DINOv2 checkpoint the adapters were trained on)")
        base, revision = recorded, doc.get("revision") or None
    if not isinstance(doc.get("r"), int) or isinstance(doc.get("r"), bool):
        _peft_lora_config(doc, path, ("q",), False)  # names the bad rank before anything is read
    state = _adapter_weights(weights, doc["r"])
    model, where = _base_model(base, {"revision": revision} if revision else None)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    saved: dict[str, torch.Tensor] = {}
    for k, t in state.items():
        m = PEFT_KEY.match(k)
        if m:
            pairs.setdefault(m["module"], {})[m["part"]] = t
        elif k.startswith("base_model.model."):
            saved[k.removeprefix("base_model.model.")] = t
        else:
            raise ValueError(f"{weights}: {k} is not a key peft writes for LoRA (base_model.model.<module>.lora_[AB]"
                             ".weight)")
    if not pairs:
        raise ValueError(f"{weights} holds no LoRA tensors (lora_A / lora_B)")
    kind = hf_family(model.config) or "vit"
    modules = {_strip_backbone(name): name for name in pairs}
    maps = _peft_module_map(model)
    layout = next((lay for lay, table in maps.items() if set(modules) <= set(table)), None)
    if layout is None:
        table = max(maps.values(), key=lambda t: len(set(modules) & set(t)))
        bad = sorted(set(modules) - set(table))
        raise ValueError(f"{folder}: the adapters name {modules[bad[0]]!r}" + (f" (and {len(bad) - 1} more)" if
                         len(bad) > 1 else "") + f", which {where} (a {model.config.depth}-block model saving as "
                         f"transformers {kind}) has no LoRA target of that name (its q, k, v, attention output and "
                         "MLP Linears): the adapters belong to another base or target modules vitkit cannot adapt")
    placed = {maps[layout][ours]: modules[ours] for ours in modules}  # (block, target) -> peft's module name
    targets = tuple(t for t in TARGETS if any(tt == t for _, tt in placed))
    heads = sorted(saved)
    head = _peft_head(saved, weights, kind)
    lcfg = _peft_lora_config(doc, path, targets, head is not None)
    if head is not None and head.shape[0] != model.config.num_classes:
        model = adapt(model, num_classes=head.shape[0])
    apply_lora(model, lcfg)
    missing = []
    with torch.no_grad():
        for i, blk in enumerate(model.blocks):
            for t in targets:
                lin = blk.get_submodule(TARGETS[t][0])
                name = placed.get((i, t))
                if name is None:
                    missing.append(f"{i}.{t}")
                    continue
                for part, mine in (("lora_A", lin.lora_A[t]), ("lora_B", lin.lora_B[t])):
                    got = pairs[name].get(part)
                    if got is None:
                        raise ValueError(f"{weights}: {name} has no {part}")
                    if got.shape != mine.shape:
                        raise ValueError(f"{weights}: {name}.{part} is {tuple(got.shape)}, {where}'s block {i} "
                                         f"{t} takes {tuple(mine.shape)} (rank {lcfg.rank}): the adapters were "
                                         "trained on another base")
                    mine.copy_(got)
        if head is not None:
            w, b = saved["classifier.weight"], saved.get("classifier.bias")
            if w.shape != model.head.weight.shape or (b is not None and b.shape != model.head.bias.shape):
                raise ValueError(f"{weights}: classifier.weight is {tuple(w.shape)}, {where}'s head takes "
                                 f"{tuple(model.head.weight.shape)}")
            model.head.weight.copy_(w)
            if b is not None:
                model.head.bias.copy_(b)
    if missing:
        log.warning("%s: no adapter for %d of %d (block, target) pairs (%s...): vitkit's untrained one there "
                    "(B = 0, no change)", folder, len(missing), len(model.blocks) * len(targets),
                    ", ".join(missing[:4]))
    log.info("%s: peft LoRA (r %d, alpha %g, %s layout, targets %s%s) on %s", folder, lcfg.rank, lcfg.alpha, layout,
             ", ".join(targets), ", classifier" if heads else "", where)
    return model.eval()


def _strip_backbone(name: str) -> str:
    """A module name without a *ForImageClassification's backbone prefix (`HF_BASES`: vit., dinov2., ...)."""
    for b in HF_BASES:
        if name.startswith(b):
            return name[len(b):]
    return name


def _peft_head(saved: dict[str, torch.Tensor], weights: Path, kind: str) -> torch.Tensor | None:
    """The classifier weight among peft's `modules_to_save` tensors (None without one); anything else refused."""
    other = sorted(k for k in saved if not k.startswith("classifier."))
    if other:
        raise ValueError(f"{weights}: modules_to_save {other[:4]}: vitkit reads the classifier only (merge the "
                         "adapters in peft and load the merged checkpoint instead)")
    if not saved:
        return None
    if kind != "vit":
        raise ValueError(f"{weights}: a {kind} classifier as modules_to_save; vitkit reads a transformers "
                         "ViTForImageClassification's (its head sees the class token only)")
    if "classifier.weight" not in saved:
        raise ValueError(f"{weights}: classifier tensors without classifier.weight")
    return saved["classifier.weight"]
