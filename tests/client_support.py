"""The client's tests ask for runs as they read best: an OpenAI completions run of ``prompts``
(``extras`` in every body, or their own ``build``), its time limits and load as keywords. Each call
is one typed :class:`~specrig.serve.types.RunSpec` handed to ``run_workload``."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from specrig.core.prompt import Prompt
from specrig.serve.client import openai_request, run_workload
from specrig.serve.types import Limits, RequestBuilder, RequestResult, RunResult, RunSpec


def run_openai(
    base_url: str,
    model: str,
    *,
    prompts: Sequence[Prompt],
    max_tokens: int,
    extras: dict[str, Any] | None = None,
    build: RequestBuilder | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
    watchdog: Callable[[], None] | None = None,
    timeout_s: float = 1800.0,
    stall_timeout_s: float | None = None,
    first_token_timeout_s: float | None = None,
    **load: Any,
) -> RunResult:
    spec = RunSpec(
        prompts=tuple(prompts),
        max_tokens=max_tokens,
        build=build or openai_request(extras or {}, model),
        limits=Limits(timeout_s, stall_timeout_s, first_token_timeout_s),
        **load,
    )
    return run_workload(base_url, spec, on_result=on_result, watchdog=watchdog)


@contextmanager
def local_http(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` (a request handler class, or a partial of one) served on 127.0.0.1 from a
    thread, a thread per request; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
