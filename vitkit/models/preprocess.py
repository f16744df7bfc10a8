"""The preprocessing contract a model carries: what an image must become to be this model's input.

Saved with every checkpoint, so `predict` needs no flags to match training (paper §3.2 fine-tunes and evaluates at
a declared resolution). The original code scales pixels to [-1, 1] ((x - 127.5) / 127.5, i.e. mean = std = 0.5)
and, at evaluation, resizes to the final size without a crop; that is the default here. timm's crop_pct / crop_mode
and Hugging Face's processors map onto the same fields (vitkit.formats). Decoding files is the data layer's
(vitkit.data.preprocess); this module only transforms tensors.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from vitkit.models.packing import native_grid

# Reduced decoding at evaluation keeps 8x the model's input: reducing down to 1x (as before) moved single pixels by
# up to 0.39 (on [0, 1]) against a full decode + Pillow's bilinear resize (Hugging Face's ViTImageProcessor), 2x by
# up to 0.33; 8x stayed within mean 0.0012 / max 0.022 up to 17x the input size (BENCHMARKS.md, "Huge images").
EVAL_DECODE_MARGIN = 8
CROP_MODES = ("center", "squash")
MAX_RESIZE_RATIO = 64  # the resize before a centre crop: at most this many times the model's input pixels
CROP_OFFSETS = ("round", "floor")
# the resizes vitkit reproduces (Pillow's / transformers' / timm's); another torch mode name ("linear", "area") failed
# inside torch.nn.functional.interpolate (NotImplementedError) or resized as no reference does
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")


def _unit(x: torch.Tensor) -> torch.Tensor:
    """uint8 pixels as floats in [0, 1] (x / 255 in float32); floats as they are."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x


def exact_crop_pct(crop: int, resize: int) -> float:
    """crop / resize as a crop_pct from which `PreprocessConfig.scale_size`'s floor(crop / crop_pct) gives `resize`
    back exactly (crop / (crop / resize) lands just below the integer for many pairs, e.g. 14 / (14 / 25) = 24.999...)."""
    pct = crop / resize
    return pct if math.floor(crop / pct) == resize else math.nextafter(pct, 0.0)


