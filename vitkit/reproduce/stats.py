"""The statistics every verdict of `vitkit reproduce` rests on: means with 95% t-intervals, paired differences.

Pre-training seeds are the unit of replication. A number is reported as its mean over seeds with the 95%
Student-t interval from the *sample* standard deviation (n - 1 in the denominator); a difference between two
methods is taken seed by seed (method A's seed i against method B's seed i: the same data order, the same
few-shot draws) and gets its own interval and a two-sided paired t-test p-value. Where only summary statistics
were kept (old result files: mean and population std per method), `welch` compares them unpaired. Student's t
comes from scipy (a dependency of scikit-learn, vitkit's dependency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

LEVEL = 0.95
MIN_SEEDS = 3  # a verdict needs at least this many seeds per number it rests on


@dataclass(frozen=True)
class Estimate:
    """A mean over `n` seeds with its sample std and 95% t-interval [lo, hi]; `p` (differences only): two-sided
    p-value of the t-test of mean 0; `values`: the per-seed numbers where they are known."""

    n: int
    mean: float
    sd: float  # sample std (ddof=1); nan for n < 2 and for an unpaired (Welch) difference
    lo: float
    hi: float
    p: float | None = None
    values: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
        """'mean [lo, hi] (n=3)' in points (scale 100), with the p-value where there is one."""
        sign = "+" if signed else ""

        def num(v: float) -> str:  # a value that rounds to zero shows its sign and size: "+2e-05", not "+0.000"
            v *= scale
            return f"{v:{sign}.{digits}f}" if v == 0 or abs(v) >= 0.5 * 10 ** -digits else f"{v:{sign}.1g}"

        if self.n < 2:
            return f"{num(self.mean)} (n={self.n}, no interval)"
        s = f"{num(self.mean)} [{num(self.lo)}, {num(self.hi)}] (n={self.n}"
        return s + (f", p={self.p:.2g})" if self.p is not None else ")")


def _student_t():  # noqa: ANN202
    """scipy.stats.t, imported when a number is first computed: scipy.stats is slow to import, and every process
    that imports this module through vitkit.reproduce.runs (each reproduction worker) would pay it."""
    from scipy import stats

    return stats.t


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t with `df` degrees of freedom."""
    if not 0 < q < 1 or not df > 0:
        raise ValueError(f"t quantile needs 0 < q < 1 and df > 0, got q={q}, df={df}")
    return float(_student_t().ppf(q, df))


def _interval(mean: float, se: float, df: float) -> tuple[float, float]:
    h = t_quantile(0.5 + LEVEL / 2, df) * se
    return mean - h, mean + h


def _p_two_sided(mean: float, se: float, df: float) -> float:
    if se == 0:
        return 0.0 if mean != 0 else 1.0
    return float(2 * _student_t().sf(abs(mean / se), df))


