"""The streaming load generator: OpenAI ``/v1/completions`` with ``stream``
(or an engine's native endpoint, e.g. SGLang's ``/generate``), greedy, a fixed
number of output tokens per request (``ignore_eos``).

Load: a fixed number of requests in flight (``concurrency``), or open-loop
arrivals at ``request_rate`` requests/s (Poisson; gamma intervals with
``burstiness`` != 1), capped by ``concurrency``.

Per request it records the send time, the arrival time of every token-bearing
chunk and how many tokens each carried, the output token ids when the server
returns them, and the server's own ``usage.completion_tokens``. Token counts
are never inferred from chunks: under speculative decoding several tokens
arrive per chunk, so TPOT = (last - first) / (completion_tokens - 1), and each
inter-token latency (ITL) is a chunk gap divided by the tokens that chunk
carried. Tokens per chunk come from, in order of preference: the chunk's
``token_ids`` (vLLM's ``return_token_ids``), a cumulative count the chunk
carries (continuous ``usage``, SGLang's ``meta_info``), else one per chunk
(``RequestResult.tokens_per_chunk_source`` says which).

The HTTP/SSE details (connection handling, the lean event parser) live in
:mod:`specrig.serve.http`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from specrig.core.errors import BenchError, SpecrigError
from specrig.core.prompt import Prompt, cycle_prompts
from specrig.serve.auth import KEY_HINT, refused, unauthorized
from specrig.serve.http import Transport, stream_request
from specrig.serve.progress import RunProgress
from specrig.serve.types import RequestBuilder, RequestResult, RunResult

__all__ = [
    "Prompt",
    "RequestBuilder",
    "RequestResult",
    "RunResult",
    "arrival_times",
    "openai_request",
    "run_workload",
]


def openai_request(extras: dict[str, Any], model: str) -> RequestBuilder:
    """Streaming ``/v1/completions``: greedy, fixed length, usage in the last chunk."""

    def build(p: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body = {
            "model": model,
            "prompt": p.text,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            **extras,
        }
        return "/v1/completions", body

    return build


def arrival_times(n: int, request_rate: float | None, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Send times (s from the start) of ``n`` requests: all at 0 when
    ``request_rate`` is None or infinite, else a renewal process whose intervals
    are gamma(shape=burstiness, mean=1/request_rate): burstiness 1 is Poisson,
    < 1 burstier, > 1 more even. Drawn as they are (not rescaled to n/rate)."""
    if request_rate is None or request_rate == float("inf"):
        return [0.0] * n
    if request_rate <= 0 or burstiness <= 0:
        raise BenchError(f"request rate ({request_rate}) and burstiness ({burstiness}) must be > 0")
    rnd = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        if i:
            t += rnd.gammavariate(burstiness, 1.0 / (request_rate * burstiness))
        out.append(t)
    return out


