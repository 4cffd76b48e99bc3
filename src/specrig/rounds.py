"""pytest-benchmark rounds that mean something for a serving run: one round
per completed request.

The workload runs in a thread and reports each finished request (the client's
``on_result``); each round waits for the next one, so a round's time is the gap
between completions (at concurrency 1: that request's end-to-end latency) and
rounds x mean is the run's wall time. ``--benchmark-compare-fail mean:10%``
therefore fails on a 10% drop in completed requests per second at that load.
With ``--benchmark-disable`` the run is measured once, untimed."""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

from .client import run_workload
from .errors import BenchError

__all__ = ["timed_rounds", "call_workload"]

_END = object()


def call_workload(base_url: str, model: str, kwargs: dict[str, Any], on_result: Callable[[Any], None] | None) -> Any:
    """run_workload with the options this client supports (load shapes, callbacks)."""
    accepted = inspect.signature(run_workload).parameters
    if on_result is not None:
        kwargs = kwargs | {"on_result": on_result}
    missing = [k for k in ("request_rate", "on_result") if k in kwargs and k not in accepted]
    if "request_rate" in missing:
        raise BenchError("this client cannot generate a request rate yet", hint="use --concurrency")
    return run_workload(base_url, model, **{k: v for k, v in kwargs.items() if k in accepted})


def timed_rounds(
    work: Callable[[Callable[[Any], None] | None], Any], n_requests: int, benchmark: Any
) -> tuple[Any, int]:
    """Run the workload; with ``benchmark``, one pytest-benchmark round per completed request."""
    if benchmark is None:
        return work(None), 0
    if "on_result" not in inspect.signature(run_workload).parameters:
        # a client without completion callbacks: the whole run is one round
        return benchmark.pedantic(lambda: work(None), rounds=1, iterations=1, warmup_rounds=0), 1
    done: queue.Queue[Any] = queue.Queue()
    box: dict[str, Any] = {}

    def thread() -> None:
        try:
            box["run"] = work(done.put)
        except BaseException as exc:  # handed to the main thread below
            box["error"] = exc
        finally:
            done.put(_END)

    worker = threading.Thread(target=thread, name="specrig-workload", daemon=True)
    finished = {"n": 0, "started": False}

    def next_completion() -> None:
        if not finished["started"]:
            finished["started"] = True
            worker.start()
        item = done.get()
        if item is _END:
            raise box.get("error") or BenchError("the workload ended before every request completed")
        finished["n"] += 1

    try:
        benchmark.pedantic(next_completion, rounds=n_requests, iterations=1, warmup_rounds=0)
    finally:
        if finished["started"]:
            worker.join()
    if "error" in box:
        raise box["error"]
    return box["run"], finished["n"]
