"""``--compare``'s verdict, judged against the noise each side knows.

pytest-benchmark's own ``--benchmark-compare-fail`` compares one figure with one figure: a test
of the suite is one round (one whole measured workload run), so two normal runs on a busy host
can differ by more than the tolerance and fail. specrig judges instead, from the same JSON and
the same expression (``mean:25%``, ``min:0.5``): the tests of one configuration at one load point
are grouped over their repeats (``test_decode[r0-baseline-c1]``, ``[r1-...]`` ->
``test_decode[baseline-c1]``), and a change beyond the tolerance is a regression only where the
noise cannot explain it:

* both sides repeated (``--repeat N``, N >= 2): each side's mean gets its 95% t-interval, and
  the intervals must separate (this run's lower bound above the stored run's upper bound);
* one side repeated: the other side's single run must fall outside the band where 95% of single
  runs of the repeated side land (its prediction interval), i.e. judged against that side's spread;
* neither side repeated: no spread is known; the tolerance alone decides, and the verdict says
  it could not judge the noise (``--repeat 3`` on both runs lets it).

Every judgement is one :class:`Verdict`; its line says which of these it was."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_benchmark.utils import PercentageRegressionCheck

from specrig.specdec.stats import Interval, mean_interval, t_quantile

__all__ = [
    "Check",
    "Verdict",
    "Comparison",
    "run_verdict",
    "repeatless_name",
    "judge",
    "judge_runs",
    "prediction_interval",
]


class Check(Protocol):
    """pytest-benchmark's parsed ``--benchmark-compare-fail`` expression (``PercentageRegressionCheck``
    or ``DifferenceRegressionCheck``): a field of a round's statistics and a threshold."""

    field: str
    threshold: float

    def compute(self, current: dict[str, float], compared: dict[str, float]) -> float: ...


_REPEAT = re.compile(r"\[r\d+-")


def repeatless_name(fullname: str) -> str:
    """A test's name without its repeat (``test_decode[r1-ngram-c4]`` -> ``test_decode[ngram-c4]``)."""
    return _REPEAT.sub("[", fullname, count=1)


