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

if TYPE_CHECKING:
    from specrig.serve.progress import RunProgress
    from specrig.serve.types import RequestResult

__all__ = ["Transport", "stream_request"]


class Transport:
    """One aiohttp connection pool for a run: ``concurrency`` keep-alive
    connections (TCP_NODELAY), opened by :meth:`warm` before the clock starts."""

    def __init__(self, base_url: str, concurrency: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self._connector = aiohttp.TCPConnector(limit=concurrency + 2, keepalive_timeout=300, force_close=False)
        self.session = aiohttp.ClientSession(connector=self._connector, timeout=aiohttp.ClientTimeout(total=None))

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def warm(self, path: str = "/health") -> None:
        """Open the connections before the run (a GET each, answer ignored), so
        no request's TTFT includes a TCP connect."""

        async def one() -> None:
            try:
                async with self.session.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=10)) as r:
                    await r.read()
            except (TimeoutError, aiohttp.ClientError):
                pass

        await asyncio.gather(*(one() for _ in range(min(self.concurrency, 256))))


async def stream_request(
    transport: Transport,
    path: str,
    body: dict[str, Any],
    res: RequestResult,
    timeout_s: float,
    progress: RunProgress | None = None,
) -> None:
    """Send one streaming request and fill ``res`` (times, tokens, text, errors)."""
    perf = time.perf_counter
    times, counts = res.chunk_times, res.chunk_tokens
    folder = _Folder(res)
    done = False
    t0 = perf()
    try:
        async with transport.session.post(
            transport.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                text = (await resp.read()).decode(errors="replace")
                res.error = f"HTTP {resp.status}: {text[:300]}"
                res.engine_error = _error_message(text)
                res.e2e_s = perf() - t0
                return
            buf = b""
            async for raw in resp.content.iter_any():
                now = perf() - t0
                buf += raw
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
                    n = folder.fold(json.loads(data))
                    if n:
                        times.append(now)
                        counts.append(n)
                        if progress is not None:
                            progress.tokens(n)
                buf = buf[start:]
                if done:
                    break
    except (TimeoutError, aiohttp.ClientError) as exc:
        res.error = f"the connection failed mid-stream ({type(exc).__name__}: {exc or 'no detail'})"
    except json.JSONDecodeError as exc:
        res.error = f"the server streamed an event that is not JSON ({exc})"
    res.e2e_s = perf() - t0
    folder.finish(done)


class _Folder:
    """Folds streamed payloads (OpenAI completions chunks, or SGLang ``/generate``
    chunks with cumulative text and ``meta_info``) into a RequestResult."""

    def __init__(self, res: RequestResult) -> None:
        self.res = res
        self.cumulative = 0  # tokens so far, as counted by the chunks themselves
        self.ids: list[int] = []
        self.ids_seen = False
        self.text: list[str] = []  # joined once at the end (appending to a str attribute copies it each time)

    def fold(self, payload: dict[str, Any]) -> int:
        """Absorb one payload; returns how many tokens it carried (0: none)."""
        res = self.res
        if "error" in payload and not payload.get("choices"):
            err = payload["error"]
            res.engine_error = str(err.get("message") if isinstance(err, dict) else err)
            return 0
        meta = payload.get("meta_info")
        if isinstance(meta, dict):  # SGLang native: cumulative text and counts
            full = payload.get("text") or ""
            new_text = full[len(res.text) :]
            res.text = full  # cumulative: replaces, never appended
            total = int(meta.get("completion_tokens") or 0)
            res.completion_tokens = total or res.completion_tokens
            res.prompt_tokens = int(meta.get("prompt_tokens") or res.prompt_tokens)
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
        if choices:
            c = choices[0]
            text = c.get("text")
            if text:
                self.text.append(text)
            ids = c.get("token_ids")
            if ids is not None:
                self.ids_seen = True
                self.ids += ids
                n = len(ids)
                res.tokens_per_chunk_source = "token_ids"
            elif text:
                n = 1
            if c.get("finish_reason") is not None:
                res.finish_reason = c["finish_reason"]
        usage = payload.get("usage")
        if usage:
            total = int(usage.get("completion_tokens") or 0)
            res.completion_tokens = total
            res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
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
