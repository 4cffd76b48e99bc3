"""Scrape and difference Prometheus expositions, with label filtering.

Parsing is prometheus_client's own text parser; an exposition it cannot read
is an :class:`~specrig.core.errors.EngineError` naming the first line at fault.
A counter's value is read from its ``_total`` sample; ``_created`` samples are
creation timestamps and are never summed. Values are summed over every series
that matches the filter (several engines, i.e. data-parallel ranks, each export
their own series).

Counters only grow while one server lives. A delta that is negative (the
engine restarted between the scrapes, or another server answered the second
one) or NaN is no measurement: :func:`checked_delta` says so in its result,
:func:`delta` (the plain float, for existing callers) warns with
:class:`CounterWarning`, and :func:`check_deltas` lists every such counter of
two scrapes, for the run's summary.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specrig.core.errors import EngineError

__all__ = [
    "WENT_BACKWARDS",
    "CounterDelta",
    "CounterWarning",
    "Exposition",
    "check_deltas",
    "checked_delta",
    "delta",
    "describe_deltas",
    "parse",
]

WENT_BACKWARDS = "the counter went backwards: the engine restarted, or another server answered"
"""What a negative counter delta means, in the words the summary uses."""

NOT_A_NUMBER = "the counter is NaN"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


class Exposition:
    """One scrape: samples by name."""

    def __init__(self, samples: list[Sample]) -> None:
        self.samples = samples

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def series(self, name: str, match: Mapping[str, str] | None = None) -> list[Sample]:
        """Samples named ``name`` whose labels include every ``match`` pair."""
        match = dict(match or {})
        return [s for s in self.samples if s.name == name and all(dict(s.labels).get(k) == v for k, v in match.items())]

    def total(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Sum over matching series (None when the metric is absent)."""
        found = self.series(name, match)
        return sum(s.value for s in found) if found else None

    def by_label(self, name: str, label: str, match: Mapping[str, str] | None = None) -> dict[str, float]:
        """Sum over matching series, grouped by one label (e.g. ``position``)."""
        out: dict[str, float] = {}
        for s in self.series(name, match):
            key = dict(s.labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + s.value
        return out


def parse(text: str, *, source: str = "/metrics") -> Exposition:
    """Parse one scrape; raises EngineError naming ``source`` and the first
    malformed line (its number and text) when the exposition is not valid."""
    samples = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.append(Sample(s.name, tuple(sorted(s.labels.items())), float(s.value)))
    except Exception as exc:  # the parser raises ValueError, and on odd input others (IndexError, TypeError)
        raise _malformed(text, source, exc) from None
    return Exposition(samples)


def _malformed(text: str, source: str, exc: Exception) -> EngineError:
    """The exposition's first line that does not parse on its own (else the parser's word for the whole)."""
    where = f"the parser said: {type(exc).__name__}: {exc}"
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            for family in text_string_to_metric_families(line + "\n"):
                for s in family.samples:
                    float(s.value)
        except Exception as line_exc:
            shown = line if len(line) <= 200 else line[:200] + "..."
            where = f"line {number}: {shown!r} ({type(line_exc).__name__}: {line_exc})"
            break
    return EngineError(
        f"the server's {source} is not a valid Prometheus exposition: {where}",
        hint=f"is the engine what answers on that port? (curl its {source}; the raw scrape is kept with the results)",
    )


@dataclass(frozen=True)
class CounterDelta:
    """A counter's change between two scrapes. ``value``: after - before (None:
    the counter is absent from the second scrape); ``problem``: None when the
    delta is a measurement, else why it is not (:data:`WENT_BACKWARDS`, the
    counter is NaN). ``labels``: the series, when the delta is of one series."""

    name: str
    value: float | None
    before: float | None
    after: float | None
    problem: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self, *, problem: bool = True) -> str:
        """One line: ``name{labels}: before -> after: problem`` (``problem=False``: without it)."""
        series = self.name + ("{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}" if self.labels else "")
        before = "absent" if self.before is None else f"{self.before:g}"
        after = "absent" if self.after is None else f"{self.after:g}"
        return f"{series}: {before} -> {after}" + (f": {self.problem}" if problem and self.problem else "")


