"""The client's wire: keep-alive HTTP connections (aiohttp, whose C parser keeps the
client far from being the bottleneck) and a lean reader of
server-sent events that folds each streamed payload into a
:class:`~specrig.serve.types.RequestResult`.

Chunk arrival is stamped once per network read (every event in one read
arrived together), before any JSON is parsed, so parsing cost never shows up
as latency.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from specrig.core.redact import excerpt
from specrig.serve.auth import auth_headers

if TYPE_CHECKING:
    from specrig.serve.types import Limits, RequestResult

__all__ = ["Transport", "stream_request"]


class Transport:
    """One aiohttp connection pool for a run: ``connections`` keep-alive connections (TCP_NODELAY;
    None: ``concurrency`` + 2), opened by :meth:`warm` before the clock starts. An idle connection is
    dropped after 4 s, before the server's own idle limit (uvicorn's 5 s, which vLLM and SGLang keep)
    can close it under a request. With ``api_key`` every request carries ``Authorization: Bearer KEY``.
    A request whose connection drops before any answer is sent again up to ``retries`` times, after
    ``retry_backoff_s`` x the attempt's number."""

    def __init__(
        self,
        base_url: str,
        concurrency: int,
        api_key: str | None = None,
        *,
        connections: int | None = None,
        retries: int = 1,
        retry_backoff_s: float = 0.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        limit = connections if connections is not None else concurrency + 2
        self._connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=4, force_close=False)
        self.session = aiohttp.ClientSession(
            connector=self._connector, timeout=aiohttp.ClientTimeout(total=None), headers=auth_headers(api_key)
        )

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def warm(self, path: str = "/health", timeout_s: float = 10.0) -> None:
        """Open the connections before the run (a GET each, answer ignored, each
        given up after ``timeout_s``), so no request's TTFT includes a TCP connect."""

        async def one() -> None:
            try:
                async with self.session.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                    await r.read()
            except (TimeoutError, aiohttp.ClientError):
                pass

        await asyncio.gather(*(one() for _ in range(min(self.concurrency, 256))))


async def _post(transport: Transport, path: str, body: dict[str, Any], timeout_s: float) -> aiohttp.ClientResponse:
    """POST, again on a fresh connection when a kept-alive one turns out closed before any answer (the
    server dropped it while idle: uvicorn closes idle connections after 5 s, and the pool was opened by
    :meth:`Transport.warm`), up to ``transport.retries`` times. A dead server fails the last attempt too,
    and that error is the request's."""
    url = transport.base_url + path
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    for attempt in range(transport.retries):
        try:
            return await transport.session.post(url, json=body, timeout=timeout)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if transport.retry_backoff_s:
                await asyncio.sleep(transport.retry_backoff_s * (attempt + 1))
    return await transport.session.post(url, json=body, timeout=timeout)


_SSE_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")
_EVENT_SHOWN = 120  # bytes of a malformed event quoted in its request's error


async def stream_request(
    transport: Transport,
    path: str,
    body: dict[str, Any],
    res: RequestResult,
    limits: Limits,
    on_tokens: Callable[[int], None] | None = None,
) -> None:
    """Send one streaming request and fill ``res`` (times, tokens, text, errors).

    Every way the request can go wrong ends in ``res.error``, never in an
    exception (except the task's own cancellation, which still fills ``res``
    with what was seen, then propagates): an HTTP error status, a reply that is
    not a server-sent event stream, a malformed event (named, its first 120
    bytes quoted), a broken connection, a stall (``limits``: see
    :class:`~specrig.serve.types.Limits`). ``on_tokens`` hears of every
    token-bearing event (how many tokens it carried)."""
    stream = _Stream(res, limits, on_tokens)
    first_limit = limits.before_first_token_s
    try:
        async with asyncio.timeout_at(None if first_limit is None else stream.clock() + first_limit) as deadline:
            stream.deadline = deadline
            async with await _post(transport, path, body, limits.timeout_s) as resp:
                stream.answered = True
                if await stream.refused(resp):
                    return  # the answer is not a stream: nothing to finish
                await stream.read(resp)
    except asyncio.CancelledError:
        stream.cancelled()
        raise
    except Exception as exc:  # a request's failure, whatever it is, is that request's error
        res.error = stream.failure(exc)
    stream.finish()


