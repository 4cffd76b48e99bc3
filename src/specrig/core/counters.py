"""Speculative-decoding counts as plain data, shared by the engine adapters
(which produce them) and specdec (which turns them into statistics). Holds no
logic, so neither side imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpecCounters", "RequestSpec"]


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
