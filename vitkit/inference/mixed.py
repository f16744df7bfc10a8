"""Mixed-precision int8 (issue 53): the few layers that carry int8's error kept in float, chosen by a measured rule
and said, never guessed.

Static int8 quantises each layer's input per tensor with the min / max range seen on the calibration images
(`quantize_static_int8`, `quantize_openvino_int8`). Where a layer's input has rare values far larger than its
typical ones (DINOv2's late blocks: the residual stream's max |x| grows past 30 by the last block, its LayerScale
past 5), that one range leaves few int8 levels for the typical values, and where a layer's error is amplified on its
way to the output (LayerScale, the later blocks), a few layers carry most of the model's int8 error.
`layer_errors` measures each layer's share on the user's calibration images: the model's output with that layer
alone rounded as static int8 rounds it, against fp32. `keep_float` turns a user's `--int8-keep-float` (N: the N
layers with the largest measured error; or layer names) into a `KeepFloat`: the layers, the rule that chose them
and the measured errors, which the export stores in its metadata (`INT8_KEY`) and every command logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch import nn

#: the metadata key (ONNX metadata_props; OpenVINO rt_info ["vitkit", "int8"]) of an int8 export's mixed precision
INT8_KEY = "vitkit.int8"
#: calibration images `layer_errors` measures on at most (one forward pass over them per layer)
SENSITIVITY_IMAGES = 8
#: int8 levels of a static activation range (u8) and the weight levels per sign (7-bit, onnxruntime's reduce_range)
ACT_LEVELS, WEIGHT_LEVELS = 255, 63


@dataclass(frozen=True)
class KeepFloat:
    """The layers an int8 graph keeps in float (`layers`, module paths), the rule that chose them (`rule`, one line
    for logs and metadata) and the measured relative int8 error of every candidate layer (`errors`, largest first;
    empty where the user named the layers)."""

    layers: tuple[str, ...]
    rule: str
    errors: dict[str, float] = field(default_factory=dict)

    def as_doc(self) -> dict[str, object]:
        """The JSON stored with the export (`INT8_KEY`): the kept layers, the rule, the 12 largest errors."""
        top = dict(list(self.errors.items())[:12])
        return {"keep_float": list(self.layers), "rule": self.rule, "errors": {k: round(v, 5) for k, v in top.items()}}

    def describe(self) -> str:
        kept = ", ".join(self.layers) or "none"
        return f"layers kept in float: {kept} ({self.rule})"


def _fake_int8_weight(w: torch.Tensor) -> torch.Tensor:
    """`w` rounded per output channel (dim 0) to symmetric 7-bit int8, as onnxruntime's static int8 stores it."""
    flat = w.reshape(len(w), -1)
    scale = flat.abs().amax(1).clamp_min(1e-12) / WEIGHT_LEVELS
    return (torch.round(flat / scale[:, None]).clamp(-WEIGHT_LEVELS, WEIGHT_LEVELS) * scale[:, None]).reshape(w.shape)


def _int8_output(m: nn.Module, x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Layer `m` (Linear / Conv2d) on `x` as static int8 computes it: `x` rounded to the u8 grid of [lo, hi] (its
    min / max range, 0 included), the weight to the int8 graph's per-channel grid, the sum and bias in float."""
    step = max(hi - lo, 1e-12) / ACT_LEVELS
    xq = torch.round((x - lo) / step).clamp(0, ACT_LEVELS) * step + lo
    w = _fake_int8_weight(m.weight)
    return m._conv_forward(xq, w, m.bias) if isinstance(m, nn.Conv2d) else nn.functional.linear(xq, w, m.bias)


@torch.no_grad()
def layer_errors(model: nn.Module, calibration: torch.Tensor, layers: list[str], batch_size: int = 8,
                 most: int = SENSITIVITY_IMAGES) -> dict[str, float]:
    """{layer: the relative error of the model's output with that layer alone in int8} for each of `layers`
    (module paths of `model`'s Linears / Convs), measured on the first `most` of `calibration` (normalised images,
    N x C x H x W): the layer's input rounded to the u8 grid of its min / max range over those images (static
    int8's activation quantisation) and its weight to the int8 graph's per-channel 7-bit grid, everything else fp32;
    ||out_int8 - out|| / ||out|| over the images. One forward pass per layer (plus one), so what a layer's error
    becomes downstream (LayerScale, later blocks, the final norm) is in its figure. Largest first."""
    mods = dict(model.named_modules())
    missing = [n for n in layers if not isinstance(mods.get(n), (nn.Linear, nn.Conv2d))]
    if missing:
        raise ValueError(f"int8 layers {', '.join(missing)}: not Linear / Conv2d modules of the model")
    batches = list(calibration[:most].float().split(batch_size))
    lo = {n: 0.0 for n in layers}
    hi = {n: 0.0 for n in layers}

    def observe(n: str):  # noqa: ANN202
        def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            lo[n], hi[n] = min(lo[n], inp[0].min().item()), max(hi[n], inp[0].max().item())
        return hook

    was = model.training
    model.eval()
    hooks = [mods[n].register_forward_hook(observe(n)) for n in layers]
    try:
        ref = [model(b).float() for b in batches]
    finally:
        for h in hooks:
            h.remove()
    norm = sum(r.pow(2).sum().item() for r in ref) ** 0.5
    errors = {}
    try:
        for n in layers:
            h = mods[n].register_forward_hook(lambda m, inp, out, n=n: _int8_output(m, inp[0], lo[n], hi[n]))
            try:
                errors[n] = sum((model(b).float() - r).pow(2).sum().item() for b, r in zip(batches, ref)) ** 0.5
            finally:
                h.remove()
    finally:
        model.train(was)
    return dict(sorted(((n, e / max(norm, 1e-30)) for n, e in errors.items()), key=lambda kv: -kv[1]))


def parse_keep_float(text: str | None) -> int | tuple[str, ...]:
    """`--int8-keep-float`: a count N (the N layers with the largest measured int8 error) or comma-separated layer
    names; 0 / None: none."""
    if text is None or not str(text).strip():
        return 0
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in names if not re.fullmatch(r"[A-Za-z0-9_.]+", t)]
    if bad:
        raise ValueError(f"--int8-keep-float: {', '.join(bad)} is neither a count nor a layer name (e.g. 3, or "
                         "blocks.11.mlp.fc2,blocks.10.mlp.fc2)")
    return names


