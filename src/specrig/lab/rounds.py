"""pytest-benchmark rounds that mean something at any load: one round is one
whole measured workload run.

A round per completed request would time the gaps between completions, not
request times: at 256 streams those gaps are microseconds while each request
takes seconds, so min/median/max would mean nothing. One round per run keeps
every figure in pytest-benchmark's table true at every concurrency (the run's
wall time; across ``--repeat`` each repeat is its own test) and
``--benchmark-compare-fail mean:10%`` fails on a 10% longer run of the same
workload. Per-request distributions (TTFT, TPOT, ITL, E2E) are in the summary.
With ``--benchmark-disable`` the run is measured once, untimed. The workload
runs on the calling (main) thread, so an interrupt reaches it at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["timed_run"]

T = TypeVar("T")


def timed_run(work: Callable[[], T], benchmark: Any) -> tuple[T, int]:
    """Run ``work`` once; with ``benchmark``, as one pytest-benchmark round. Returns (result, rounds)."""
    if benchmark is None:
        return work(), 0
    return benchmark.pedantic(work, rounds=1, iterations=1, warmup_rounds=0), 1
