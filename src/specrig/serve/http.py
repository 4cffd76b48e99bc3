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
from typing import TYPE_CHECKING, Any

import aiohttp

from specrig.core.redact import excerpt
from specrig.serve.auth import auth_headers

if TYPE_CHECKING:
    from specrig.serve.progress import RunProgress
    from specrig.serve.types import RequestResult

__all__ = ["Transport", "stream_request"]


class Transport:
    """One aiohttp connection pool for a run: ``concurrency`` keep-alive
    connections (TCP_NODELAY), opened by :meth:`warm` before the clock starts. An idle connection is dropped
    after 4 s, before the server's own idle limit (uvicorn's 5 s, which vLLM and SGLang keep) can close it
    under a request. With ``api_key`` every request carries ``Authorization: Bearer KEY``."""

    def __init__(self, base_url: str, concurrency: int, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self._connector = aiohttp.TCPConnector(limit=concurrency + 2, keepalive_timeout=4, force_close=False)
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
    """POST, once more on a fresh connection when a kept-alive one turns out closed before any answer (the
    server dropped it while idle: uvicorn closes idle connections after 5 s, and the pool was opened by
    :meth:`Transport.warm`). A dead server fails the second attempt too, and that error is the request's."""
    url = transport.base_url + path
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        return await transport.session.post(url, json=body, timeout=timeout)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        return await transport.session.post(url, json=body, timeout=timeout)


_SSE_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")
_EVENT_SHOWN = 120  # bytes of a malformed event quoted in its request's error


async def stream_request(
    transport: Transport,
    path: str,
    body: dict[str, Any],
    res: RequestResult,
    timeout_s: float,
    progress: RunProgress | None = None,
    *,
    stall_timeout_s: float | None = None,
    first_token_timeout_s: float | None = None,
) -> None:
    """Send one streaming request and fill ``res`` (times, tokens, text, errors).

    Every way the request can go wrong ends in ``res.error``, never in an
    exception (except the task's own cancellation, which still fills ``res``
    with what was seen, then propagates): an HTTP error status, a reply that is
    not a server-sent event stream, a malformed event (named, its first 120
    bytes quoted), a broken connection, a stall.

    ``timeout_s``: the whole request. ``first_token_timeout_s``: from the send
    to the first token. ``stall_timeout_s``: the longest silence (no bytes at
    all) on the stream once tokens flow; before the first token it applies too
    when ``first_token_timeout_s`` is None (a server that accepts the request
    and never answers). None: no such limit."""
    perf = time.perf_counter
    times, counts = res.chunk_times, res.chunk_tokens
    folder = _Folder(res)
    done = False
    n_tokens = 0
    n_bytes = 0
    answered = False  # the status line and headers came
    loop = asyncio.get_running_loop()
    first_limit = first_token_timeout_s if first_token_timeout_s is not None else stall_timeout_s
    t0 = perf()
    last = t0  # the last data (or the send)
    deadline: asyncio.Timeout | None = None
    try:
        async with asyncio.timeout_at(None if first_limit is None else loop.time() + first_limit) as deadline:
            async with await _post(transport, path, body, timeout_s) as resp:
                answered = True
                if resp.status != 200:
                    text = (await resp.read()).decode(errors="replace")
                    res.error = f"HTTP {resp.status}: {excerpt(text, 300)}"
                    res.engine_error = _error_message(text)
                    res.e2e_s = perf() - t0
                    return
                if "Content-Type" in resp.headers and resp.content_type != "text/event-stream":
                    head = await resp.content.read(_EVENT_SHOWN)
                    res.error = _not_sse(resp.content_type, head)
                    res.e2e_s = perf() - t0
                    return
                buf = b""
                checked = False  # the stream's first line was seen to be server-sent events
                async for raw in resp.content.iter_any():
                    last = perf()
                    now = last - t0
                    n_bytes += len(raw)
                    buf += raw
                    if not checked:
                        head = buf.lstrip(b"\r\n")
                        if len(head) >= 6 or b"\n" in head:
                            if not head.startswith(_SSE_FIELDS):
                                res.error = _not_sse(resp.headers.get("Content-Type"), head[:_EVENT_SHOWN])
                                break
                            checked = True
                    start = 0
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
                            done = True
                            break
                        try:
                            n = folder.fold(json.loads(data))
                        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                            res.error = _malformed(line, exc)
                            break
                        if n:
                            times.append(now)
                            counts.append(n)
                            n_tokens += n
                            if progress is not None:
                                progress.tokens(n)
                    if done or res.error is not None:
                        break
                    buf = buf[start:]
                    if n_tokens or first_token_timeout_s is None:  # the silence limit, from this read on
                        deadline.reschedule(None if stall_timeout_s is None else loop.time() + stall_timeout_s)
                if not checked and buf.strip() and res.error is None:
                    res.error = _not_sse(resp.headers.get("Content-Type"), buf.lstrip()[:_EVENT_SHOWN])
    except TimeoutError as exc:
        if deadline is not None and deadline.expired():
            res.error = _stalled(
                n_tokens=n_tokens,
                n_bytes=n_bytes,
                answered=answered,
                limit_s=(
                    first_token_timeout_s if not n_tokens and first_token_timeout_s is not None else stall_timeout_s
                ),
                first_token=not n_tokens and first_token_timeout_s is not None,
            )
        else:
            res.error = (
                f"the request took longer than its {timeout_s:g} s limit ({type(exc).__name__}: {exc or 'no detail'})"
            )
    except aiohttp.ClientPayloadError as exc:  # the body was cut: the same fault as a stream without [DONE]
        res.error = (
            f"the stream ended early, without [DONE], after {len(res.chunk_times)} chunk(s) (did the server die?) "
            f"({type(exc).__name__})"
        )
    except aiohttp.ClientError as exc:
        res.error = f"the connection failed mid-stream ({type(exc).__name__}: {exc or 'no detail'})"
    except asyncio.CancelledError:
        if res.error is None:
            res.error = (
                f"cancelled when the run stopped, after {n_tokens} tokens, {perf() - last:.1f} s after its last data"
            )
        res.e2e_s = perf() - t0
        folder.finish(done)
        raise
    except Exception as exc:  # a request's failure, whatever it is, is that request's error
        res.error = f"the client failed on this request ({type(exc).__name__}: {exc or 'no detail'})"
    res.e2e_s = perf() - t0
    folder.finish(done)


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


def _stalled(*, n_tokens: int, n_bytes: int, answered: bool, limit_s: float | None, first_token: bool) -> str:
    if first_token:
        said = f"{n_bytes} bytes of body came" if answered else "not even the HTTP status line came back"
        return f"stalled: no first token within {limit_s:g} s of sending ({said})"
    where = "" if answered else " (not even the HTTP status line came back)"
    return f"stalled: no data for {limit_s:g} s after {n_tokens} tokens{where}"


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
        n = 0
        ids = None
        choices = payload.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise _Malformed(f"choices is {_kind(choices)}, not a list")
        if choices:
            c = choices[0]
            if not isinstance(c, dict):
                raise _Malformed(f"choices[0] is {_kind(c)}, not an object")
            text = c.get("text")
            if text is not None and not isinstance(text, str):
                raise _Malformed(f"choices[0].text is {_kind(text)}, not a string")
            if text:
                self.text.append(text)
            ids = c.get("token_ids")
            if ids is not None:
                if not isinstance(ids, list) or not all(type(i) is int for i in ids):
                    raise _Malformed(f"choices[0].token_ids is {_kind(ids)}, not a list of integers")
                self.ids_seen = True
                self.ids += ids
                n = len(ids)
                res.tokens_per_chunk_source = "token_ids"
            elif text:
                n = 1
            fin = c.get("finish_reason")
            if fin is not None:
                if not isinstance(fin, str):
                    raise _Malformed(f"choices[0].finish_reason is {_kind(fin)}, not a string")
                res.finish_reason = fin
        usage = payload.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise _Malformed(f"usage is {_kind(usage)}, not an object")
        if usage:
            total = _int(usage.get("completion_tokens"), "usage.completion_tokens")
            res.completion_tokens = total
            res.prompt_tokens = _int(usage.get("prompt_tokens"), "usage.prompt_tokens")
            if choices and ids is None and total > self.cumulative:  # continuous usage: exact per-chunk counts
                n = total - self.cumulative
                res.tokens_per_chunk_source = "usage"
            self.cumulative = max(self.cumulative, total)
        if usage or payload.get("metrics"):
            res.final_payload.update(payload)
        if n and res.tokens_per_chunk_source is None:
            res.tokens_per_chunk_source = "assumed_one"
        return n

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
