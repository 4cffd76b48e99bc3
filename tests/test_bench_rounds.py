"""pytest-benchmark rounds: one per completed request, timed between completions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from specrig.errors import EngineError
from specrig.rounds import timed_rounds


def _work(gaps: list[float], fail_after: int | None = None) -> Callable[[Callable[[Any], None] | None], str]:
    def work(on_result: Callable[[Any], None] | None) -> str:
        for i, gap in enumerate(gaps):
            time.sleep(gap)
            if fail_after is not None and i == fail_after:
                raise EngineError("the engine died")
            if on_result is not None:
                on_result(i)
        return "run"

    return work


def test_one_round_per_completion(benchmark: Any) -> None:
    run, rounds = timed_rounds(_work([0.05, 0.05, 0.10]), 3, benchmark)
    assert (run, rounds) == ("run", 3)
    stats = benchmark.stats.stats
    assert stats.rounds == 3
    assert stats.total == pytest.approx(0.20, abs=0.04)  # rounds x mean = the run's wall time
    assert stats.max == pytest.approx(0.10, abs=0.03)


def test_untimed_and_failing_runs() -> None:
    assert timed_rounds(_work([0.0, 0.0]), 2, None) == ("run", 0)


def test_an_error_mid_run_reaches_the_caller(benchmark: Any) -> None:
    with pytest.raises(EngineError, match="the engine died"):
        timed_rounds(_work([0.01, 0.01, 0.01], fail_after=1), 3, benchmark)
