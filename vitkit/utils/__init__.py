"""Small shared utilities: atomic file writes (atomic.py), dataclass config checks."""

from __future__ import annotations

import dataclasses
from typing import Any


def check_fields(cls: type, d: dict[str, Any], what: str) -> None:
    """Raise a ValueError naming any key of `d` that is not a field of the dataclass `cls`."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; known: {sorted(known)}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_int(key: str, v: Any, low: int = 1, high: int | None = None) -> int:
    """`v` as a whole number in [`low`, `high`], or a ValueError naming `key` (floats such as 16.0 are refused)."""
    if not _is_int(v) or v < low:
        want = "a positive whole number" if low == 1 else f"a whole number >= {low}"
        raise ValueError(f"{key} must be {want}, got {v!r}")
    if high is not None and v > high:
        raise ValueError(f"{key} must be at most {high:,}, got {v!r}")
    return int(v)


def check_range(key: str, v: Any, low: float, high: float, high_open: bool = True, low_open: bool = False) -> float:
    """`v` as a float in the interval [low, high) (ends chosen by the flags), or a ValueError naming `key`."""
    ok = _is_number(v) and v == v and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        lb, hb = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{key} must be a number in {lb}{low:g}, {high:g}{hb}, got {v!r}")
    return float(v)


def check_choice(key: str, v: Any, choices: tuple[str, ...] | list[str]) -> str:
    """`v` if it is one of `choices`, or a ValueError naming `key` and the choices."""
    if v not in choices:
        raise ValueError(f"{key} must be one of {', '.join(map(str, choices))}; got {v!r}")
    return str(v)


def to_pair(v: Any, what: str = "size") -> tuple[int, int]:
    """An int or a (height, width) pair as a (height, width) tuple of ints, or a ValueError naming `what`."""
    if _is_int(v):
        return (int(v), int(v))
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(x) for x in v):
        return (int(v[0]), int(v[1]))
    raise ValueError(f"{what} should be an int or a (height, width) pair of ints, got {v!r}")
