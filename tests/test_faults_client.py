"""Every fault of the wire is named, and stalls end fast: the client against a
real synthetic server on 127.0.0.1 that streams malformed events, answers with
an HTML page, or stalls (after some tokens, before the first one, or without
ever answering HTTP). Each test is bounded by a backstop ``timeout_s`` well
above what it asserts, so a regression fails instead of hanging."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from client_support import run_openai
from specrig.core.errors import BenchError
from specrig.core.prompt import Prompt
from specrig.serve.client import openai_request
from specrig.serve.http import _Folder
from specrig.serve.synthetic import Behaviour, serve_in_thread
from specrig.serve.types import RequestResult

BACKSTOP = 15.0  # the whole-request limit in these tests: far above every bound asserted


def _fails(behaviour: Behaviour, *, n: int = 3, **kwargs: object) -> tuple[str, list[RequestResult], float]:
    """Run ``n`` requests (prompt ids p1, p1#1, ...) at concurrency ``n``; the BenchError's text, the results, seconds."""
    seen: list[RequestResult] = []
    t0 = time.monotonic()
    with serve_in_thread(behaviour) as s, pytest.raises(BenchError) as ei:
        run_openai(
            s.base_url,
            "m",
            prompts=[Prompt("p1", "hi")],
            max_tokens=12,
            concurrency=n,
            timeout_s=BACKSTOP,
            on_result=seen.append,
            **kwargs,  # type: ignore[arg-type]
        )
    return str(ei.value), seen, time.monotonic() - t0


MALFORMED = [
    ("a number", "123", "the event is an int (123), not an object"),
    ("a string", '"hello"', "the event is a str"),
    ("not JSON", "{not json", "not JSON"),
    (
        "token_ids an int",
        '{"choices":[{"index":0,"text":" x","token_ids":5,"finish_reason":null}]}',
        "choices[0].token_ids is an int (5), not a list of integers",
    ),
    (
        "completion_tokens a string",
        '{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":"ten"}}',
        'usage.completion_tokens is a str ("ten"), not an integer',
    ),
    (
        "completion_tokens a numeric string",
        '{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":"12"}}',
        'usage.completion_tokens is a str ("12"), not an integer',
    ),
    ("choices an object", '{"choices":{"text":" x"}}', "choices is a dict"),
    ("choices a string", '{"choices":"abc"}', "choices is a str"),
    ("a choice not an object", '{"choices":[" x"]}', "choices[0] is a str"),
    ("text a number", '{"choices":[{"index":0,"text":7}]}', "choices[0].text is an int (7), not a string"),
    ("usage a list", '{"choices":[],"usage":[1,2]}', "usage is a list"),
]


@pytest.mark.parametrize(("payload", "why"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_malformed_event_fails_its_request_naming_the_event_and_the_prompt(payload: str, why: str) -> None:
    # the server goes on streaming normally after the bad event: a client that skipped it would succeed
    msg, seen, took = _fails(Behaviour(malformed_event=payload, malformed_after_chunks=2, token_delay_s=0.005))
    assert took < 5
    event = f"data: {payload}"
    assert re.search(r"first: p1(#\d)?: malformed stream event " + re.escape(repr(event)), msg), msg
    assert why in msg
    assert "cancelled" not in msg.split("\n")[0]  # fail-fast fired on the fault itself
    bad = [r for r in seen if r.error and r.error.startswith("malformed stream event")]
    assert bad and all(not r.ok and r.chunks == 2 for r in bad)


def test_a_long_malformed_event_is_quoted_by_its_first_120_bytes() -> None:
    payload = '{"choices":{"text":"' + "x" * 500 + '"}}'
    msg, _, _ = _fails(Behaviour(malformed_event=payload), n=1)
    shown = f"data: {payload}"[:120] + "..."
    assert f"first: p1: malformed stream event {shown!r}: choices is a dict" in msg
    assert "x" * 200 not in msg


def test_an_html_reply_is_named_as_such() -> None:
    page = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    msg, _, took = _fails(Behaviour(html_page=page))
    assert took < 5
    assert re.search(
        r"first: p1(#\d)?: the server answered text/html, not a server-sent event stream: '<!DOCTYPE html><html>", msg
    ), msg
    assert "did the server die" not in msg


def _read_request(conn: socket.socket) -> str | None:
    """Read one whole HTTP request: the headers, then as many body bytes as its content-length says; its method
    and path ("POST /v1/completions"), or None when the connection closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    want = int(m.group(1)) if m else 0
    while len(body) < want:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return " ".join(head.split(b"\r\n", 1)[0].decode().split()[:2])


@contextmanager
def _loopback(handle: Callable[[socket.socket, int], None]) -> Iterator[str]:
    """A loopback server that hands each accepted connection (and its number, from 0) to ``handle``, then
    closes it (for replies and faults the synthetic server never makes)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        n = 0
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                handle(conn, n)
            n += 1

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        sock.close()


def _raw_server(reply: bytes) -> contextlib.AbstractContextManager[str]:
    """Answers every request with ``reply`` and closes."""

    def handle(conn: socket.socket, _n: int) -> None:
        _read_request(conn)
        conn.sendall(reply)
        # half-close and drain: closing with unread bytes would make the kernel send a reset, which
        # the client may see before the reply (a flake on a loaded box)
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(65536):
            pass

    return _loopback(handle)


def test_an_event_stream_that_is_not_server_sent_events_is_named() -> None:
    body = b'{"id": "cmpl-1", "choices": [{"text": "hello"}]}\n'
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    with _raw_server(reply) as url, pytest.raises(BenchError) as ei:
        run_openai(url, "m", prompts=[Prompt("p1", "hi")], max_tokens=4, timeout_s=BACKSTOP)
    assert 'first: p1: the server answered text/event-stream, not a server-sent event stream: \'{"id": "cmpl-1"' in str(
        ei.value
    )


def test_a_kept_alive_connection_the_server_closed_under_the_request_is_retried_once_on_a_fresh_one() -> None:
    # the race a pooled connection meets when the server's idle limit ends it: the server read the request and
    # closed without an answer. The first connection answers /health keep-alive, then drops the POST; every
    # later connection streams a real answer.
    sse = b'data: {"choices":[{"index":0,"text":" hi","finish_reason":"length"}]}\n\n'
    sse += b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(sse), sse)
    health = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    seen: list[str] = []

    def handle(conn: socket.socket, n: int) -> None:
        for _ in range(8):  # keep-alive: answer requests on this connection until one is dropped
            line = _read_request(conn)
            if line is None:
                return
            seen.append(("first " if n == 0 else "fresh ") + line)
            if line.startswith("GET"):
                conn.sendall(health)
            elif n == 0:
                return  # read the POST, close without an answer
            else:
                conn.sendall(answer)

    with _loopback(handle) as url:
        run = run_openai(url, "m", prompts=[Prompt("p1", "hi")], max_tokens=1, timeout_s=BACKSTOP)
    assert seen[:3] == ["first GET /health", "first POST /v1/completions", "fresh POST /v1/completions"], seen
    assert [(r.ok, r.text) for r in run.requests] == [(True, " hi")]


def test_a_stall_after_three_chunks_ends_within_the_stall_limit_naming_the_requests() -> None:
    msg, seen, took = _fails(Behaviour(stall_after_chunks=3, token_delay_s=0.01), n=2, stall_timeout_s=1.0)
    assert took < 4, took
    assert re.search(r"first: p1(#1)?: stalled: no data for 1 s after 3 tokens", msg), msg
    # the other request was stalled too: named, with how far it got
    assert "the other requests in flight:" in msg
    other = msg.split("the other requests in flight:")[1]
    assert re.search(r"p1(#1)?: (the same|cancelled when the run stopped, after 3 tokens)", other), other
    assert any(r.chunks == 3 and not r.ok for r in seen)


def test_no_first_token_ends_within_the_first_token_limit() -> None:
    # headers, then nothing: a server that accepted the request and never streams
    msg, _, took = _fails(Behaviour(stall_after_chunks=0), n=2, first_token_timeout_s=1.0, stall_timeout_s=30.0)
    assert took < 4, took
    assert re.search(r"first: p1(#1)?: stalled: no first token within 1 s of sending \(0 bytes of body came\)", msg), (
        msg
    )


def test_a_slow_first_token_within_the_limit_is_fine_and_the_stall_limit_waits_for_it() -> None:
    with serve_in_thread(Behaviour(first_token_delay_s=0.6, token_delay_s=0.01)) as s:
        run = run_openai(
            s.base_url,
            "m",
            prompts=[Prompt("a", "hi")],
            max_tokens=5,
            first_token_timeout_s=3.0,
            stall_timeout_s=0.3,  # shorter than the prefill: it counts only once tokens flow
            timeout_s=BACKSTOP,
        )
    assert run.requests[0].ok and run.requests[0].ttft_s >= 0.6


def test_a_server_that_never_answers_http_ends_within_the_stall_limit() -> None:
    msg, _, took = _fails(Behaviour(never_answer=True), n=2, stall_timeout_s=1.0)
    assert took < 1.0 + 2.0 + 1.0, took  # the limit, the connection warm-up's 2 s, slack
    assert re.search(
        r"first: p1(#1)?: stalled: no data for 1 s after 0 tokens \(not even the HTTP status line came back\)", msg
    ), msg


def test_an_unexpected_client_error_is_the_requests_error_not_cancelled() -> None:
    def build(p: Prompt, n: int) -> tuple[str, dict[str, object]]:
        if p.id == "b":
            raise RuntimeError("boom in the request builder")
        return openai_request({}, "m")(p, n)

    with serve_in_thread(Behaviour(token_delay_s=0.01)) as s, pytest.raises(BenchError) as ei:
        run_openai(
            s.base_url,
            "m",
            prompts=[Prompt("a", "x"), Prompt("b", "y"), Prompt("c", "z")],
            max_tokens=50,
            concurrency=3,
            build=build,
            timeout_s=BACKSTOP,
        )
    msg = str(ei.value)
    assert "first: b: the client failed on this request (RuntimeError: boom in the request builder)" in msg
    assert ": cancelled\n" not in msg + "\n"


def test_folder_rejects_malformed_sglang_chunks() -> None:
    f = _Folder(RequestResult(prompt_id="a", ok=False))
    with pytest.raises(ValueError, match="text is an int"):
        f.fold({"text": 5, "meta_info": {"completion_tokens": 1}})
    with pytest.raises(ValueError, match="meta_info.completion_tokens is a str"):
        f.fold({"text": "x", "meta_info": {"completion_tokens": "1"}})
    with pytest.raises(ValueError, match="token_ids is a list"):
        f.fold({"choices": [{"token_ids": [1, "2"]}]})
