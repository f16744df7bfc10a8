"""RandAugment (Cubuk et al. 2020) and random erasing (Zhong et al. 2020) on (C, H, W) tensors in [0, 1].

RandAugment(n, m), as AugReg / big_vision use it ("randaug(2, 15)"): n times, one of 16 operations is
picked uniformly and applied with a probability drawn from U(0.2, 0.8), at magnitude m on the 0-10 scale
of the original (m > 10 goes beyond it). The magnitudes are "increasing" ones (timm's choice): m = 0 is the
identity for every operation that has a magnitude, so a larger m is always a stronger change:
rotate +-3m degrees, shear +-0.03m, translate +-4.5m% of the side, posterize to 8 - 0.4m bits, solarize
above 1 - 0.1m, solarize-add 0.043m, colour / contrast / brightness / sharpness factors 1 +- 0.09m,
cutout of a square 1.8m% of the side; auto-contrast, equalize and invert have no magnitude. Geometric
operations fill with grey (0.5). Every draw comes from the image's own generator: the result is a pure
function of (seed, step, position), so exact resume holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

FILL = 0.5


def _u(gen: torch.Generator) -> float:
    return float(torch.rand(1, generator=gen, dtype=torch.float64))


def _sign(gen: torch.Generator) -> float:
    return 1.0 if _u(gen) < 0.5 else -1.0


def _affine(img: torch.Tensor, theta: list[list[float]]) -> torch.Tensor:
    """Resample `img` through a 2x3 affine map in normalised coordinates, grey outside."""
    t = torch.tensor([theta], dtype=img.dtype)
    grid = F.affine_grid(t, [1, *img.shape], align_corners=False)
    ones = torch.ones(1, 1, *img.shape[-2:], dtype=img.dtype)
    out = F.grid_sample(torch.cat([img[None], ones], 1), grid, mode="bilinear", padding_mode="zeros",
                        align_corners=False)[0]
    inside = out[-1:]
    return out[:-1] + (1.0 - inside) * FILL


def _grey(img: torch.Tensor) -> torch.Tensor:
    if img.shape[0] == 3:
        return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]
    return img.mean(0, keepdim=True)


def _blend(a: torch.Tensor, b: torch.Tensor, factor: float) -> torch.Tensor:
    """b + factor x (a - b): factor 1 gives a, 0 gives b."""
    return (b + factor * (a - b)).clamp(0.0, 1.0)


def rotate(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    a = math.radians(3.0 * m) * _sign(gen)
    return _affine(img, [[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]])


def shear_x(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _affine(img, [[1.0, 0.03 * m * _sign(gen), 0.0], [0.0, 1.0, 0.0]])


def shear_y(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _affine(img, [[1.0, 0.0, 0.0], [0.03 * m * _sign(gen), 1.0, 0.0]])


def translate_x(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _affine(img, [[1.0, 0.0, 2 * 0.045 * m * _sign(gen)], [0.0, 1.0, 0.0]])


def translate_y(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _affine(img, [[1.0, 0.0, 0.0], [0.0, 1.0, 2 * 0.045 * m * _sign(gen)]])


def posterize(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    bits = min(8, max(1, 8 - int(0.4 * m)))
    if bits == 8:
        return img
    q = 2 ** (8 - bits)
    return torch.floor(torch.round(img * 255) / q) * q / 255


def solarize(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    if m <= 0:
        return img
    threshold = 1.0 - 0.1 * m  # PIL's rule: pixels at or above the threshold are inverted
    return torch.where(img >= threshold, 1.0 - img, img)


def solarize_add(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return torch.where(img < 0.5, (img + 0.043 * m).clamp(0.0, 1.0), img)


def color(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _blend(img, _grey(img).expand_as(img), 1.0 + 0.09 * m * _sign(gen))


def contrast(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _blend(img, _grey(img).mean().expand_as(img), 1.0 + 0.09 * m * _sign(gen))


def brightness(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return _blend(img, torch.zeros_like(img), 1.0 + 0.09 * m * _sign(gen))


def sharpness(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    k = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]], dtype=img.dtype) / 13
    smooth = img.clone()
    if min(img.shape[-2:]) >= 3:  # the border keeps its pixels, as PIL's filter does
        smooth[:, 1:-1, 1:-1] = F.conv2d(img[:, None], k[None, None])[:, 0]
    return _blend(img, smooth, 1.0 + 0.09 * m * _sign(gen))


def cutout(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    H, W = img.shape[-2:]
    half = int(0.018 * m * min(H, W) / 2)
    cy, cx = int(_u(gen) * H), int(_u(gen) * W)
    out = img.clone()
    out[:, max(cy - half, 0) : cy + half, max(cx - half, 0) : cx + half] = FILL
    return out


def auto_contrast(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    lo = img.amin(dim=(1, 2), keepdim=True)
    hi = img.amax(dim=(1, 2), keepdim=True)
    scale = torch.where(hi > lo, 1.0 / (hi - lo).clamp_min(1e-12), torch.ones_like(hi))
    return torch.where(hi > lo, (img - lo) * scale, img)


def equalize(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    """Histogram equalisation per channel on 256 levels (PIL's ImageOps.equalize rule)."""
    q = torch.round(img * 255).long()
    out = []
    for c in q:
        hist = torch.bincount(c.flatten(), minlength=256)
        nonzero = hist[hist > 0]
        step = (nonzero.sum() - nonzero[-1]) // 255 if len(nonzero) else 0
        if step == 0:
            out.append(c.to(img.dtype) / 255)
            continue
        lut = ((torch.cumsum(hist, 0) - hist + step // 2) // step).clamp(0, 255)
        out.append(lut[c].to(img.dtype) / 255)
    return torch.stack(out)


def invert(img: torch.Tensor, m: float, gen: torch.Generator) -> torch.Tensor:
    return 1.0 - img


OPS: dict[str, Callable[[torch.Tensor, float, torch.Generator], torch.Tensor]] = {
    "AutoContrast": auto_contrast, "Equalize": equalize, "Invert": invert, "Rotate": rotate, "Posterize": posterize,
    "Solarize": solarize, "SolarizeAdd": solarize_add, "Color": color, "Contrast": contrast, "Brightness": brightness,
    "Sharpness": sharpness, "ShearX": shear_x, "ShearY": shear_y, "TranslateX": translate_x, "TranslateY": translate_y,
    "Cutout": cutout,
}
OP_NAMES = tuple(OPS)


def rand_augment(img: torch.Tensor, gen: torch.Generator, num_ops: int, magnitude: float) -> torch.Tensor:
    """RandAugment(num_ops, magnitude) of one (C, H, W) image in [0, 1]."""
    for _ in range(num_ops):
        op = OP_NAMES[int(torch.randint(len(OP_NAMES), (1,), generator=gen))]
        p = 0.2 + 0.6 * _u(gen)
        if _u(gen) < p:
            img = OPS[op](img, magnitude, gen)
    return img.clamp(0.0, 1.0)


def random_erasing(x: torch.Tensor, gen: torch.Generator, prob: float, area: tuple[float, float] = (0.02, 1 / 3),
                   ratio: tuple[float, float] = (0.3, 1 / 0.3), attempts: int = 10) -> torch.Tensor:
    """With probability `prob`, one rectangle of a normalised (C, H, W) image replaced by N(0, 1) noise per
    pixel (DeiT's `reprob` in "pixel" mode); area a uniform fraction in `area`, log-uniform aspect."""
    if _u(gen) >= prob:
        return x
    H, W = x.shape[-2:]
    for _ in range(attempts):
        target = H * W * (area[0] + _u(gen) * (area[1] - area[0]))
        aspect = math.exp(math.log(ratio[0]) + _u(gen) * (math.log(ratio[1]) - math.log(ratio[0])))
        h, w = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < h < H and 0 < w < W:
            top, left = int(_u(gen) * (H - h + 1)), int(_u(gen) * (W - w + 1))
            out = x.clone()
            out[:, top : top + h, left : left + w] = torch.randn(x.shape[0], h, w, generator=gen, dtype=x.dtype)
            return out
    return x