class _Stream:
    """One streamed answer as it is read: the bytes and tokens so far, whether the server answered
    and the stream was seen to be server-sent events, and the events folded into the request."""

    def __init__(self, res: RequestResult, limits: Limits, on_tokens: Callable[[int], None] | None) -> None:
        self.res, self.limits, self.on_tokens = res, limits, on_tokens
        self.folder = _Folder(res)
        self.clock = asyncio.get_running_loop().time
        self.deadline: asyncio.Timeout | None = None
        self.done = False  # [DONE] came
        self.answered = False  # the status line and headers came
        self.checked = False  # the stream's first line was seen to be server-sent events
        self.n_tokens = self.n_bytes = 0
        self.buf = b""
        self.t0 = self.last = time.perf_counter()  # the send, and the last data

    async def refused(self, resp: aiohttp.ClientResponse) -> bool:
        """An error status, or a content type that is not server-sent events: the request's error."""
        res = self.res
        if resp.status != 200:
            text = (await resp.read()).decode(errors="replace")
            res.error = f"HTTP {resp.status}: {excerpt(text, 300)}"
            res.engine_error = _error_message(text)
        elif "Content-Type" in resp.headers and resp.content_type != "text/event-stream":
            res.error = _not_sse(resp.content_type, await resp.content.read(_EVENT_SHOWN))
        else:
            return False
        res.e2e_s = time.perf_counter() - self.t0
        return True

    async def read(self, resp: aiohttp.ClientResponse) -> None:
        """Read the stream to its [DONE] (or its first fault), stamping each read's arrival once."""
        content_type = resp.headers.get("Content-Type")
        async for raw in resp.content.iter_any():
            self.last = time.perf_counter()
            self.n_bytes += len(raw)
            self.buf += raw
            if not self.checked and not self._looks_like_sse(content_type):
                break
            self._events(self.last - self.t0)
            if self.done or self.res.error is not None:
                break
            if self.n_tokens or self.limits.first_token_timeout_s is None:  # the silence limit, from this read on
                stall = self.limits.stall_timeout_s
                assert self.deadline is not None
                self.deadline.reschedule(None if stall is None else self.clock() + stall)
        if not self.checked and self.buf.strip() and self.res.error is None:
            self.res.error = _not_sse(content_type, self.buf.lstrip()[:_EVENT_SHOWN])

    def _looks_like_sse(self, content_type: str | None) -> bool:
        """False (the request's error set) once the stream's first bytes show it is no event stream."""
        head = self.buf.lstrip(b"\r\n")
        if len(head) >= 6 or b"\n" in head:
            if not head.startswith(_SSE_FIELDS):
                self.res.error = _not_sse(content_type, head[:_EVENT_SHOWN])
                return False
            self.checked = True
        return True

    def _events(self, now: float) -> None:
        """Fold every whole ``data:`` line of the buffer (arrived at ``now``), keeping the rest."""
        buf, start = self.buf, 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = buf[start:end]
            start = end + 1
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                return
            try:
                n = self.folder.fold(json.loads(data))
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                self.res.error = _malformed(line, exc)
                return
            if n:
                self.res.chunk_times.append(now)
                self.res.chunk_tokens.append(n)
                self.n_tokens += n
                if self.on_tokens is not None:
                    self.on_tokens(n)
        self.buf = buf[start:]

    def failure(self, exc: Exception) -> str:
        """What went wrong, as the request's error."""
        if isinstance(exc, TimeoutError):
            if self.deadline is not None and self.deadline.expired():
                return self._stalled()
            return (
                f"the request took longer than its {self.limits.timeout_s:g} s limit "
                f"({type(exc).__name__}: {exc or 'no detail'})"
            )
        if isinstance(exc, aiohttp.ClientPayloadError):  # the body was cut: the same fault as a stream without [DONE]
            return (
                f"the stream ended early, without [DONE], after {len(self.res.chunk_times)} chunk(s) "
                f"(did the server die?) ({type(exc).__name__})"
            )
        if isinstance(exc, aiohttp.ClientError):
            return f"the connection failed mid-stream ({type(exc).__name__}: {exc or 'no detail'})"
        return f"the client failed on this request ({type(exc).__name__}: {exc or 'no detail'})"

    def _stalled(self) -> str:
        lim = self.limits
        silent = "" if self.answered else " (not even the HTTP status line came back)"
        if not self.n_tokens and lim.first_token_timeout_s is not None:
            said = f"{self.n_bytes} bytes of body came" if self.answered else "not even the HTTP status line came back"
            return f"stalled: no first token within {lim.first_token_timeout_s:g} s of sending ({said})"
        return f"stalled: no data for {lim.stall_timeout_s:g} s after {self.n_tokens} tokens{silent}"

    def cancelled(self) -> None:
        """The run stopped under this request: say how far it got, then finish it."""
        if self.res.error is None:
            self.res.error = (
                f"cancelled when the run stopped, after {self.n_tokens} tokens, "
                f"{time.perf_counter() - self.last:.1f} s after its last data"
            )
        self.finish()

    def finish(self) -> None:
        self.res.e2e_s = time.perf_counter() - self.t0
        self.folder.finish(self.done)


