"""The endpoints users point specrig at, named when they are not what it needs:

* a server that wants an API key (vLLM's and SGLang's ``--api-key``): the key comes from
  ``--api-key``, the server's own ``--engine-arg=--api-key``, or ``OPENAI_API_KEY``; every request
  and probe carries it; a missing or wrong key ends in HTTP 401 named with where to give the key;
  the key is written nowhere (plan, logs, errors);
* an endpoint that does not speak the OpenAI API (``python3 -m http.server``, with and without a
  ``health`` file): named as such, its first bytes quoted on one line, no pointer to a log that
  attach mode does not have.

Everything here runs on 127.0.0.1 against the synthetic server or a real ``http.server``; the
same key against a real vLLM server is in tests/test_bench_e2e.py."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from client_support import local_http, run_openai
from specrig.core.errors import BenchError, ConfigError, EngineError
from specrig.core.prompt import Prompt
from specrig.core.redact import excerpt, redact_argv, redact_text
from specrig.engine.base import LaunchPlan
from specrig.serve.auth import bench_api_key, engine_api_key
from specrig.serve.server import Server, attach, free_port
from specrig.serve.synthetic import Behaviour, command, serve_in_thread

KEY = "sk-specrig-test-4f1d9c"


# --------------------------------------------------------------------------- where the key comes from


def test_the_key_comes_from_the_option_the_engine_arg_or_the_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-from-env-0001"}
    # the option: sent, and a launched server is given it too
    assert bench_api_key(KEY, (), launching=True, environ=env) == (KEY, ["--api-key", KEY])
    # attached: sent only (the server is not ours to start)
    assert bench_api_key(KEY, (), launching=False, environ=env) == (KEY, [])
    # the server's own --api-key, passed through --engine-arg: picked up, nothing added
    assert bench_api_key(None, ("--api-key", "sk-engine-0002"), launching=True, environ=env) == ("sk-engine-0002", [])
    assert bench_api_key(None, ("--api-key=sk-engine-0003",), launching=True, environ={}) == ("sk-engine-0003", [])
    assert bench_api_key(KEY, ("--api-key", KEY), launching=True, environ={}) == (KEY, [])
    # OPENAI_API_KEY, as `vllm bench serve` reads it: sent, a launched server not made to want it
    assert bench_api_key(None, (), launching=True, environ=env) == ("sk-from-env-0001", [])
    assert bench_api_key(None, (), launching=True, environ={}) == (None, [])
    assert engine_api_key(["--api-key", "a1b2", "--max-num-seqs", "4", "--api-key", "c3d4"]) == "c3d4"
    # two different keys: the server would refuse every request, so it is refused before anything starts
    with pytest.raises(ConfigError, match="differ"):
        bench_api_key(KEY, ("--api-key", "sk-other-0004"), launching=True, environ={})
    with pytest.raises(ConfigError, match="empty"):
        bench_api_key("", (), launching=True, environ={})


def test_a_key_once_known_is_masked_everywhere_specrig_writes_text() -> None:
    bench_api_key("sk-masked-5e6f7a", (), launching=False, environ={})
    assert redact_text("sent Bearer sk-masked-5e6f7a to x") == "sent Bearer *** to x"
    assert redact_argv(["vllm", "serve", "--api-key", "sk-masked-5e6f7a"])[-1] == "***"
    # an excerpt of an answer: one line, the key masked before the cut
    shown = excerpt(b"<html>\n  <body>sk-masked-5e6f7a\n\n" + b"x" * 200)
    assert "\n" not in shown and "sk-masked" not in shown and "<html> <body>***" in shown
    assert shown.endswith("...") and len(shown) <= 123


def test_the_options_take_the_key_and_never_show_it() -> None:
    from specrig.lab.options import BenchOptions, declare

    opts = BenchOptions.collect(lambda name: KEY if name == "api_key" else None)
    assert opts.api_key is not None and opts.api_key.get_secret_value() == KEY
    assert KEY not in repr(opts) and KEY not in str(opts)
    flags: list[str] = []
    declare(lambda flag, **kw: flags.append(flag))
    assert "--api-key" in flags


# --------------------------------------------------------------------------- the client and the probes


def _run(base_url: str, api_key: str | None) -> None:
    run_openai(base_url, "m", prompts=[Prompt("p1", "hi")], max_tokens=4, concurrency=2, api_key=api_key)


def test_the_client_sends_the_key_and_a_missing_or_wrong_one_is_named() -> None:
    with serve_in_thread(Behaviour(api_key=KEY)) as s:
        _run(s.base_url, KEY)  # every request carries it: no failure
        with pytest.raises(BenchError) as none:
            _run(s.base_url, None)
        with pytest.raises(BenchError) as wrong:
            _run(s.base_url, "sk-wrong-key-000")
    msg, hint = none.value.message, none.value.hint or ""
    assert "HTTP 401 (Unauthorized): the server wants an API key, and specrig sent none" in msg
    assert "--api-key KEY" in hint and "OPENAI_API_KEY=KEY" in hint
    assert "refused the API key specrig sent" in wrong.value.message
    assert "sk-wrong-key" not in wrong.value.message + (wrong.value.hint or "")  # the key is never quoted
    assert "server log" not in hint


def test_attach_probes_with_the_key_and_names_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_in_thread(Behaviour(api_key=KEY)) as s:
        assert attach(s.base_url + "/v1", "/health", api_key=KEY) == s.base_url
        with pytest.raises(EngineError) as ei:
            attach(s.base_url, "/health")
    e = ei.value
    assert f"--endpoint {s.base_url}: GET /v1/models answered HTTP 401 (Unauthorized)" in e.message
    assert "specrig sent none" in e.message and e.hint and "OPENAI_API_KEY" in e.hint


def _fake(tmp_path: Path, behaviour: Behaviour, api_key: str | None, says: str = "") -> Server:
    """A launched synthetic server whose start-up prints ``says`` into its log (as an engine echoing its args)."""
    port = free_port()
    argv = command(behaviour, port)
    argv[-1] = f"print({says!r}, flush=True); " + argv[-1]
    plan = LaunchPlan(argv=argv, environment={}, base_url=f"http://127.0.0.1:{port}")
    return Server(
        plan=plan,
        log_path=tmp_path / "server.log",
        health_path="/health",
        served_name="m",
        startup_timeout_s=30,
        api_key=api_key,
    )


def test_a_launched_server_that_wants_a_key_gets_ready_with_it_and_its_log_never_holds_it(tmp_path: Path) -> None:
    with _fake(tmp_path, Behaviour(api_key=KEY), KEY, says=f"args: api_key={KEY}") as server:
        server.start().wait_ready(poll_s=0.1)  # the first completion carried the key
    log = (tmp_path / "server.log").read_text()
    assert "args: api_key=***" in log and KEY not in log


def test_a_launched_server_refusing_the_first_completion_names_the_key_not_the_log(tmp_path: Path) -> None:
    with _fake(tmp_path, Behaviour(api_key=KEY), None) as server, pytest.raises(EngineError) as ei:
        server.start().wait_ready(poll_s=0.1)
    assert "the first completion (POST /v1/completions) answered HTTP 401 (Unauthorized)" in ei.value.message
    assert ei.value.hint and "--api-key KEY" in ei.value.hint


# --------------------------------------------------------------------------- not the OpenAI API


@contextmanager
def _file_server(root: Path) -> Iterator[str]:
    """``python3 -m http.server`` over ``root``, in a thread on 127.0.0.1."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    with local_http(handler) as url:
        yield url