def mean_ci(values: Sequence[float]) -> Estimate:
    """Mean and 95% t-interval of per-seed values (n = 1: no interval, lo = hi = nan)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"mean_ci needs a non-empty list of per-seed values, got shape {x.shape}")
    n, m = len(x), float(x.mean())
    if n < 2:
        return Estimate(1, m, math.nan, math.nan, math.nan, values=tuple(x.tolist()))
    sd = float(x.std(ddof=1))
    lo, hi = _interval(m, sd / math.sqrt(n), n - 1)
    return Estimate(n, m, sd, lo, hi, values=tuple(x.tolist()))


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """a - b seed by seed (a[i] and b[i] share seed i): the mean difference, its 95% t-interval and the two-sided
    paired t-test p-value."""
    if len(a) != len(b):
        raise ValueError(f"a paired difference needs the same seeds on both sides, got {len(a)} and {len(b)} values")
    d = mean_ci([x - y for x, y in zip(a, b)])
    if d.n < 2:
        return d
    return Estimate(d.n, d.mean, d.sd, d.lo, d.hi, _p_two_sided(d.mean, d.sd / math.sqrt(d.n), d.n - 1), d.values)


def from_summary(mean: float, population_std: float, n: int) -> Estimate:
    """An estimate from a mean and a *population* std (ddof=0, what older result files kept) over n seeds."""
    if n < 2:
        return Estimate(n, mean, math.nan, math.nan, math.nan)
    sd = population_std * math.sqrt(n / (n - 1))
    lo, hi = _interval(mean, sd / math.sqrt(n), n - 1)
    return Estimate(n, mean, sd, lo, hi)


def welch(a: Estimate, b: Estimate) -> Estimate:
    """a - b for unpaired estimates (Welch's t with Welch-Satterthwaite degrees of freedom): for results that kept
    only summary statistics, where the seed pairing is lost. Needs n >= 2 on both sides."""
    if a.n < 2 or b.n < 2:
        return Estimate(min(a.n, b.n), a.mean - b.mean, math.nan, math.nan, math.nan)
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    se = math.sqrt(va + vb)
    m = a.mean - b.mean
    if se == 0:
        return Estimate(min(a.n, b.n), m, math.nan, m, m, 0.0 if m else 1.0)
    df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    lo, hi = _interval(m, se, df)
    return Estimate(min(a.n, b.n), m, math.nan, lo, hi, _p_two_sided(m, se, df))


def stored(v: Any, n: int) -> Estimate:
    """An entry of a result JSON: per-seed values ({"values": [...]}) or a legacy [mean, population std] pair over
    n seeds (the seeds themselves not kept)."""
    if isinstance(v, dict):
        return mean_ci(v["values"])
    return from_summary(float(v[0]), float(v[1]), n)


def seeded(values: Sequence[float]) -> dict[str, Any]:
    """Per-seed values as a result JSON keeps them: the values, their mean and 95% t-interval (None for 1 seed)."""
    e = mean_ci(values)
    ok = not math.isnan(e.lo)
    return {"values": list(e.values), "mean": e.mean, "lo": e.lo if ok else None, "hi": e.hi if ok else None}


def best_rates(sweep: list[dict[str, float]], key: str = "dev") -> set[float]:
    """Every rate of the sweep that reaches its best `key`: an edge rate tied with an inner one still wins at that
    edge (the sweep is extended there, and is not bracketed until it is not among them)."""
    top = max(s[key] for s in sweep)
    return {s["lr"] for s in sweep if s[key] == top}


def pick_rate(sweep: list[dict[str, float]], key: str = "dev") -> float:
    """The sweep's pick: the rate with the best `key`, ties going to the smaller rate."""
    return min(best_rates(sweep, key))


def bracketed(sweep: list[dict[str, float]], key: str = "dev") -> bool:
    """A learning-rate sweep in which every rate reaching the best `key` has a tried rate on each side of it (an
    edge tied with the best is not bracketed: `best_rates`)."""
    lrs, wins = sorted(s["lr"] for s in sweep), best_rates(sweep, key)
    return len(lrs) >= 3 and lrs[0] not in wins and lrs[-1] not in wins


def extension(sweep: list[dict[str, float]], grid: tuple[float, ...], extend: int, key: str = "dev") -> float | None:
    """The next rate to try when the sweep's best (by `key`) lies at an edge of the rates tried: one step past that
    edge, by the grid's own ratio there (2 for a one-rate grid); None when the best is bracketed or `extend` rates
    were already added past that edge (the pick then stands unbracketed, and rules.py says so)."""
    lrs, wins = sorted(s["lr"] for s in sweep), best_rates(sweep, key)
    ratio = grid[-1] / grid[-2] if len(grid) > 1 else 2.0
    if lrs[-1] in wins and sum(lr > max(grid) for lr in lrs) < extend:
        return lrs[-1] * ratio
    ratio = grid[1] / grid[0] if len(grid) > 1 else 2.0
    if lrs[0] in wins and sum(lr < min(grid) for lr in lrs) < extend:
        return lrs[0] / ratio
    return None


def sweep_text(sweep: list[dict[str, float]], key: str = "dev", bold: bool = False) -> str:
    """A learning-rate sweep as "rate → accuracy" pairs (`key`, in points; rates to 3 significant digits), the pick
    in bold where asked, and "(not bracketed)" where its best lies at an edge: the one way every table writes one."""
    pick = pick_rate(sweep, key)
    cells = [f"{r['lr']:.3g} → {100 * r[key]:.1f}" for r in sweep]
    cells = [f"**{c}**" if bold and r["lr"] == pick else c for c, r in zip(cells, sweep)]
    return ", ".join(cells) + ("" if bracketed(sweep, key) else " (not bracketed)")
