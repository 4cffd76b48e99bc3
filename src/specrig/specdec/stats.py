"""Descriptive statistics the bench reports: distributions (mean, std,
percentiles) and confidence intervals for means and paired ratios. Pure
functions over floats; no numpy needed for a few hundred samples.

Percentiles interpolate linearly between closest ranks (numpy's default, the
one ``vllm bench serve`` reports). Intervals use Student's t."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Distribution", "Interval", "percentile", "mean_interval", "ratio_interval", "t_quantile"]

# two-sided 95% Student t quantiles by degrees of freedom (1..30); beyond: normal
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    return _T95[df - 1] if df <= len(_T95) else 1.96


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Distribution:
    """Summary of one metric over a run's samples (e.g. TTFT in ms over requests)."""

    n: int
    mean: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        xs = [float(v) for v in values if v is not None]
        if not xs:
            return cls(0)
        return cls(
            n=len(xs),
            mean=statistics.fmean(xs),
            std=statistics.stdev(xs) if len(xs) > 1 else 0.0,
            p50=percentile(xs, 50),
            p90=percentile(xs, 90),
            p99=percentile(xs, 99),
            min=min(xs),
            max=max(xs),
        )


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% confidence interval (low == high == mean for one sample)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def describe(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        if self.n < 2:
            return f"{fmt.format(self.mean)}{unit} (one sample, no interval)"
        return (
            f"{fmt.format(self.mean)}{unit} (95% CI {fmt.format(self.low)}{unit}–{fmt.format(self.high)}{unit}, "
            f"n={self.n})"
        )


def mean_interval(values: Sequence[float]) -> Interval:
    """Mean and 95% t-interval of independent samples (e.g. per-repeat speedups)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("interval of no values")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(m, m, m, len(xs))
    half = t_quantile(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(m, m - half, m + half, len(xs))


def ratio_interval(ratios: Sequence[float]) -> Interval:
    """Geometric mean and 95% t-interval of positive ratios (e.g. per-repeat speedups),
    computed on their logarithms: the interval never crosses zero and treats 2x and
    0.5x symmetrically."""
    xs = [float(r) for r in ratios]
    if not xs or any(r <= 0 for r in xs):
        raise ValueError("ratio interval needs positive ratios")
    iv = mean_interval([math.log(r) for r in xs])
    return Interval(math.exp(iv.mean), math.exp(iv.low), math.exp(iv.high), iv.n)