@pytest.mark.parametrize("health_file", [False, True], ids=["no-health-file", "health-file"])
def test_an_endpoint_that_does_not_speak_the_openai_api_is_named(tmp_path: Path, health_file: bool) -> None:
    if health_file:
        (tmp_path / "health").write_text("ok\n")  # /health answers 200: only the API check can tell
    with _file_server(tmp_path) as url, pytest.raises(EngineError) as ei:
        attach(url, "/health")
    msg, hint = ei.value.message, ei.value.hint or ""
    assert msg.startswith(f"--endpoint {url} does not speak the OpenAI API: GET /v1/models answered HTTP 404")
    first = msg.split("first bytes: ", 1)[1]
    assert first.startswith("'<!DOCTYPE HTML") and "\n" not in msg and len(first) < 130
    assert "log" not in msg + hint and "healthy" not in msg  # attach mode has no server log to point at
    assert "OpenAI-compatible" in hint and "omit --endpoint" in hint


def test_an_openai_server_that_is_not_healthy_yet_is_named_with_its_answer() -> None:
    with serve_in_thread() as s:
        with pytest.raises(EngineError) as ei:
            attach(s.base_url, "/not-health")  # the synthetic server answers 404 there
        assert attach(s.base_url, "/health") == s.base_url
    assert f"--endpoint {s.base_url}/not-health answered HTTP 404" in ei.value.message
    assert 'first bytes: \'{"detail":"Not Found"}\'' in ei.value.message