class CounterWarning(UserWarning):
    """Warned by :func:`delta` when a counter's delta is negative or NaN; ``.delta`` is the CounterDelta."""

    def __init__(self, d: CounterDelta) -> None:
        super().__init__(d.describe())
        self.delta = d


def _judge(
    name: str, before: float | None, after: float | None, labels: tuple[tuple[str, str], ...] = ()
) -> CounterDelta:
    if after is None:
        if before:  # a series that had counted and is gone: its engine is not the one that was scraped
            return CounterDelta(name, None, before, None, WENT_BACKWARDS, labels)
        return CounterDelta(name, None, None, None, None, labels)
    value = after - (before or 0.0)
    problem = None
    if math.isnan(value):
        problem = NOT_A_NUMBER
    elif value < 0:
        problem = WENT_BACKWARDS
    return CounterDelta(name, value, before, after, problem, labels)


def checked_delta(
    before: Exposition | None, after: Exposition, name: str, match: Mapping[str, str] | None = None
) -> CounterDelta:
    """after - before of a counter, summed over the matching series (before may
    be None: a counter absent before is 0), with ``problem`` set when the delta
    is negative or NaN. Never warns, never raises."""
    a = after.total(name, match)
    b = before.total(name, match) if before is not None else None
    if a is None:  # absent now: no delta (as delta() has always said), whatever was before
        return CounterDelta(name, None, b, None)
    return _judge(name, b, a)


def delta(
    before: Exposition | None, after: Exposition, name: str, match: Mapping[str, str] | None = None
) -> float | None:
    """after - before of a counter (before may be None: a counter absent before
    is 0). A negative or NaN delta is returned as it is, and warned as a
    :class:`CounterWarning` (record it with ``warnings.catch_warnings(record=True)``,
    or use :func:`checked_delta` / :func:`check_deltas`)."""
    d = checked_delta(before, after, name, match)
    if d.problem is not None:
        warnings.warn(CounterWarning(d), stacklevel=2)
    return d.value


def check_deltas(
    before: Exposition | str | None,
    after: Exposition | str,
    names: Iterable[str] | None = None,
    match: Mapping[str, str] | None = None,
) -> list[CounterDelta]:
    """Every counter series of two scrapes whose delta is no measurement
    (negative, NaN, or a series gone from the second scrape); empty when all is well.

    ``names``: the counters to check (their ``_total`` sample names; None: every
    ``*_total`` sample of either scrape). ``match``: only series with these
    labels (e.g. ``{"model_name": served_name}``). Scrapes may be given as text
    (parsed, so a malformed one raises EngineError). Each series is judged on
    its own (a data-parallel rank that restarted is seen even when the sum grew).

    What the lab should call, once per measured run, with the scrapes taken
    around it::

        problems = check_deltas(m0, m1, match={"model_name": served_name})
        note = describe_deltas(problems)  # None when every counter grew, else one line for the summary
    """
    if before is None:
        return []  # nothing to go backwards from
    b = parse(before) if isinstance(before, str) else before
    a = parse(after) if isinstance(after, str) else after
    wanted = set(names) if names is not None else {n for n in a.names() | b.names() if n.endswith("_total")}
    found: dict[tuple[str, tuple[tuple[str, str], ...]], list[float | None]] = {}
    pairs = dict(match or {}).items()
    for i, exp in enumerate((b, a)):
        for s in exp.samples:
            if s.name in wanted and pairs <= dict(s.labels).items():
                slot = found.setdefault((s.name, s.labels), [None, None])
                slot[i] = (slot[i] or 0.0) + s.value
    out = []
    for (name, labels), (vb, va) in sorted(found.items()):
        d = _judge(name, vb, va, labels)
        if d.problem is not None:
            out.append(d)
    return out


def describe_deltas(problems: list[CounterDelta], shown: int = 3) -> str | None:
    """One line for a run's summary naming the counters that went wrong (None: none did)."""
    if not problems:
        return None
    kinds = list(dict.fromkeys(p.problem for p in problems if p.problem))
    lines = "; ".join(p.describe(problem=False) for p in problems[:shown])
    more = f"; and {len(problems) - shown} more" if len(problems) > shown else ""
    return f"{' / '.join(kinds)} ({lines}{more})"
