"""Speculative-decoding counts as plain data, shared by the engine adapters
(which produce them) and specdec (which turns them into statistics). Holds no
engine or statistics logic, so neither side imports the other; counters of
several runs add up here (:func:`sum_counters`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpecCounters", "RequestSpec", "sum_counters"]


@dataclass(frozen=True)
class SpecCounters:
    """Speculative-decoding counters over one measured run (deltas, not totals).

    ``drafts``: verification steps that carried draft tokens; ``draft_tokens``:
    tokens proposed; ``accepted_tokens``: proposals the target accepted;
    ``accepted_per_position[i]``: steps whose i-th proposal was accepted
    (None when the engine does not report it); ``k``: tokens proposed per step.
    ``source`` says where the numbers came from (for the report).
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    k: int
    accepted_per_position: tuple[float, ...] | None = None
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestSpec:
    """Per-request speculative stats an engine returned with one response."""

    verify_steps: float | None = None
    accepted_tokens: float | None = None
    draft_tokens: float | None = None
    acceptance_length: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def sum_counters(counters: list[SpecCounters]) -> SpecCounters | None:
    """The counters of several runs of one configuration, added up (None: no runs).
    Per-position counts add up only when every run reports them."""
    if not counters:
        return None
    c0 = counters[0]
    per_position = None
    if all(c.accepted_per_position for c in counters):
        per_position = tuple(map(sum, zip(*(c.accepted_per_position or () for c in counters), strict=True)))
    return SpecCounters(
        drafts=sum(c.drafts for c in counters),
        draft_tokens=sum(c.draft_tokens for c in counters),
        accepted_tokens=sum(c.accepted_tokens for c in counters),
        k=c0.k,
        accepted_per_position=per_position,
        source=c0.source,
    )