def _malformed(line: bytes, exc: Exception) -> str:
    """A malformed stream event, named: its first bytes and what is wrong with it."""
    shown = line[:_EVENT_SHOWN].decode(errors="replace") + ("..." if len(line) > _EVENT_SHOWN else "")
    why = str(exc) if isinstance(exc, _Malformed) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, json.JSONDecodeError):
        why = f"not JSON ({exc})"
    return f"malformed stream event {shown!r}: {why}"


def _not_sse(content_type: str | None, head: bytes) -> str:
    what = content_type or "with no content type"
    shown = head.decode(errors="replace")
    return f"the server answered {what}, not a server-sent event stream: {shown!r}"


class _Malformed(ValueError):
    """A stream event of the wrong shape (valid JSON, but not what the server's API streams)."""


def _int(v: object, what: str) -> int:
    """A count from the stream: an int or absent (None: 0)."""
    if v is None:
        return 0
    if type(v) is not int:
        raise _Malformed(f"{what} is {_kind(v)}, not an integer")
    return v


def _kind(v: object) -> str:
    """A JSON value as an error names it: ``an int (5)``, ``a str ("ten")``."""
    if v is None:
        return "null"
    name = type(v).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({json.dumps(v)[:40]})"


class _Folder:
    """Folds streamed payloads (OpenAI completions chunks, or SGLang ``/generate``
    chunks with cumulative text and ``meta_info``) into a RequestResult."""

    def __init__(self, res: RequestResult) -> None:
        self.res = res
        self.cumulative = 0  # tokens so far, as counted by the chunks themselves
        self.ids: list[int] = []
        self.ids_seen = False
        self.text: list[str] = []  # joined once at the end (appending to a str attribute copies it each time)

    def fold(self, payload: object) -> int:
        """Absorb one payload; returns how many tokens it carried (0: none).
        Raises :class:`_Malformed` for a payload of the wrong shape."""
        res = self.res
        if not isinstance(payload, dict):
            raise _Malformed(f"the event is {_kind(payload)}, not an object")
        if "error" in payload and not payload.get("choices"):
            err = payload["error"]
            res.engine_error = str(err.get("message") if isinstance(err, dict) else err)
            return 0
        meta = payload.get("meta_info")
        if isinstance(meta, dict):  # SGLang native: cumulative text and counts
            return self._fold_native(payload, meta)
        self._prompt_ids(payload.get("prompt_token_ids"))  # vLLM's chat stream: on its first event
        choices = payload.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise _Malformed(f"choices is {_kind(choices)}, not a list")
        n, ids = self._fold_choice(choices[0]) if choices else (0, None)
        usage = payload.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise _Malformed(f"usage is {_kind(usage)}, not an object")
        if usage:
            n = self._fold_usage(usage, n, counts_chunk=bool(choices) and ids is None)
        if usage or payload.get("metrics"):
            res.final_payload.update(payload)
        if n and res.tokens_per_chunk_source is None:
            res.tokens_per_chunk_source = "assumed_one"
        return n

    def _fold_native(self, payload: dict[str, Any], meta: dict[str, Any]) -> int:
        """An SGLang ``/generate`` chunk: cumulative text and counts, output ids cumulative or new."""
        res = self.res
        full = payload.get("text") or ""
        if not isinstance(full, str):
            raise _Malformed(f"text is {_kind(full)}, not a string")
        new_text = full[len(res.text) :]
        res.text = full  # cumulative: replaces, never appended
        total = _int(meta.get("completion_tokens"), "meta_info.completion_tokens")
        res.completion_tokens = total or res.completion_tokens
        res.prompt_tokens = _int(meta.get("prompt_tokens"), "meta_info.prompt_tokens") or res.prompt_tokens
        out_ids = payload.get("output_ids")
        if out_ids is not None:  # cumulative, or only the new ones with --incremental-streaming-output
            if not isinstance(out_ids, list) or not all(type(i) is int for i in out_ids):
                raise _Malformed(f"output_ids is {_kind(out_ids)}, not a list of integers")
            cumulative = len(out_ids) == total and out_ids[: len(self.ids)] == self.ids
            self.ids = list(out_ids) if cumulative else self.ids + out_ids
            self.ids_seen = True
        fin = meta.get("finish_reason")
        if fin is not None:
            res.final_payload = payload
            res.finish_reason = fin.get("type") if isinstance(fin, dict) else str(fin)
        n = total - self.cumulative
        self.cumulative = max(total, self.cumulative)
        if n > 0:
            res.tokens_per_chunk_source = "meta_info"
            return n
        return 1 if new_text else 0

    def _fold_choice(self, c: object) -> tuple[int, list[int] | None]:
        """An OpenAI stream's ``choices[0]``: its text (completions' ``text``, chat's ``delta.content``), token ids, finish reason;
        returns the tokens it carried (by its ids, else one if it carried text) and its ids."""
        if not isinstance(c, dict):
            raise _Malformed(f"choices[0] is {_kind(c)}, not an object")
        text = c.get("text")
        delta = c.get("delta")
        if text is None and delta is not None:  # a chat stream: the new text is delta.content
            if not isinstance(delta, dict):
                raise _Malformed(f"choices[0].delta is {_kind(delta)}, not an object")
            text = delta.get("content")
        if text is not None and not isinstance(text, str):
            raise _Malformed(f"choices[0].text is {_kind(text)}, not a string")
        if text:
            self.text.append(text)
        self._prompt_ids(c.get("prompt_token_ids"))  # vLLM's completions stream: on the first event
        n = 1 if text else 0
        ids = c.get("token_ids")
        if ids is not None:
            if not isinstance(ids, list) or not all(type(i) is int for i in ids):
                raise _Malformed(f"choices[0].token_ids is {_kind(ids)}, not a list of integers")
            self.ids_seen = True
            self.ids += ids
            n = len(ids)
            self.res.tokens_per_chunk_source = "token_ids"
        fin = c.get("finish_reason")
        if fin is not None:
            if not isinstance(fin, str):
                raise _Malformed(f"choices[0].finish_reason is {_kind(fin)}, not a string")
            self.res.finish_reason = fin
        return n, ids

    def _fold_usage(self, usage: dict[str, Any], n: int, *, counts_chunk: bool) -> int:
        """The server's ``usage``: the request's counts; with continuous usage on a chunk without
        token ids (``counts_chunk``), the exact tokens that chunk carried. Returns the chunk's tokens."""
        total = _int(usage.get("completion_tokens"), "usage.completion_tokens")
        self.res.completion_tokens = total
        self.res.prompt_tokens = _int(usage.get("prompt_tokens"), "usage.prompt_tokens")
        if counts_chunk and total > self.cumulative:  # continuous usage: exact per-chunk counts
            n = total - self.cumulative
            self.res.tokens_per_chunk_source = "usage"
        self.cumulative = max(self.cumulative, total)
        return n

    def _prompt_ids(self, ids: object) -> None:
        if ids is None:
            return
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise _Malformed(f"prompt_token_ids is {_kind(ids)}, not a list of integers")
        self.res.prompt_token_ids = list(ids)

    def finish(self, done: bool) -> None:
        res = self.res
        if self.text:
            res.text = "".join(self.text)
        res.chunks = len(res.chunk_times)
        if self.ids_seen:
            res.token_ids = self.ids
        if res.chunk_times:
            res.ttft_s = res.chunk_times[0]
            res.decode_s = res.chunk_times[-1] - res.chunk_times[0]
        if res.error is not None:
            if res.engine_error:
                res.error += f"; the engine said: {res.engine_error}"
            return
        if res.engine_error:
            res.error = f"the engine reported an error mid-stream: {res.engine_error}"
        elif not done and not res.final_payload:
            res.error = f"the stream ended early, without [DONE], after {res.chunks} chunk(s) (did the server die?)"
        elif not res.chunk_times:
            res.error = "no tokens streamed"
        elif not res.completion_tokens:
            res.error = "the server reported no usage (stream_options.include_usage unsupported?)"
        else:
            res.ok = True


def _error_message(text: str) -> str | None:
    try:
        d = json.loads(text)
    except ValueError:
        return None
    err = d.get("error", d.get("detail")) if isinstance(d, dict) else None
    if isinstance(err, dict):
        return str(err.get("message"))
    return str(err) if err is not None else None
