"""pytest-benchmark rounds: one per measured workload run, so every figure in
its table is the run's own time whatever the load."""

from __future__ import annotations

from typing import Any

import pytest

from specrig.core.errors import EngineError
from specrig.lab.rounds import timed_run


def test_one_round_is_the_whole_run(benchmark: Any) -> None:
    calls: list[int] = []

    def work() -> str:
        calls.append(1)
        return "run"

    assert timed_run(work, benchmark) == ("run", 1)
    assert calls == [1], "the workload runs exactly once, timed"
    stats = benchmark.stats.stats
    assert stats.rounds == 1 and stats.min == stats.max == stats.mean


def test_untimed_run() -> None:
    assert timed_run(lambda: "run", None) == ("run", 0)


def test_an_error_mid_run_reaches_the_caller(benchmark: Any) -> None:
    def work() -> str:
        raise EngineError("the engine died")

    with pytest.raises(EngineError, match="the engine died"):
        timed_run(work, benchmark)
