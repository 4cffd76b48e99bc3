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
:mod:`specrig.client_http`.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from .client_http import Transport, stream_request
from .client_progress import RunProgress
from .errors import BenchError, SpecrigError

__all__ = [
    "PROMPTS",
    "Prompt",
    "RequestBuilder",
    "RequestResult",
    "RunResult",
    "arrival_times",
    "openai_request",
    "run_workload",
]


@dataclass(frozen=True)
class Prompt:
    """One request: ``max_tokens`` overrides the run's output length for this prompt."""

    id: str
    text: str
    max_tokens: int | None = None


# The workload of the original story: five prompts, 512 tokens each, one stream at a time.
PROMPTS: tuple[Prompt, ...] = (
    Prompt("relativity", "Explain Einstein's theory of general relativity in detail, including its key predictions."),
    Prompt(
        "n_queens", "Write a Python program that solves the N-queens problem and explain how it works step by step."
    ),
    Prompt("tcp_udp", "Compare TCP and UDP: how each works, their trade-offs, and when to use which."),
    Prompt("photosynthesis", "Describe the process of photosynthesis, from light absorption to sugar production."),
    Prompt("primes", "Prove that there are infinitely many prime numbers, and explain each step of the proof."),
)


@dataclass
class RequestResult:
    """One streamed request, as the client saw it.

    Times are seconds. ``start_s``: when the request was sent, from the start
    of the run. ``chunk_times``: arrival of each token-bearing chunk, from the
    request's send time (``chunk_times[0] == ttft_s``); ``chunk_tokens``: how
    many tokens each of those chunks carried (see ``tokens_per_chunk_source``:
    "token_ids", "usage", "meta_info" or "assumed_one"). ``token_ids``: the
    output token ids when the server returned them (vLLM ``return_token_ids``),
    else None; ``text`` is the exact streamed text. ``error``: why the request
    failed, naming the engine's own error when the stream carried one
    (``engine_error``)."""

    prompt_id: str
    ok: bool
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    chunks: int = 0
    text: str = ""
    final_payload: dict[str, Any] = field(default_factory=dict)
    start_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    tokens_per_chunk_source: str | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    engine_error: str | None = None
    max_tokens: int | None = None

    @property
    def tpot_s(self) -> float | None:
        if self.decode_s is None or self.completion_tokens < 2:
            return None
        return self.decode_s / (self.completion_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        if not self.decode_s or self.completion_tokens < 2:
            return None
        return (self.completion_tokens - 1) / self.decode_s

    @property
    def itl_s(self) -> list[float]:
        """Inter-token latencies: each chunk gap divided evenly over the tokens that chunk carried."""
        out: list[float] = []
        for t0, t1, n in zip(self.chunk_times, self.chunk_times[1:], self.chunk_tokens[1:], strict=False):
            if n > 0:
                out += [(t1 - t0) / n] * n
        return out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("final_payload", "chunk_times", "chunk_tokens", "token_ids"):
            d.pop(k)
        d["text"] = self.text[:200]
        d["tpot_s"] = self.tpot_s
        d["decode_tok_s"] = self.decode_tok_s
        return d


@dataclass
class RunResult:
    """One measured run. ``wall_s``: first send to last completion.
    ``request_rate``/``burstiness``: the open-loop arrival process (None: closed
    loop at ``concurrency``). ``client_cpu_s``: CPU time (user + system) the
    client process spent during the run; ``client_cpu_share`` = that / wall time
    (1.0 = one core busy: the harness may be the bottleneck)."""

    requests: list[RequestResult]
    wall_s: float
    concurrency: int
    max_tokens: int
    request_rate: float | None = None
    burstiness: float = 1.0
    client_cpu_s: float | None = None

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def client_cpu_share(self) -> float | None:
        return self.client_cpu_s / self.wall_s if self.client_cpu_s is not None and self.wall_s else None

    def aggregate(self) -> dict[str, Any]:
        ok = [r for r in self.requests if r.ok]
        decode = [r.decode_tok_s for r in ok if r.decode_tok_s]
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        tpot = [r.tpot_s for r in ok if r.tpot_s is not None]

        def stat(xs: list[float], f: Any) -> float | None:
            return f(xs) if xs else None

        return {
            "requests": len(self.requests),
            "failed": len(self.requests) - len(ok),
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "max_tokens": self.max_tokens,
            "completion_tokens": self.completion_tokens,
            "wall_s": self.wall_s,
            "output_tok_s": self.completion_tokens / self.wall_s if self.wall_s else None,
            "decode_tok_s_mean": stat(decode, statistics.fmean),
            "decode_tok_s_median": stat(decode, statistics.median),
            "decode_tok_s_min": stat(decode, min),
            "decode_tok_s_max": stat(decode, max),
            "ttft_s_median": stat(ttft, statistics.median),
            "ttft_s_mean": stat(ttft, statistics.fmean),
            "tpot_ms_median": stat([t * 1000 for t in tpot], statistics.median),
            "tpot_ms_mean": stat([t * 1000 for t in tpot], statistics.fmean),
            "client_cpu_share": self.client_cpu_share,
        }


RequestBuilder = Callable[[Prompt, int], tuple[str, dict[str, Any]]]


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
    arrivals: list[float],
    on_result: Callable[[RequestResult], None] | None,
    watchdog: Callable[[], None] | None,
    progress: RunProgress | None,
) -> tuple[list[RequestResult], float]:
    sem = asyncio.Semaphore(concurrency)
    failed = asyncio.Event()
    results: list[RequestResult | None] = [None] * len(prompts)
    async with Transport(base_url, concurrency) as transport:
        await transport.warm()  # keep-alive connections open before the clock starts (TTFT without connect)
        t0 = time.perf_counter()

        async def one(i: int, p: Prompt) -> None:
            n = p.max_tokens or max_tokens
            path, body = build(p, n)
            delay = t0 + arrivals[i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                if failed.is_set():
                    res = RequestResult(prompt_id=p.id, ok=False, error="not sent: an earlier request failed")
                else:
                    res = RequestResult(prompt_id=p.id, ok=False, max_tokens=n, start_s=time.perf_counter() - t0)
                    await stream_request(transport, path, body, res, timeout_s, progress)
            results[i] = res
            if not res.ok:
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
                pending -= done
        finally:
            for t in [*tasks, *extra]:
                t.cancel()
            await asyncio.gather(*tasks, *extra, return_exceptions=True)
        wall = time.perf_counter() - t0
    out = [
        r or RequestResult(prompt_id=p.id, ok=False, error="cancelled") for r, p in zip(results, prompts, strict=True)
    ]
    return out, wall


def run_workload(
    base_url: str,
    model: str,
    *,
    prompts: Sequence[Prompt] = PROMPTS,
    max_tokens: int,
    concurrency: int = 1,
    extras: dict[str, Any] | None = None,
    build: RequestBuilder | None = None,
    timeout_s: float = 1800.0,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    on_result: Callable[[RequestResult], None] | None = None,
    watchdog: Callable[[], None] | None = None,
    progress: str | None = None,
) -> RunResult:
    """Send every prompt and stream the answers; returns the run, or raises
    BenchError naming the first failed request.

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
    failed request ends the run (requests not yet sent are not sent)."""
    plist = list(prompts)
    if request_rate is None:
        while len(plist) < concurrency:
            plist += list(prompts)[: concurrency - len(plist)]
    arrivals = arrival_times(len(plist), request_rate, burstiness, seed)
    proc = psutil.Process()
    cpu0 = sum(proc.cpu_times()[:2])
    bar = RunProgress.start(progress, len(plist)) if progress else None
    try:
        requests, wall = asyncio.run(
            _run(
                base_url,
                plist,
                max_tokens=max_tokens,
                concurrency=concurrency,
                build=build or openai_request(extras or {}, model),
                timeout_s=timeout_s,
                arrivals=arrivals,
                on_result=on_result,
                watchdog=watchdog,
                progress=bar,
            )
        )
    finally:
        if bar is not None:
            bar.stop()
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    result = RunResult(requests, wall, concurrency, max_tokens, request_rate, burstiness, cpu)
    failed = [r for r in result.requests if not r.ok]
    if failed:
        first = failed[0]
        if watchdog is not None:
            _wait_for_watchdog(watchdog, f"{first.prompt_id}: {first.error}")
        raise BenchError(
            f"{len(failed)} of {len(result.requests)} requests failed; first: {first.prompt_id}: {first.error}",
            hint="see the server log in the results folder",
        )
    return result


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
