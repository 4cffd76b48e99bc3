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
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NoReturn

import psutil
from rich.progress import Progress

from specrig.core.errors import BenchError, SpecrigError
from specrig.core.log import log
from specrig.core.prompt import Prompt, cycle_prompts
from specrig.serve.auth import KEY_HINT, refused, unauthorized
from specrig.serve.http import Transport, stream_request
from specrig.serve.types import Limits, RequestBuilder, RequestResult, RunResult, RunSpec

__all__ = [
    "Limits",
    "Prompt",
    "RequestBuilder",
    "RequestResult",
    "RunResult",
    "RunSpec",
    "arrival_times",
    "openai_request",
    "run_workload",
]


def openai_request(
    extras: dict[str, Any], model: str, *, ignore_eos: bool = True, chat: bool = False
) -> RequestBuilder:
    """Streaming ``/v1/completions`` (``chat``: ``/v1/chat/completions`` with the prompt as one
    user message, so the server applies the model's chat template): greedy, usage in the last
    chunk; fixed length unless ``ignore_eos`` is False (answers end at the model's EOS)."""

    def build(p: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        said: dict[str, Any] = {"messages": [{"role": "user", "content": p.text}]} if chat else {"prompt": p.text}
        body = {
            "model": model,
            **said,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
            **extras,
        }
        return ("/v1/chat/completions" if chat else "/v1/completions"), body

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


class _Bar:
    """The run's task on the log's progress bar: requests done of all, tokens streamed, output tok/s."""

    def __init__(self, progress: Progress, label: str, total: int) -> None:
        self._p = progress
        self._task = progress.add_task(label, total=total, note="0 tokens, 0.0 tok/s")
        self._tokens = 0
        self._t0 = time.perf_counter()
        self._last = 0.0

    def tokens(self, n: int) -> None:
        self._tokens += n
        now = time.perf_counter()
        if now - self._last > 0.25:  # cheap: the bar redraws 4 times a second anyway
            self._last = now
            self._update()

    def request_done(self) -> None:
        self._p.advance(self._task)
        self._update()

    def _update(self) -> None:
        dt = time.perf_counter() - self._t0
        self._p.update(self._task, note=f"{self._tokens} tokens, {self._tokens / dt if dt else 0.0:.1f} tok/s")


class _Run:
    """One run on one connection pool: every request's task, the fail-fast event, and the results
    (in prompt order) with the indices of the requests that failed, in the order they failed."""

    def __init__(
        self,
        spec: RunSpec,
        prompts: list[Prompt],
        arrivals: list[float],
        transport: Transport,
        on_result: Callable[[RequestResult], None] | None,
        bar: _Bar | None,
    ) -> None:
        self.spec, self.prompts, self.transport, self.on_result, self.bar = spec, prompts, transport, on_result, bar
        self.arrivals = arrivals
        self.sem = asyncio.Semaphore(spec.concurrency)
        self.failed = asyncio.Event()
        self.failures: list[int] = []
        self.results: list[RequestResult | None] = [None] * len(prompts)
        self.t0 = time.perf_counter()

    async def one(self, i: int, p: Prompt) -> None:
        """Send request ``i`` at its arrival time, within the concurrency, unless the run has failed."""
        res = self.results[i] = RequestResult(prompt_id=p.id, ok=False, error="not sent: an earlier request failed")
        broke = False
        try:
            n = p.output_len or self.spec.max_tokens
            path, body = self.spec.build(p, n)
            delay = self.t0 + self.arrivals[i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with self.sem:
                if self.spec.skip is not None and self.spec.skip(p):
                    res = self.results[i] = RequestResult(prompt_id=p.id, ok=False, max_tokens=n, skipped=True)
                elif not self.failed.is_set():
                    res = self.results[i] = RequestResult(
                        prompt_id=p.id, ok=False, max_tokens=n, start_s=time.perf_counter() - self.t0
                    )
                    on_tokens = self.bar.tokens if self.bar is not None else None
                    await stream_request(self.transport, path, body, res, self.spec.limits, on_tokens)
        except Exception as exc:  # never a silent task death: the request's own error, and fail-fast
            res.ok = False
            res.error = f"the client failed on this request ({type(exc).__name__}: {exc or 'no detail'})"
            broke = True
        self._done(i, res, broke)

    def _done(self, i: int, res: RequestResult, broke: bool) -> None:
        if not res.ok and not res.skipped:
            if res.start_s is not None or broke:  # it went wrong (not: never sent, because an earlier one had)
                self.failures.append(i)
            self.failed.set()
        if self.on_result is not None:
            self.on_result(res)
        if self.bar is not None:
            self.bar.request_done()

    async def all(self, watchdog: Callable[[], None] | None) -> tuple[list[RequestResult], float]:
        """Every request, until all are done, one fails, or the watchdog raises."""
        tasks = [asyncio.create_task(self.one(i, p)) for i, p in enumerate(self.prompts)]
        stop = asyncio.create_task(self.failed.wait())
        watch = asyncio.create_task(_watch(watchdog)) if watchdog is not None else None
        extra = [t for t in (stop, watch) if t is not None]
        try:
            pending = set(tasks)
            while pending:
                done, _ = await asyncio.wait(pending | set(extra), return_when=asyncio.FIRST_COMPLETED)
                if watch is not None and watch in done:
                    watch.result()  # the watchdog's error (e.g. the engine died) ends the run
                if stop in done:
                    break  # fail fast: the rest would fail the same way or be discarded
                for t in done & pending:
                    t.result()  # a request's task ends only by an error of on_result or progress: the caller's
                pending -= done
        finally:
            for t in [*tasks, *extra]:
                t.cancel()
            await asyncio.gather(*tasks, *extra, return_exceptions=True)
        wall = time.perf_counter() - self.t0
        out = [
            r or RequestResult(prompt_id=p.id, ok=False, error="not sent: an earlier request failed")
            for r, p in zip(self.results, self.prompts, strict=True)
        ]
        return out, wall


async def _watch(check: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(0.5)
        check()


async def _run(
    base_url: str,
    spec: RunSpec,
    prompts: list[Prompt],
    on_result: Callable[[RequestResult], None] | None,
    watchdog: Callable[[], None] | None,
    bar: Progress | None,
) -> tuple[list[RequestResult], float, list[int]]:
    """The run; returns every request's result (in prompt order), the wall time,
    and the indices of the requests that failed, in the order they failed
    (requests cancelled or never sent because the run stopped are not among them)."""
    arrivals = arrival_times(len(prompts), spec.request_rate, spec.burstiness, spec.seed)
    async with Transport(
        base_url,
        spec.concurrency,
        spec.api_key,
        connections=spec.connections,
        retries=spec.retries,
        retry_backoff_s=spec.retry_backoff_s,
    ) as transport:
        # keep-alive connections open before the clock starts (TTFT without connect); with a stall limit, a
        # server that never answers costs here at most that limit, and never more than 2 s
        await transport.warm(timeout_s=spec.limits.warm_s)
        label = spec.progress or ""
        counter = _Bar(bar, label, len(prompts)) if bar is not None else None
        run = _Run(spec, prompts, arrivals, transport, on_result, counter)
        requests, wall = await run.all(watchdog)
    return requests, wall, run.failures


def run_workload(
    base_url: str,
    spec: RunSpec,
    *,
    on_result: Callable[[RequestResult], None] | None = None,
    watchdog: Callable[[], None] | None = None,
) -> RunResult:
    """Send every prompt of ``spec`` (see :class:`~specrig.serve.types.RunSpec`) and stream the
    answers; returns the run, or raises BenchError naming the first failed request (and the others
    that failed in flight).

    ``on_result`` is called (on the client's thread) as each request finishes. ``watchdog`` is
    called every 0.5 s and once when a request fails; an exception it raises (e.g. the server's
    EngineError when its engine died) ends the run and propagates, so the caller sees the engine's
    error, not the client's. The first failed request ends the run (requests not yet sent are not
    sent; those in flight are cancelled, each saying how far it got). A server that accepts
    requests and never streams thus ends the run within the stall limit (plus the cancellation of
    the rest, well under a second). Every fault fails its own request with a message (a malformed
    event is quoted, a reply that is not server-sent events is named with its content type and
    first bytes). A server that refuses the key, or wants one and got none, ends the run with
    HTTP 401 named and where a key is given."""
    plist = cycle_prompts(spec.prompts, spec.concurrency) if spec.request_rate is None else list(spec.prompts)
    proc = psutil.Process()
    cpu0 = sum(proc.cpu_times()[:2])
    bar = log.progress(spec.progress_lines_s, transient=False) if spec.progress else nullcontext()
    with bar as progress:
        requests, wall, failures = asyncio.run(_run(base_url, spec, plist, on_result, watchdog, progress))
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    result = RunResult(requests, wall, spec.concurrency, spec.max_tokens, spec.request_rate, spec.burstiness, cpu)
    failed = [r for r in result.requests if not r.ok and not r.skipped]
    if failed:
        first = requests[failures[0]] if failures else failed[0]
        _raise_failure(base_url, spec, first, failed, len(requests), watchdog)
    return result


def _raise_failure(
    base_url: str,
    spec: RunSpec,
    first: RequestResult,
    failed: list[RequestResult],
    total: int,
    watchdog: Callable[[], None] | None,
) -> NoReturn:
    """The run failed: the watchdog's error when the server is dying, else the first failure named."""
    status = refused(first.error)
    if watchdog is not None and status is None:  # a refused key is no dying server
        _wait_for_watchdog(watchdog, f"{first.prompt_id}: {first.error}")
    if status is not None:
        raise BenchError(
            f"{unauthorized(f'{base_url} (request {first.prompt_id})', status, sent=bool(spec.api_key))}\n"
            + _failure_message(first, failed, total),
            hint=KEY_HINT,
        )
    raise BenchError(
        _failure_message(first, failed, total),
        hint="see the server's log (in the results folder's logs/ when specrig launched the server)",
    )


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