def prediction_interval(values: Sequence[float]) -> Interval:
    """Where one more run lands, 95% of the time, given ``values`` (two or more): the mean
    +- t * sd * sqrt(1 + 1/n). ``n`` is the number of values it is drawn from."""
    n = len(values)
    m = statistics.fmean(values)
    half = t_quantile(n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    return Interval(m, m - half, m + half, n)


def _s(x: float) -> str:
    return f"{x:.4g} s"


def _span(iv: Interval) -> str:
    return f"{_s(iv.low)}–{_s(iv.high)}"


@dataclass(frozen=True)
class Verdict:
    """One test (over its repeats) against the stored run, for one check."""

    test: str
    field: str
    change: float
    """The check's figure on the means: percent for ``mean:25%``, seconds for ``mean:0.5``."""
    threshold: float
    percent: bool
    now: list[float]
    stored: list[float]
    regressed: bool
    basis: str
    """How the noise was judged: ``intervals``, ``stored spread``, ``this run's spread`` or ``no spread``."""
    why: str

    @property
    def beyond(self) -> bool:
        return self.change > self.threshold

    def line(self) -> str:
        unit = "%" if self.percent else " s"
        sign = f"{self.change:+.1f}%" if self.percent else f"{self.change:+.4g} s"
        return f"{self.test}: {self.field} {sign} (tolerance {self.threshold:g}{unit}): {self.why}"


def judge(test: str, check: Check, now: Sequence[float], stored: Sequence[float]) -> Verdict:
    """The verdict for one test's figures over its repeats, this run's and the stored run's."""
    now, stored = [float(v) for v in now], [float(v) for v in stored]
    a, b = mean_interval(now), mean_interval(stored)
    change = check.compute({check.field: a.mean}, {check.field: b.mean})
    beyond = change > check.threshold
    field = check.field
    if len(now) >= 2 and len(stored) >= 2:
        basis, separate = "intervals", a.low > b.high
        said = f"{_s(a.mean)} (95% CI {_span(a)}, n={a.n}) against {_s(b.mean)} (95% CI {_span(b)}, n={b.n})"
        why = f"{said}: the intervals {'separate' if separate else 'overlap'}"
    elif len(stored) >= 2:
        band = prediction_interval(stored)
        basis, separate = "stored spread", a.mean > band.high
        why = (
            f"{_s(a.mean)} from one repeat against the stored run's spread: {_s(b.mean)}, one run of it lands in "
            f"{_span(band)} 95% of the time (n={band.n}); this run is {'beyond' if separate else 'within'} it"
        )
    elif len(now) >= 2:
        band = prediction_interval(now)
        basis, separate = "this run's spread", b.mean < band.low
        why = (
            f"{_s(a.mean)} (n={a.n}) against the stored run's single {_s(b.mean)}, judged by this run's spread: "
            f"one run lands in {_span(band)} 95% of the time; the stored one is {'below' if separate else 'within'} it"
        )
    else:
        basis, separate = "no spread", True
        why = (
            f"{_s(a.mean)} against {_s(b.mean)}, one repeat on each side: no spread to judge the noise by, "
            "the tolerance alone decides (--repeat 3 on both runs judges it against the noise)"
        )
    if beyond and not separate:
        why += ": within the noise, not a regression"
    percent = isinstance(check, PercentageRegressionCheck)
    return Verdict(test, field, change, check.threshold, percent, now, stored, beyond and separate, basis, why)


def _grouped(benchmarks: Iterable[dict[str, Any]], field: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for b in benchmarks:
        stats = b.get("stats") or {}
        if isinstance(stats.get(field), int | float) and b.get("fullname"):
            out.setdefault(repeatless_name(str(b["fullname"])), []).append(float(stats[field]))
    return out


def judge_runs(
    now: Iterable[dict[str, Any]], stored: Iterable[dict[str, Any]], checks: Sequence[Check]
) -> list[Verdict]:
    """Every test this run and the stored run both hold (by name, over their repeats), for every check."""
    now, stored = list(now), list(stored)
    verdicts = []
    for check in checks:
        a, b = _grouped(now, check.field), _grouped(stored, check.field)
        verdicts += [judge(test, check, a[test], b[test]) for test in sorted(set(a) & set(b))]
    return verdicts


@dataclass
class Comparison:
    """``--compare``: the stored run (its file) and the checks specrig judges in pytest-benchmark's
    stead, then the verdicts once this run's JSON is known."""

    stored: Path
    checks: list[Any]
    verdicts: list[Verdict] = field(default_factory=list)
    unreadable: str | None = None

    def judge(self, benchmarks: Iterable[dict[str, Any]]) -> None:
        try:
            stored = json.loads(self.stored.read_text()).get("benchmarks") or []
        except (OSError, ValueError, AttributeError) as exc:
            self.unreadable = f"the stored run {self.stored} cannot be read ({exc}): nothing compared"
            return
        self.verdicts = judge_runs(benchmarks, stored, self.checks)

    @property
    def regressions(self) -> list[str]:
        return [v.line() for v in self.verdicts if v.regressed]

    @property
    def notes(self) -> list[str]:
        """What the verdict could not see or did not count: a run of one repeat (how it was judged
        then), and each change beyond the tolerance that the noise explains."""
        single = {v.basis for v in self.verdicts if len(v.now) == 1}
        out = [self.unreadable] if self.unreadable else []
        if "stored spread" in single:
            out.append("one repeat in this run: each test is judged against the stored run's spread")
        if any(v.basis == "this run's spread" for v in self.verdicts):
            out.append("the stored run has one repeat: it is judged against this run's spread")
        if "no spread" in single:
            out.append(
                "one repeat on each side: the comparison knows no noise and the tolerance alone decides; "
                "--repeat 3 (this run and the stored one) judges it against the noise"
            )
        return out + [v.line() for v in self.verdicts if v.beyond and not v.regressed]


def run_verdict(
    gates: list[str], comparison: Comparison | None, errors: Sequence[Any], tests_failed: int
) -> dict[str, Any]:
    """What a stored run records of itself (``specrig_verdict``): passed, or its problems a line each:
    the gates it does not meet, its regressions against the stored run, the tests that ended with a
    specrig error, or failed. ``--compare latest`` passes over a run that did not pass."""
    problems = list(gates)
    if comparison is not None:
        problems += [f"regression against the stored run {comparison.stored}: {r}" for r in comparison.regressions]
    problems += [e.line() for e in errors]
    if tests_failed and not errors:
        problems.append(f"{tests_failed} test(s) of the suite failed")
    return {"passed": not problems, "problems": problems}