def check_keep_float(spec: int | tuple[str, ...], precision: str, calibrated: bool) -> None:
    """`--int8-keep-float`'s checks before any work: it applies to int8 only, and a count N needs calibration
    images (the errors it ranks are measured on them)."""
    if not spec:
        return
    if precision != "int8":
        raise ValueError(f"--int8-keep-float chooses the layers int8 keeps in float; precision is {precision}: add "
                         "--precision int8")
    if isinstance(spec, int) and not calibrated:
        raise ValueError(f"--int8-keep-float {spec} keeps the {spec} layers with the largest int8 error measured on "
                         "your images: give --calibrate DIR (static int8), or name the layers")


def check_known_layers(names: tuple[str, ...], layers: list[str] | dict[str, list[str]]) -> None:
    """A ValueError naming the layers of `names` that are not among the graph's quantisable `layers`."""
    unknown = [n for n in names if n not in layers]
    if unknown:
        raise ValueError(f"--int8-keep-float: {', '.join(unknown)} not among the graph's quantisable layers "
                         f"({', '.join(layers) or 'none'})")


def keep_float(model: nn.Module, calibration: torch.Tensor | None, spec: int | tuple[str, ...],
               layers: list[str]) -> KeepFloat:
    """The layers of an int8 graph kept in float for `spec` (`parse_keep_float`): N, the N of `layers` (the graph's
    quantisable layers, `quantisable_layers`) with the largest `layer_errors` on `calibration`; names, those (each
    must be one of `layers`). N needs calibration images (the error is measured on them)."""
    if isinstance(spec, tuple):
        check_known_layers(spec, layers)
        return KeepFloat(spec, "named by the user")
    if spec < 0 or spec > len(layers):
        raise ValueError(f"--int8-keep-float {spec}: the graph has {len(layers)} quantisable layers (0 to "
                         f"{len(layers)})")
    if spec == 0:
        return KeepFloat((), "all int8")
    check_keep_float(spec, "int8", calibration is not None)
    mods = dict(model.named_modules())
    candidates = [n for n in layers if isinstance(mods.get(n), (nn.Linear, nn.Conv2d))]
    if len(candidates) < spec:
        raise ValueError(f"--int8-keep-float {spec}: only {len(candidates)} of the graph's layers ({', '.join(layers)})"
                         " are Linear / Conv2d modules of the model whose error can be measured")
    return most_sensitive(layer_errors(model, calibration, candidates), spec, min(len(calibration),
                                                                                  SENSITIVITY_IMAGES))


def most_sensitive(errors: dict[str, float], n: int, images: int) -> KeepFloat:
    """The `n` layers of `errors` (`layer_errors`, measured on `images` images) with the largest error."""
    chosen = tuple(sorted(errors, key=lambda k: -errors[k])[:n])
    return KeepFloat(chosen, f"the {n} of {len(errors)} layers whose int8 alone moves the output most, measured on "
                             f"{images} calibration images", dict(sorted(errors.items(), key=lambda kv: -kv[1])))
