"""A synthetic OpenAI-completions streaming server (no engine, no model).

It answers ``POST /v1/completions`` with ``stream: true`` the way vLLM does:
server-sent events in HTTP/1.1 chunked transfer encoding, one event per
engine step carrying ``tokens_per_chunk`` tokens (text and, when asked,
``token_ids``), a final ``usage`` event when ``stream_options.include_usage``
is set, then ``data: [DONE]``. ``GET /health`` answers 200, ``GET /metrics``
vLLM's ``vllm:generation_tokens_total`` counter of the tokens it streamed, per model,
``GET /v1/models`` a model list. With ``api_key`` every ``/v1`` path wants
``Authorization: Bearer KEY`` and answers 401 without it, as vLLM's ``--api-key`` does.

It serves two purposes: fast, deterministic unit tests of the client and the
server handling (several tokens per chunk, an error event mid-stream, a server
that dies mid-stream, a slow first token), and the harness-ceiling benchmark
(``bench/test_harness.py``), where it streams as fast as it can so that what is
measured is the client. It is written on plain asyncio streams with the
responses pre-encoded, so that it costs far less per event than any client.

Start it in a thread (:func:`serve_in_thread`) for tests, or in a process of
its own (:func:`serve_in_process`) when the client must have a core to itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

PROMPT_IDS = [1, 2, 3, 4]  # the prompt's token ids, as every answer returns them

__all__ = [
    "Behaviour",
    "PROMPT_IDS",
    "command",
    "run_server",
    "serve_in_process",
    "serve_in_thread",
    "token_id",
    "token_text",
]


@dataclass(frozen=True)
class Behaviour:
    """How the synthetic server streams.

    ``tokens_per_chunk``: tokens per event (speculative decoding sends several).
    ``first_token_delay_s``: wait before the first event (a slow prefill).
    ``token_delay_s``: wait between events (0: as fast as the socket takes them).
    ``error_after_chunks``: after this many events, send vLLM's streamed error
    event (``data: {"error": {...}}``) and ``[DONE]`` instead of the rest.
    ``die_after_chunks``: after this many events, drop the connection without
    finishing the response (a server whose engine died); ``exit_on_die`` then
    also ends the whole server process with exit code 3 (for the launched-server tests).
    ``engine_child``: start a child process standing in for an engine core; when
    it dies the server logs the death, sends the error event on every open
    stream and exits with code 1 half a second later (what vLLM's front-end
    does when its EngineCore is killed).
    ``error_message``: the message of the error event.

    Faults of the wire, for the client's tests:
    ``stall_after_chunks``: after this many token events, send nothing more and
    keep the connection open forever (a hung engine; 0: the headers, then nothing).
    ``never_answer``: read every request (``/health`` too) and never answer, not
    even the status line (a process that accepts TCP but serves no HTTP).
    ``html_page``: answer every completion with this page, 200 ``text/html`` (a
    proxy's or a login page where the engine should be).
    ``malformed_event``: after ``malformed_after_chunks`` token events, send
    ``data: <malformed_event>`` verbatim (valid JSON of the wrong shape, or not
    JSON at all), then the rest of the stream as usual.
    ``api_key``: the key ``/v1`` paths want (vLLM's ``--api-key``: ``/health`` and ``/metrics`` stay open).
    ``eos_after``: a request that does not ask ``ignore_eos`` ends after this many tokens, finish
    reason ``stop`` (the model's end of sequence)."""

    tokens_per_chunk: int = 1
    first_token_delay_s: float = 0.0
    token_delay_s: float = 0.0
    error_after_chunks: int | None = None
    die_after_chunks: int | None = None
    exit_on_die: bool = False
    engine_child: bool = False
    error_message: str = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    stall_after_chunks: int | None = None
    never_answer: bool = False
    html_page: str | None = None
    malformed_event: str | None = None
    malformed_after_chunks: int = 0
    api_key: str | None = None
    eos_after: int | None = None


def token_id(i: int) -> int:
    """The id of the i-th generated token (deterministic, so tests can check them)."""
    return 1000 + (i * 7919) % 30000


def token_text(i: int) -> str:
    return f" t{token_id(i)}"


def _event(obj: object) -> bytes:
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_DONE = b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)


def _plain(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        ctype,
        len(body),
        body,
    )


class _Handler:
    def __init__(self, behaviour: Behaviour) -> None:
        self.b = behaviour
        self.dead: str | None = None  # set when the stand-in engine core died
        self.engine_task: asyncio.Task[None] | None = None
        self._cache: dict[tuple[int, bool, int, str], list[bytes]] = {}
        self.generated: dict[str, int] = {}
        """Tokens streamed per model name, exposed as vLLM's ``vllm:generation_tokens_total``."""

    def exposition(self) -> bytes:
        lines = [
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
        ]
        lines += [
            f'vllm:generation_tokens_total{{engine="0",model_name="{m}"}} {n}.0' for m, n in self.generated.items()
        ]
        return ("\n".join(lines) + "\n").encode()

    def _chunks(self, n_tokens: int, with_ids: bool, model: str, finish: str = "length") -> list[bytes]:
        """The pre-encoded token events of one response (cached per shape)."""
        key = (n_tokens, with_ids, hash(model), finish)
        if key not in self._cache:
            out, i, k = [], 0, max(1, self.b.tokens_per_chunk)
            while i < n_tokens:
                ids = list(range(i, min(i + k, n_tokens)))
                choice: dict[str, object] = {
                    "index": 0,
                    "text": "".join(token_text(j) for j in ids),
                    "logprobs": None,
                    "finish_reason": None,
                    "stop_reason": None,
                }
                if with_ids:
                    choice["token_ids"] = [token_id(j) for j in ids]
                if ids[-1] == n_tokens - 1:
                    choice["finish_reason"] = finish
                out.append(
                    _event(
                        {
                            "id": "cmpl-synthetic",
                            "object": "text_completion",
                            "created": 0,
                            "model": model,
                            "choices": [choice],
                        }
                    )
                )
                i += k
            self._cache[key] = out
        return self._cache[key]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.b.never_answer:
                    await _forever()
                key = self.b.api_key
                if key and path.startswith("/v1") and headers.get("authorization") != f"Bearer {key}":
                    writer.write(_plain("401 Unauthorized", b'{"error":"Unauthorized"}'))
                elif method == "GET" and path == "/health":
                    writer.write(_plain("200 OK", b""))
                elif method == "GET" and path == "/metrics":
                    writer.write(_plain("200 OK", self.exposition(), b"text/plain; version=0.0.4"))
                elif method == "GET" and path == "/v1/models":
                    writer.write(_plain("200 OK", b'{"object":"list","data":[{"id":"synthetic","object":"model"}]}'))
                elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                    if not await self._complete(
                        json.loads(body) | {"_chat": path.endswith("chat/completions")}, writer
                    ):
                        return
                else:
                    writer.write(_plain("404 Not Found", b'{"detail":"Not Found"}'))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()

    async def _complete(self, req: dict, writer: asyncio.StreamWriter) -> bool:
        """Stream one completion; False when the connection was dropped on purpose."""
        n = int(req.get("max_tokens") or 16)
        finish = "length"
        if self.b.eos_after is not None and not req.get("ignore_eos") and self.b.eos_after < n:
            n, finish = self.b.eos_after, "stop"
        model = str(req.get("model") or "synthetic")
        if not req.get("stream"):
            writer.write(_plain("200 OK", json.dumps(_whole(n, model, finish)).encode()))
            return True
        chunks = list(self._chunks(n, bool(req.get("return_token_ids")), model, finish))
        if req.get("return_token_ids") and chunks:  # vLLM's first event carries the prompt's ids
            first = json.loads(chunks[0][chunks[0].index(b"data: ") + 6 :].split(b"\n\n")[0])
            where = first if req["_chat"] else first["choices"][0]
            where["prompt_token_ids"] = PROMPT_IDS
            chunks[0] = _event(first)
        b = self.b
        if b.html_page is not None:
            writer.write(_plain("200 OK", b.html_page.encode(), b"text/html; charset=utf-8"))
            return True
        writer.write(_HEAD)
        if b.first_token_delay_s:
            await writer.drain()
            await asyncio.sleep(b.first_token_delay_s)
        for i, c in enumerate(chunks):
            if b.malformed_event is not None and i == b.malformed_after_chunks:
                data = b"data: " + b.malformed_event.encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            if b.stall_after_chunks is not None and i >= b.stall_after_chunks:
                await writer.drain()
                await _forever()
            if b.die_after_chunks is not None and i >= b.die_after_chunks:
                await writer.drain()
                writer.transport.abort()
                if b.exit_on_die:
                    os._exit(3)
                return False
            if self.dead or (b.error_after_chunks is not None and i >= b.error_after_chunks):
                error = {"message": self.dead or b.error_message, "type": "InternalServerError", "param": None}
                writer.write(_event({"error": error | {"code": 500}}))
                writer.write(_DONE + b"0\r\n\r\n")
                return True
            writer.write(c)
            self.generated[model] = self.generated.get(model, 0) + min(
                max(1, b.tokens_per_chunk), n - i * max(1, b.tokens_per_chunk)
            )
            if b.token_delay_s:
                await writer.drain()
                await asyncio.sleep(b.token_delay_s)
            elif writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
        if (req.get("stream_options") or {}).get("include_usage"):
            writer.write(
                _event(
                    {
                        "id": "cmpl-synthetic",
                        "object": "text_completion",
                        "created": 0,
                        "model": model,
                        "choices": [],
                        "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": n + 4},
                    }
                )
            )
        writer.write(_DONE + b"0\r\n\r\n")
        return True


def _whole(n: int, model: str, finish: str) -> dict:
    """A completion answered at once (``stream`` false)."""
    return {
        "id": "cmpl-synthetic",
        "object": "text_completion",
        "model": model,
        "choices": [{"index": 0, "text": "".join(token_text(i) for i in range(n)), "finish_reason": finish}],
        "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": n + 4},
    }


