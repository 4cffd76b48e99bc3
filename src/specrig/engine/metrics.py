"""Scrape and difference Prometheus expositions, with label filtering.

Parsing is prometheus_client's own text parser. A counter's value is read from
its ``_total`` sample; ``_created`` samples are creation timestamps and are never
summed. Values are summed over every series that matches the filter (several
engines, i.e. data-parallel ranks, each export their own series).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Exposition", "parse", "delta"]


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


def parse(text: str) -> Exposition:
    samples = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.append(Sample(s.name, tuple(sorted(s.labels.items())), float(s.value)))
    return Exposition(samples)


def delta(
    before: Exposition | None, after: Exposition, name: str, match: Mapping[str, str] | None = None
) -> float | None:
    """after - before of a counter (before may be None: a counter absent before is 0)."""
    a = after.total(name, match)
    if a is None:
        return None
    b = before.total(name, match) if before is not None else None
    return a - (b or 0.0)