async def _run(
    base_url: str,
    prompts: list[Prompt],
    *,
    max_tokens: int,
    concurrency: int,
    build: RequestBuilder,
    timeout_s: float,
    stall_timeout_s: float | None,
    first_token_timeout_s: float | None,
    arrivals: list[float],
    on_result: Callable[[RequestResult], None] | None,
    watchdog: Callable[[], None] | None,
    progress: RunProgress | None,
    api_key: str | None = None,
) -> tuple[list[RequestResult], float, list[int]]:
    """The run; returns every request's result (in prompt order), the wall time,
    and the indices of the requests that failed, in the order they failed
    (requests cancelled or never sent because the run stopped are not among them)."""
    sem = asyncio.Semaphore(concurrency)
    failed = asyncio.Event()
    failures: list[int] = []
    results: list[RequestResult | None] = [None] * len(prompts)
    async with Transport(base_url, concurrency, api_key) as transport:
        # keep-alive connections open before the clock starts (TTFT without connect); with a stall limit, a
        # server that never answers costs here at most that limit, and never more than 2 s
        limits = [x for x in (stall_timeout_s, first_token_timeout_s) if x is not None]
        await transport.warm(timeout_s=min([2.0, *limits]) if limits else 10.0)
        t0 = time.perf_counter()

        async def one(i: int, p: Prompt) -> None:
            res = results[i] = RequestResult(prompt_id=p.id, ok=False, error="not sent: an earlier request failed")
            broke = False
            try:
                n = p.output_len or max_tokens
                path, body = build(p, n)
                delay = t0 + arrivals[i] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                async with sem:
                    if not failed.is_set():
                        res = results[i] = RequestResult(
                            prompt_id=p.id, ok=False, max_tokens=n, start_s=time.perf_counter() - t0
                        )
                        await stream_request(
                            transport,
                            path,
                            body,
                            res,
                            timeout_s,
                            progress,
                            stall_timeout_s=stall_timeout_s,
                            first_token_timeout_s=first_token_timeout_s,
                        )
            except Exception as exc:  # never a silent task death: the request's own error, and fail-fast
                res.ok = False
                res.error = f"the client failed on this request ({type(exc).__name__}: {exc or 'no detail'})"
                broke = True
            if not res.ok:
                if res.start_s is not None or broke:  # it went wrong (not: never sent, because an earlier one had)
                    failures.append(i)
                failed.set()
            if on_result is not None:
                on_result(res)
            if progress is not None:
                progress.request_done(res)

        async def watch(check: Callable[[], None]) -> None:
            while True:
                await asyncio.sleep(0.5)
                check()

        tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate(prompts)]
        extra = [asyncio.create_task(failed.wait())]
        if watchdog is not None:
            extra.append(asyncio.create_task(watch(watchdog)))
        try:
            pending = set(tasks)
            while pending:
                done, _ = await asyncio.wait(pending | set(extra), return_when=asyncio.FIRST_COMPLETED)
                for t in extra[1:]:
                    if t in done:
                        t.result()  # the watchdog's error (e.g. the engine died) ends the run
                if extra[0] in done:
                    break  # fail fast: the rest would fail the same way or be discarded
                for t in done & pending:
                    t.result()  # a request's task ends only by an error of on_result or progress: the caller's
                pending -= done
        finally:
            for t in [*tasks, *extra]:
                t.cancel()
            await asyncio.gather(*tasks, *extra, return_exceptions=True)
        wall = time.perf_counter() - t0
    out = [
        r or RequestResult(prompt_id=p.id, ok=False, error="not sent: an earlier request failed")
        for r, p in zip(results, prompts, strict=True)
    ]
    return out, wall, failures