async def _forever() -> None:
    """Hold the connection open and send nothing (until the server stops: cancelled)."""
    await asyncio.Event().wait()


async def _watch_engine(handler: _Handler) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1e6)"], stdin=subprocess.DEVNULL)
    print(f"synthetic server: engine core started (pid {child.pid})", flush=True)
    while child.poll() is None:
        await asyncio.sleep(0.1)
    handler.dead = f"EngineCore (pid {child.pid}) died unexpectedly (returncode {child.returncode})"
    print(f"ERROR synthetic server: {handler.dead}, shutting down", file=sys.stderr, flush=True)
    await asyncio.sleep(0.5)
    os._exit(1)


async def _serve(behaviour: Behaviour, port: int, started: threading.Event | None, stop: asyncio.Event) -> None:
    handler = _Handler(behaviour)
    server = await asyncio.start_server(handler.serve, "127.0.0.1", port)
    if behaviour.engine_child:
        handler.engine_task = asyncio.create_task(_watch_engine(handler))
    if started is not None:
        started.set()
    async with server:
        await stop.wait()
    # end the connections still open (their handlers) before the loop goes
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


@dataclass
class _Running:
    base_url: str


@contextmanager
def serve_in_thread(behaviour: Behaviour = Behaviour(), port: int = 0) -> Iterator[_Running]:
    """Run the server on a background thread's event loop; yields its base URL holder."""
    if not port:
        from specrig.serve.server import free_port

        port = free_port()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()
    t = threading.Thread(target=lambda: loop.run_until_complete(_serve(behaviour, port, started, stop)), daemon=True)
    t.start()
    if not started.wait(10):
        raise RuntimeError("the synthetic server did not start")
    try:
        yield _Running(f"http://127.0.0.1:{port}")
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(5)


def run_server(behaviour: Behaviour, port: int, cpu: int | None = None) -> None:
    """Serve until killed (the body of :func:`serve_in_process` and of fake engines)."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_serve(behaviour, port, None, asyncio.Event()))


def command(behaviour: Behaviour, port: int, cpu: int | None = None) -> list[str]:
    """The argv of a process serving ``behaviour`` on ``port`` (what a LaunchPlan can run)."""
    code = (
        "from specrig.serve.synthetic import Behaviour, run_server; "
        f"run_server(Behaviour(**{asdict(behaviour)!r}), {port}, {cpu!r})"
    )
    return [sys.executable, "-c", code]


@contextmanager
def serve_in_process(behaviour: Behaviour = Behaviour(), port: int = 0, cpu: int | None = None) -> Iterator[_Running]:
    """Run the server in a process of its own (optionally pinned to ``cpu``)."""
    import httpx

    from specrig.serve.server import free_port

    port = port or free_port()
    proc = subprocess.Popen(command(behaviour, port, cpu), stdin=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the synthetic server exited with code {proc.returncode}")
            time.sleep(0.05)
        yield _Running(base)
    finally:
        proc.terminate()
        proc.wait(5)
