"""Two servers' acceptance compared: the difference of their acceptance rates (accepted /
drafted tokens, from the engine's counters) with a 95% interval, and what it says.

The unit of the interval is the verification step, not the draft token: the tokens of one
step stand or fall together (its i-th proposal counts only when every one before it was
accepted). A rate's variance is the variance of the tokens accepted a step, over the steps
counted: exact where the engine reports per-position counts (they give how many steps
accepted at least i tokens, so the whole distribution), else its largest possible value,
k times the binomial's over tokens (as if every step were all or nothing). At k = 1 both
are the binomial's. Steps are taken as independent draws from the workload, the two runs
as independent of each other, and the interval of the difference is the normal (Wald)
one: with the thousands of steps a bench counts, the normal approximation holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specrig.core.counters import SpecCounters

__all__ = ["RateGap", "Verdict", "rate_variance", "rate_gap", "RESOLUTION"]

Z95 = 1.959963984540054
"""The two-sided 95% quantile of the normal distribution."""

RESOLUTION = 0.05
"""The smallest loss of acceptance (5 points) a check must be able to see before it calls a
gap within noise; a wider interval is said to be too short to tell."""

Verdict = Literal["loses", "within noise", "too few", "gains"]


def rate_variance(c: SpecCounters) -> float:
    """The variance of ``c``'s acceptance rate (accepted / draft tokens) as an estimate, per
    verification step (see the module's docstring). ValueError without drafted tokens."""
    if c.draft_tokens <= 0 or c.drafts <= 0:
        raise ValueError("no draft tokens counted")
    p = min(max(c.accepted_tokens / c.draft_tokens, 0.0), 1.0)
    per_step = c.draft_tokens / c.drafts  # tokens proposed a step (k; fewer where a drafter proposed less)
    q = [a / c.drafts for a in c.accepted_per_position or ()]  # share of steps that accepted at least i + 1
    consistent = (
        bool(q)
        and all(1.0 + 1e-9 >= x >= y >= -1e-9 for x, y in zip(q, [*q[1:], 0.0], strict=True))
        and math.isclose(sum(c.accepted_per_position or ()), c.accepted_tokens, rel_tol=1e-6, abs_tol=0.5)
    )
    if not consistent:
        return p * (1.0 - p) * per_step / c.draft_tokens
    mean = sum(q)  # E[L], L the tokens a step accepts: the sum of P(L >= i)
    square = sum((2 * i + 1) * x for i, x in enumerate(q))  # E[L^2] = sum of (2i - 1) P(L >= i), i from 1
    return max(square - mean * mean, 0.0) / (c.drafts * per_step * per_step)


@dataclass(frozen=True)
class RateGap:
    """The first run's acceptance rate minus the second's, with its 95% interval."""

    first: float
    second: float
    gap: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def verdict(self, resolution: float = RESOLUTION) -> Verdict:
        """``loses``: the first accepts less than the second beyond the noise; ``gains``: more;
        ``within noise``: the interval holds 0 and rules out a loss of ``resolution`` or more;
        ``too few``: it holds 0 but also a loss that large (too few steps counted to tell)."""
        if self.high < 0:
            return "loses"
        if self.low > 0:
            return "gains"
        return "within noise" if self.low > -resolution else "too few"


def rate_gap(first: SpecCounters, second: SpecCounters) -> RateGap:
    """``first``'s acceptance rate minus ``second``'s, each from its counters (the runs' added up),
    with the 95% interval of the difference. ValueError where either counted no draft tokens."""
    p1 = first.accepted_tokens / first.draft_tokens if first.draft_tokens > 0 else None
    p2 = second.accepted_tokens / second.draft_tokens if second.draft_tokens > 0 else None
    if p1 is None or p2 is None:
        raise ValueError("no draft tokens counted")
    half = Z95 * math.sqrt(rate_variance(first) + rate_variance(second))
    gap = p1 - p2
    return RateGap(first=p1, second=p2, gap=gap, low=gap - half, high=gap + half)