def run_workload(
    base_url: str,
    model: str,
    *,
    prompts: Sequence[Prompt],
    max_tokens: int,
    concurrency: int = 1,
    extras: dict[str, Any] | None = None,
    build: RequestBuilder | None = None,
    timeout_s: float = 1800.0,
    stall_timeout_s: float | None = None,
    first_token_timeout_s: float | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    on_result: Callable[[RequestResult], None] | None = None,
    watchdog: Callable[[], None] | None = None,
    progress: str | None = None,
    api_key: str | None = None,
) -> RunResult:
    """Send every prompt and stream the answers; returns the run, or raises
    BenchError naming the first failed request (and the others that failed in flight).

    ``concurrency``: the most requests in flight (with no ``request_rate``, at
    least ``concurrency`` requests are sent: prompts are cycled). ``request_rate``:
    open-loop arrivals (requests/s) with ``burstiness`` and ``seed`` (see
    :func:`arrival_times`). ``max_tokens``: output tokens per request unless the
    prompt sets its own. ``build`` makes each request (default: OpenAI
    completions with ``extras``). ``on_result`` is called (on the client's
    thread) as each request finishes. ``watchdog`` is called every 0.5 s and
    once when a request fails; an exception it raises (e.g. the server's
    EngineError when its engine died) ends the run and propagates, so the
    caller sees the engine's error, not the client's. ``progress``: a label
    for a live progress bar (shown only when stdout is a terminal). The first
    failed request ends the run (requests not yet sent are not sent; those in
    flight are cancelled, each saying how far it got).

    Time limits, per request: ``timeout_s`` the whole request;
    ``first_token_timeout_s`` (None: none) from its send to its first token,
    failing it with "stalled: no first token within F s of sending";
    ``stall_timeout_s`` (None: none) the longest the stream may go without any
    byte once tokens flow (and, when ``first_token_timeout_s`` is None, before
    the first one too), failing it with "stalled: no data for S s after N
    tokens". A server that accepts requests and never streams thus ends the run
    within the limit (plus the cancellation of the rest, well under a second).
    Every fault fails its own request with a message (a malformed event is
    quoted, a reply that is not server-sent events is named with its content
    type and first bytes), and the first one stops the run.

    ``api_key``: sent with every request (``Authorization: Bearer``); a server that refuses it, or
    wants one and got none, ends the run with HTTP 401 named and where a key is given."""
    plist = cycle_prompts(prompts, concurrency) if request_rate is None else list(prompts)
    arrivals = arrival_times(len(plist), request_rate, burstiness, seed)
    proc = psutil.Process()
    cpu0 = sum(proc.cpu_times()[:2])
    bar = RunProgress.start(progress, len(plist)) if progress else None
    try:
        requests, wall, failures = asyncio.run(
            _run(
                base_url,
                plist,
                max_tokens=max_tokens,
                concurrency=concurrency,
                build=build or openai_request(extras or {}, model),
                timeout_s=timeout_s,
                stall_timeout_s=stall_timeout_s,
                first_token_timeout_s=first_token_timeout_s,
                arrivals=arrivals,
                on_result=on_result,
                watchdog=watchdog,
                progress=bar,
                api_key=api_key,
            )
        )
    finally:
        if bar is not None:
            bar.stop()
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    result = RunResult(requests, wall, concurrency, max_tokens, request_rate, burstiness, cpu)
    failed = [r for r in result.requests if not r.ok]
    if failed:
        first = requests[failures[0]] if failures else failed[0]
        status = refused(first.error)
        if watchdog is not None and status is None:  # a refused key is no dying server
            _wait_for_watchdog(watchdog, f"{first.prompt_id}: {first.error}")
        if status is not None:
            raise BenchError(
                f"{unauthorized(f'{base_url} (request {first.prompt_id})', status, sent=bool(api_key))}\n"
                + _failure_message(first, failed, len(result.requests)),
                hint=KEY_HINT,
            )
        raise BenchError(
            _failure_message(first, failed, len(result.requests)),
            hint="see the server's log (in the results folder's logs/ when specrig launched the server)",
        )
    return result


def _failure_message(first: RequestResult, failed: list[RequestResult], total: int, shown: int = 8) -> str:
    """The first failure, then every other request that was sent and did not
    finish (not those never sent), grouped by what each says."""
    sent = [r for r in failed if r is first or not (r.error or "").startswith("not sent")]
    unsent = len(failed) - len(sent)
    msg = f"{len(sent)} of {total} requests failed"
    if unsent:
        msg += f" ({unsent} not sent: the run stops at the first failure)"
    msg += f"; first: {first.prompt_id}: {first.error}"
    groups: dict[str, list[str]] = {}
    for r in failed:
        if r is not first and not (r.error or "").startswith("not sent"):
            groups.setdefault(r.error or "no error recorded", []).append(r.prompt_id)
    if groups:
        lines = []
        for err, ids in groups.items():
            more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
            lines.append(f"  {', '.join(ids[:shown])}{more}: {'the same' if err == first.error else err}")
        msg += "\nthe other requests in flight:\n" + "\n".join(lines)
    return msg


def _wait_for_watchdog(watchdog: Callable[[], None], client_saw: str, grace_s: float = 3.0) -> None:
    """A request failed: give a dying server ``grace_s`` to show it (the watchdog
    raises); its error then also says what the client saw."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            watchdog()
        except SpecrigError as exc:
            exc.message += f"\nthe client saw: {client_saw}"
            raise
        if time.monotonic() > deadline:
            return
        time.sleep(0.25)
