"""The client's data: what one run sends (:class:`RunSpec`, its time limits :class:`Limits`), one
streamed request as the client saw it, one measured run, and the shape of a request builder. Its own
module, so the transport (:mod:`.http`) and the load generator (:mod:`.client`) share the types
without importing each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from specrig.core.prompt import Prompt

__all__ = ["Limits", "RequestBuilder", "RequestResult", "RunResult", "RunSpec"]


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
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    engine_error: str | None = None
    max_tokens: int | None = None
    skipped: bool = False
    """Not sent, by the run's own choice (:attr:`RunSpec.skip`): neither a success nor a failure."""

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
        for k in ("final_payload", "chunk_times", "chunk_tokens", "token_ids", "prompt_token_ids"):
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


RequestBuilder = Callable[[Prompt, int], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Limits:
    """Per request, in seconds: ``timeout_s`` the whole request; ``first_token_timeout_s`` (None: none)
    from its send to its first token, failing it with "stalled: no first token within F s of sending";
    ``stall_timeout_s`` (None: none) the longest the stream may go without any byte once tokens flow
    (and, when ``first_token_timeout_s`` is None, before the first one too), failing it with "stalled:
    no data for S s after N tokens"."""

    timeout_s: float = 1800.0
    stall_timeout_s: float | None = None
    first_token_timeout_s: float | None = None

    @property
    def before_first_token_s(self) -> float | None:
        """The limit from the send to the first token."""
        return self.first_token_timeout_s if self.first_token_timeout_s is not None else self.stall_timeout_s

    @property
    def warm_s(self) -> float:
        """How long warming a connection may take: the stall limits, never more than 2 s (10 s without)."""
        limits = [x for x in (self.stall_timeout_s, self.first_token_timeout_s) if x is not None]
        return min([2.0, *limits]) if limits else 10.0


@dataclass(frozen=True)
class RunSpec:
    """What one run sends, and how: the one argument of :func:`specrig.serve.client.run_workload`.

    ``prompts``, each asking ``max_tokens`` output tokens unless it sets its own; ``build`` makes
    each request (:func:`specrig.serve.client.openai_request`, or an engine's native endpoint).
    ``concurrency``: the most requests in flight (with no ``request_rate``, at least ``concurrency``
    requests are sent: prompts are cycled). ``request_rate``: open-loop arrivals (requests/s) with
    ``burstiness`` and ``seed`` (see :func:`specrig.serve.client.arrival_times`). ``limits``: each
    request's time limits. ``api_key``: sent with every request (``Authorization: Bearer``).

    ``progress``: the label of a live bar (requests done, tokens, tok/s) on the log's console;
    where that is no terminal, a plain line every ``progress_lines_s`` seconds (None: nothing).

    The wire: ``connections`` kept-alive connections (None: ``concurrency`` + 2); a request whose
    connection drops before any answer is sent again up to ``retries`` times, after
    ``retry_backoff_s`` x the attempt's number (a server closing an idle kept-alive connection just
    as it is reused). ``skip``: asked as each request's turn to be sent comes; True leaves it unsent
    (``RequestResult.skipped``), neither a success nor a failure."""

    prompts: tuple[Prompt, ...]
    max_tokens: int
    build: RequestBuilder
    concurrency: int = 1
    request_rate: float | None = None
    burstiness: float = 1.0
    seed: int = 0
    limits: Limits = Limits()
    api_key: str | None = None
    progress: str | None = None
    progress_lines_s: float | None = None
    connections: int | None = None
    retries: int = 1
    retry_backoff_s: float = 0.0
    skip: Callable[[Prompt], bool] | None = None
