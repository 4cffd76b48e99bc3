"""What every engine adapter provides: how to launch its server, how to know
it is ready, where its counters are, and how to turn what the engine reports
into speculative-decoding counters. Adapters hold no statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..recipe import Recipe, SpecConfig

__all__ = ["Engine", "LaunchPlan", "SpecCounters", "RequestSpec"]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start a server process."""

    argv: list[str]
    environment: dict[str, str]
    base_url: str


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


class Engine(Protocol):
    name: str
    health_path: str
    """GET path that answers 200 once the server is up."""
    metrics_path: str | None
    """GET path of the Prometheus exposition; None if the engine has none."""
    server_info_path: str | None
    """GET path of a JSON server-state document scraped before/after each run; None if unused."""
    generation_tokens_metric: str | None
    """Counter of generated tokens (cross-check of client counts); None if absent."""

    def launch(
        self,
        *,
        python: str,
        model_path: str,
        served_name: str,
        port: int,
        recipe: Recipe,
        spec: SpecConfig | None,
        drafter: str | None,
        extra_args: list[str],
    ) -> LaunchPlan:
        """The command and environment that start the server on 127.0.0.1:port."""
        ...

    def request_body_extras(self, spec: SpecConfig | None) -> dict[str, Any]:
        """Extra JSON fields for each completion request (e.g. to get per-request stats)."""
        ...

    def request_spec(self, final_payload: dict[str, Any]) -> RequestSpec | None:
        """Per-request speculative stats from the last streamed payload(s) of a response."""
        ...

    def spec_counters(
        self,
        *,
        metrics_before: str | None,
        metrics_after: str | None,
        info_before: dict[str, Any] | None,
        info_after: dict[str, Any] | None,
        requests: list[RequestSpec | None],
        completion_tokens: int,
        served_name: str,
        spec: SpecConfig,
    ) -> SpecCounters | None:
        """Counters for one measured run, from whatever sources the engine offers:
        Prometheus text before/after (``metrics_*``), a server-info JSON before/after
        (``info_*``, fetched from ``server_info_path`` if the adapter has one), and
        the per-request stats."""
        ...
