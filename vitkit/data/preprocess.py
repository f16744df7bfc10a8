"""Image files to pixels, safely: the formats read, the pixel and byte limits, EXIF orientation, fast JPEG decode.

`read_image` decodes one file to a (C, H, W) float tensor in [0, 1]; `load_image` then applies a model's
preprocessing contract (`vitkit.models.preprocess.PreprocessConfig`) to give its model-ready size.
"""

from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from vitkit.models.preprocess import PreprocessConfig
from vitkit.utils.files import read_regular_file

# Formats a data folder may hold. Pillow picks a decoder by a file's content, not its name, and some
# of its decoders hand the file to other programs (EPS runs Ghostscript): only these are ever opened.
SAFE_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF", "PPM")
# Pillow's own refusal point (2 x Image.MAX_IMAGE_PIXELS); above it a file is treated as unreadable.
DEFAULT_MAX_PIXELS = 2 * 89_478_485
MAX_PIXELS_ENV = "VITKIT_MAX_IMAGE_PIXELS"


def max_image_pixels(value: int | None = None) -> int:
    """The pixel limit in force: `value`, else $VITKIT_MAX_IMAGE_PIXELS, else DEFAULT_MAX_PIXELS."""
    if value is None:
        env = os.environ.get(MAX_PIXELS_ENV, "").strip()
        if not env:
            return DEFAULT_MAX_PIXELS
        try:
            value = int(env)
        except ValueError as e:
            raise ValueError(f"${MAX_PIXELS_ENV}={env!r} is not a whole number of pixels") from e
    if int(value) < 1:
        raise ValueError(f"the image pixel limit must be >= 1, got {value}")
    return int(value)


def _sample_bytes(mode: str) -> int:
    """Bytes per sample of a Pillow mode: 2 for 16-bit, 4 for 32-bit integer or float, else 1."""
    return 2 if mode.startswith("I;16") else 4 if mode in ("I", "F") else 1


def max_file_bytes(limit: int) -> int:
    """The largest image file read under the pixel limit `limit` (checked before reading): 8 bytes a pixel, the
    most any stored format needs (16-bit RGBA uncompressed), plus 1 MiB of headers."""
    return 8 * limit + (1 << 20)


def read_image_file(path: str | os.PathLike[str], max_pixels: int | None = None) -> bytes:
    """The bytes of an image file: a regular file (not a FIFO, not /dev/zero) of at most `max_file_bytes` of the
    pixel limit, checked before a byte is read."""
    return read_regular_file(path, max_file_bytes(max_image_pixels(max_pixels)), "image")


def _check_decoded_size(w: int, h: int, mode: str, limit: int, path_text: str) -> None:
    """The pixel limit counts bytes per sample: a 16-bit image counts each pixel twice, a 32-bit or float one four
    times, as that is what decoding and rescaling it costs beside an 8-bit image."""
    per = _sample_bytes(mode)
    if w * h * per > limit:
        what = (f"{w * h:,} pixels" if per == 1 else
                f"{w * h:,} pixels of {per} bytes a sample (mode {mode}), counted as {w * h * per:,},")
        raise ValueError(f"cannot read image {path_text}: {w}x{h} = {what} is over the limit of {limit:,} (a "
                         f"decompression bomb?); raise it with ${MAX_PIXELS_ENV} or the command's --max-pixels")


STRIP_PIXELS = 1 << 22  # pixels of a high-bit-depth image converted to floats at a time (16 MiB of float32)


def _unit_scale(im: Any, path: str | Path) -> float:
    """What a single-band high-bit-depth sample is divided by to give [0, 1].

    16-bit modes (I;16*) by 65535; 32-bit integer mode I by the file's bits per sample (16 for PNG, the TIFF tag
    when present, else 32: 2^31 - 1); float mode F is taken as [0, 1] intensities (1). Pillow's own conversion to
    8 bits clips instead, which turns most 16-bit images white."""
    if im.mode.startswith("I;16"):
        return 65535.0
    if im.mode == "I":
        bits = 16 if im.format in ("PNG", "PPM") else 32  # Pillow scales a PGM of any maxval > 255 to 16 bits
        tags = getattr(im, "tag_v2", None)
        if tags is not None and 258 in tags:
            b = tags[258]
            bits = int(b[0] if isinstance(b, tuple) else b)
        return 65535.0 if bits <= 16 else float(2**31 - 1)
    if im.mode == "F":
        return 1.0
    raise ValueError(f"cannot read image {path}: unsupported mode {im.mode}")