@dataclass
class PreprocessConfig:
    img_size: tuple[int, int] = (224, 224)
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    interpolation: str = "bilinear"
    crop_pct: float | None = None  # None: resize to img_size without crop (the original's evaluation)
    crop_mode: str = "center"  # with crop_pct, timm's: "center" (shorter side to size / crop_pct, centre crop)
    # or "squash" (both sides to size / crop_pct, centre crop)
    labels: list[str] = field(default_factory=list)
    # where an odd margin puts the centre crop: "round" (torchvision's CenterCrop, timm: int(round(margin / 2))) or
    # "floor" (transformers' center_crop: margin // 2); one pixel apart
    crop_offset: str = "round"

    def __post_init__(self) -> None:
        self.img_size = (int(self.img_size[0]), int(self.img_size[1]))
        self.mean = tuple(float(m) for m in self.mean)
        self.std = tuple(float(s) for s in self.std)
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean has {len(self.mean)} entries but std has {len(self.std)}")
        if not all(math.isfinite(m) for m in self.mean) or not all(math.isfinite(s) and s > 0 for s in self.std):
            raise ValueError(f"preprocessing mean {list(self.mean)} / std {list(self.std)}: every mean must be finite "
                             "and every std a finite number > 0 (else every input becomes NaN or Inf)")
        if self.crop_pct is not None and not (isinstance(self.crop_pct, (int, float)) and 0.05 <= self.crop_pct <= 1):
            raise ValueError(f"preprocessing crop_pct must be in [0.05, 1] (or none), got {self.crop_pct!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"preprocessing interpolation must be one of {', '.join(INTERPOLATIONS)}, got "
                             f"{self.interpolation!r}")
        if self.crop_mode not in CROP_MODES:
            raise ValueError(f"preprocessing crop_mode must be one of {', '.join(CROP_MODES)}, got {self.crop_mode!r}")
        if self.crop_offset not in CROP_OFFSETS:
            raise ValueError(f"preprocessing crop_offset must be one of {', '.join(CROP_OFFSETS)}, got "
                             f"{self.crop_offset!r}")

    @property
    def channels(self) -> int:
        return len(self.mean)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["img_size"], d["mean"], d["std"] = list(self.img_size), list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PreprocessConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_timm(cls, pc: dict[str, Any], default: "PreprocessConfig", labels: list[str] | None = None
                  ) -> "PreprocessConfig":
        """timm's pretrained_cfg (mean, std, interpolation, crop_pct, crop_mode) as vitkit's preprocessing at
        `default`'s size, `default`'s values where `pc` has none. timm's evaluation resizes to size / crop_pct, then
        centre-crops (1.0 crops the longer side too); "squash" with 1.0 is a plain resize, vitkit's no-crop."""
        interpolation = pc.get("interpolation", default.interpolation)
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"pretrained_cfg interpolation {interpolation!r}: vitkit resizes with bilinear, bicubic "
                             "or nearest")
        crop, mode = pc.get("crop_pct"), pc.get("crop_mode") or "center"
        if mode not in CROP_MODES:
            raise ValueError(f"pretrained_cfg crop_mode {mode!r}: vitkit reproduces timm's 'center' and 'squash' crops")
        squash_whole = crop is None or (mode == "squash" and float(crop) == 1.0)
        return cls(img_size=default.img_size, mean=tuple(pc.get("mean", default.mean)),
                   std=tuple(pc.get("std", default.std)), interpolation=interpolation,
                   crop_pct=None if squash_whole else float(crop), crop_mode=mode, labels=list(labels or []))

    def to_timm(self) -> dict[str, Any]:
        """timm's pretrained_cfg preprocessing fields for this preprocessing (the inverse of `from_timm`): no crop is
        crop_pct 1.0 with "squash", a plain resize in timm."""
        return {"input_size": [self.channels, *self.img_size], "mean": list(self.mean), "std": list(self.std),
                "interpolation": self.interpolation,
                "crop_pct": self.crop_pct if self.crop_pct is not None else 1.0,
                "crop_mode": self.crop_mode if self.crop_pct is not None else "squash"}

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) floats in [0, 1] (or uint8 pixels) -> normalised model input."""
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        return (x - mean) / std

    def resize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, h, w) in [0, 1] to img_size, as floats. uint8 pixels (0..255) are resized in uint8 by torch's
        antialiased kernels (as Pillow, and so transformers' and timm's processors, resize 8-bit images: the result
        rounded to whole levels; much faster than in float on a CPU) and scaled to [0, 1] after the crop. Without crop_pct, the whole image resized to img_size (the original
        code's evaluation). With it, timm's evaluation transform: the image resized to img_size / crop_pct (crop_mode
        "center": its shorter side, keeping the aspect ratio, for a square img_size; "squash", or a non-square
        img_size: both sides), then the centre img_size crop, placed as crop_offset says (torchvision's or transformers')."""
        H, W = self.img_size
        if self.crop_pct is None:
            return _unit(self._interpolate(x, (H, W)))
        size = self.resized_size(*x.shape[-2:])
        x = self._interpolate(x, size)
        if self.crop_offset == "floor":
            top, left = (size[0] - H) // 2, (size[1] - W) // 2
        else:
            top, left = int(round((size[0] - H) / 2.0)), int(round((size[1] - W) / 2.0))
        return _unit(x[..., top : top + H, left : left + W])

    def resized_size(self, h: int, w: int) -> tuple[int, int]:
        """The size an h x w image is resized to before the centre crop (img_size itself without crop_pct)."""
        if self.crop_pct is None:
            return self.img_size
        size = self.scale_size()
        if self.crop_mode == "center" and self.img_size[0] == self.img_size[1]:
            short = size[0]
            size = (short, int(short * w / h)) if h <= w else (int(short * h / w), short)
        return size

    def check_input_size(self, h: int, w: int) -> None:
        """A ValueError for an image whose resize before the centre crop would cost far more than the model's input
        (a 100000 x 1 image resized to 256 px high is 25.6 million pixels wide): the work stays bounded by the
        output size, and such an image is skipped and named like an unreadable one."""
        rh, rw = self.resized_size(h, w)
        if rh * rw > MAX_RESIZE_RATIO * self.img_size[0] * self.img_size[1]:
            raise ValueError(f"a {w}x{h} image would be resized to {rw:,}x{rh:,} before its centre crop, over "
                             f"{MAX_RESIZE_RATIO}x the model's {self.img_size[1]}x{self.img_size[0]} input: an aspect "
                             "ratio this extreme is not an image the model can see")

    def scale_size(self) -> tuple[int, int]:
        """img_size / crop_pct, floored as timm does: the resize before the centre crop ("center": the shorter side
        becomes the first; "squash": both sides)."""
        if self.crop_pct is None:
            raise ValueError("scale_size needs a crop_pct (without one the image is resized to img_size)")
        return math.floor(self.img_size[0] / self.crop_pct), math.floor(self.img_size[1] / self.crop_pct)

    def _interpolate(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        if tuple(x.shape[-2:]) == tuple(size):
            return x
        aa = self.interpolation in ("bilinear", "bicubic")
        kwargs = {"align_corners": False, "antialias": aa} if aa else {}
        if x.dtype == torch.uint8:
            if not aa:  # torch's uint8 kernels are the antialiased ones; other modes resize in float
                x = _unit(x)
            else:  # channels-last: the layout of torch's vectorised uint8 kernels
                return F.interpolate(x.contiguous(memory_format=torch.channels_last), size=size,
                                     mode=self.interpolation, **kwargs).contiguous()
        return F.interpolate(x, size=size, mode=self.interpolation, **kwargs).clamp_(0, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(self.resize(x))

    def native(self, x: torch.Tensor, patch: int, max_patches: int) -> torch.Tensor:
        """Native resolution (NaViT): images (B, C, h, w) in [0, 1] (or uint8) resized, aspect ratio kept and no
        crop, to the largest whole-patch size of at most `max_patches` patches (`packing.native_grid`), then
        normalised: (B, C, gh * patch, gw * patch)."""
        gh, gw = native_grid(int(x.shape[-2]), int(x.shape[-1]), patch, max_patches)
        return self.normalize(_unit(self._interpolate(x, (gh * patch, gw * patch))))

    def decode_size(self) -> tuple[int, int]:
        """The least size an image must keep when decoded for this preprocessing: EVAL_DECODE_MARGIN times what
        its crop needs, so reduced-size decoding (JPEG DCT scaling, Pillow's `reduce`) touches only images far
        larger than the model's input, and the antialiased resize, not the reduction, shapes what the model sees
        (see EVAL_DECODE_MARGIN; the end-to-end parity tests in tests/formats/test_formats_same_answer.py)."""
        f = (self.crop_pct or 1.0) / EVAL_DECODE_MARGIN
        return (math.ceil(self.img_size[0] / f), math.ceil(self.img_size[1] / f))