def _unit_planes(im: Any, channels: int, factor: int, path: str | Path) -> torch.Tensor:
    """A single-band high-bit-depth image (modes I;16*, I, F) as (channels, H, W) float32 in [0, 1], rescaled by
    `_unit_scale` (I and F clipped, F's NaN as 0) and, with `factor` >= 2, box-averaged factor x factor (Pillow's
    `reduce`, which the 16-bit modes lack; partial boxes at the edges average what they hold).

    Converted in strips of rows straight into the output, so the peak is Pillow's decoded image plus the output
    (measured: BENCHMARKS.md, "Crash safety and hostile files")."""
    w, h = im.size
    f = max(int(factor), 1)
    out = torch.empty((channels, -(-h // f), -(-w // f)), dtype=torch.float32)
    scale = np.float32(1.0 / _unit_scale(im, path))
    rows = max(f, (STRIP_PIXELS // max(w, 1)) // f * f)
    for y in range(0, h, rows):
        a = np.asarray(im.crop((0, y, w, min(y + rows, h))))
        strip = np.multiply(a, scale, dtype=np.float32)  # float32 throughout: no float64 copy
        if im.mode == "F":
            np.nan_to_num(strip, copy=False)
        if im.mode in ("I", "F"):
            np.clip(strip, 0.0, 1.0, out=strip)
        t = torch.from_numpy(strip)
        if f >= 2:
            t = torch.nn.functional.avg_pool2d(t[None, None], f, f, ceil_mode=True)[0, 0]
        out[0, y // f:y // f + len(t)] = t
    if channels == 3:
        out[1:] = out[0]
    return out


@functools.cache
def _simplejpeg() -> Any:
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def _fast_jpeg(data: bytes, channels: int, min_size: tuple[int, int] | None, limit: int,
               path_text: str) -> np.ndarray | None:
    """A baseline/progressive colour or grey JPEG decoded by simplejpeg (libjpeg-turbo) when it is installed: the
    same pixels as Pillow's decoder, bit for bit (`tests/data/test_data_hardening.py`), and faster (BENCHMARKS.md).
    None (Pillow decodes)
    where that sameness is not given: no simplejpeg, not a JPEG, CMYK, grey from colour (Pillow's luma differs
    from the JPEG's Y), or an image large enough for reduced-size decoding."""
    sj = _simplejpeg()
    if sj is None or not data.startswith(b"\xff\xd8\xff"):
        return None
    try:
        h, w, colorspace, _ = sj.decode_jpeg_header(data)
    except ValueError:
        return None  # Pillow names the problem
    _check_decoded_size(w, h, "RGB", limit, path_text)  # 8-bit samples
    if min_size and min(w // min_size[1], h // min_size[0]) >= 2:
        return None
    if colorspace not in ("YCbCr", "RGB", "Gray") or (channels == 1 and colorspace != "Gray"):
        return None
    if b"Exif\x00\x00" in data[:65536] and _orientation_of(data) != 1:
        return None  # rotated by its EXIF orientation: Pillow decodes and turns it upright
    try:
        return sj.decode_jpeg(data, colorspace="GRAY" if channels == 1 else "RGB")
    except ValueError as e:  # corrupt or truncated (strict decoding): unreadable, as in Pillow
        raise ValueError(f"cannot read image {path_text}: {e}") from e


# EXIF orientation (tag 0x0112) -> the transpose that makes the image upright (what PIL's exif_transpose does).
_UPRIGHT = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
            7: "TRANSVERSE", 8: "ROTATE_90"}


def _orientation_of(data: bytes) -> int:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data), formats=SAFE_FORMATS) as im:
            return _orientation(im)
    except Exception:  # noqa: BLE001 - an unreadable header: the decoder names the problem
        return 1


def _orientation(im: Any) -> int:
    """The EXIF orientation of an opened image (1 = upright; absent or invalid counts as 1)."""
    try:
        value = im.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - a damaged EXIF block does not make the image unreadable
        return 1
    return int(value) if value in _UPRIGHT or value == 1 else 1


def read_image(
    path: str | Path | BinaryIO, channels: int = 3, min_size: tuple[int, int] | None = None,
    max_pixels: int | None = None, name: str | None = None, keep_uint8: bool = False,
) -> torch.Tensor:
    """Decode an image file as (channels, H, W) floats in [0, 1] (channels 1 or 3); with `keep_uint8`, an 8-bit
    image stays (channels, H, W) uint8 (0..255), for `PreprocessConfig.resize`'s uint8 path.

    Transparency is dropped (PIL's `convert`, as timm's and Hugging Face's loaders do); 16-bit and float images
    are rescaled, not clipped; an EXIF orientation is applied (the image comes out upright). With
    `min_size` (h, w), an image at least twice that size on both sides is decoded smaller, by an
    integer factor that keeps it at least `min_size` (JPEG's reduced-size decoding, Pillow's `reduce`
    otherwise), so a 100-megapixel photo costs little. Raises `ValueError` naming the file if it
    cannot be decoded, is not one of SAFE_FORMATS, or has more than `max_pixels` pixels
    (`max_image_pixels()`: a decompression bomb is refused like any unreadable image). `path` may be an open
    binary file (a member of a tar shard); `name` is then what the messages call it.
    """
    from PIL import Image, UnidentifiedImageError

    path_text = name if name is not None else str(path)

    limit = max_image_pixels(max_pixels)
    if hasattr(path, "read"):
        try:
            data = path.read()
        except OSError as e:
            raise ValueError(f"cannot read image {path_text}: {e}") from e
    else:
        data = read_image_file(path, limit)
    if _simplejpeg() is not None:
        fast = _fast_jpeg(data, channels, min_size, limit, path_text)
        if fast is not None:
            return _to_tensor(fast, keep_uint8)
    path = io.BytesIO(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            old, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None  # vitkit's limit, checked below
            try:
                im = Image.open(path, formats=SAFE_FORMATS)
            finally:
                Image.MAX_IMAGE_PIXELS = old
        with im:
            w, h = im.size
            _check_decoded_size(w, h, im.mode, limit, path_text)
            orient = _orientation(im)
            if min_size and orient in (5, 6, 7, 8):  # stored sideways: the least size applies turned
                min_size = (min_size[1], min_size[0])
            factor = min(w // min_size[1], h // min_size[0]) if min_size else 1
            if factor >= 2 and im.format == "JPEG":
                im.draft(im.mode, (max(w // factor, 1), max(h // factor, 1)))
            im.load()
            factor = min(im.size[0] // min_size[1], im.size[1] // min_size[0]) if min_size else 1
            high = im.mode.startswith("I") or im.mode == "F"  # reduced while converted (`_unit_planes`)
            if factor >= 2 and not high and im.mode in ("1", "L", "LA", "RGB", "RGBA", "P", "CMYK"):
                im = im.reduce(factor) if im.mode != "P" else im.convert("RGBA").reduce(factor)
            if orient != 1:  # EXIF orientation applied, as PIL's exif_transpose and HF's load_image do
                im = im.transpose(getattr(Image.Transpose, _UPRIGHT[orient]))
            if high:
                planes = _unit_planes(im, channels, factor, path_text)
            else:  # transparency dropped, as timm's and Hugging Face's loaders do (PIL's convert("RGB"))
                im = im.convert("L" if channels == 1 else "RGB")
                arr = np.array(im)  # uint8: the conversion to [0, 1] floats is done by torch below
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError,
            MemoryError, EOFError, TypeError, IndexError, ZeroDivisionError) as e:
        # Pillow names an in-memory file by its repr (an address that changes every run): say what failed instead
        msg = f"not an image in a readable format ({', '.join(SAFE_FORMATS)})" if isinstance(
            e, UnidentifiedImageError) else str(e)
        raise ValueError(msg if msg.startswith(f"cannot read image {path_text}") else f"cannot read image {path_text}: {msg}") from e
    return planes if high else _to_tensor(arr, keep_uint8)


def _to_tensor(arr: np.ndarray, keep_uint8: bool = False) -> torch.Tensor:
    """(H, W) or (H, W, C) pixels -> contiguous (C, H, W) floats in [0, 1]; uint8 is divided by 255 in float32
    (`keep_uint8`: kept as uint8, channels-last in memory, the layout torch's uint8 resize kernels take)."""
    t = torch.from_numpy(arr)
    t = t[None] if t.ndim == 2 else t.permute(2, 0, 1)
    if keep_uint8 and t.dtype == torch.uint8:
        return t
    if t.dtype == torch.uint8:  # x / 255 in float32, as NumPy computed it: the same bits, several times faster
        return t.to(torch.float32, memory_format=torch.contiguous_format).div_(255.0)
    return t.contiguous()


def load_image(pre: PreprocessConfig, path: str | Path, max_pixels: int | None = None) -> torch.Tensor:
    """Read one image file (any PIL mode) as a (C, H, W) float tensor in [0, 1] at `pre`'s model-ready size.

    Raises `ValueError` naming the file if it cannot be decoded (see `read_image`).
    """
    if pre.channels not in (1, 3):
        raise ValueError(f"images can be read for 1- or 3-channel models, this one has {pre.channels}")
    return pre.resize(read_image(path, pre.channels, pre.decode_size(), max_pixels)[None])[0]
