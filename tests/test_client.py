"""The streaming client against a local synthetic SSE server (specrig.synthetic):
several tokens per chunk, an error event mid-stream, a server that dies, a slow
first token, open-loop arrivals, callbacks and the watchdog."""

from __future__ import annotations

import statistics
import time

import pytest

from client_support import run_openai
from specrig.core.errors import BenchError, EngineError
from specrig.core.prompt import Prompt
from specrig.serve.client import arrival_times
from specrig.serve.http import _Folder
from specrig.serve.synthetic import Behaviour, serve_in_thread, token_id, token_text
from specrig.serve.types import RequestResult

IDS = {"return_token_ids": True}


def test_several_tokens_per_chunk_itl_and_token_ids() -> None:
    with serve_in_thread(Behaviour(tokens_per_chunk=3, token_delay_s=0.01)) as s:
        run = run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=10, extras=IDS)
    r = run.requests[0]
    assert r.ok and r.completion_tokens == 10 and r.chunks == 4
    assert r.chunk_tokens == [3, 3, 3, 1] and r.tokens_per_chunk_source == "token_ids"
    assert r.token_ids == [token_id(i) for i in range(10)]
    assert r.text == "".join(token_text(i) for i in range(10))
    assert r.finish_reason == "length"
    assert r.ttft_s == r.chunk_times[0] and r.decode_s == pytest.approx(r.chunk_times[-1] - r.chunk_times[0])
    # ITL: each chunk gap spread over the tokens that chunk carried: 3 + 3 + 1 values, ~10/3 ms each for the first 6
    itl = r.itl_s
    assert len(itl) == 7
    assert itl[0] == itl[1] == itl[2] == pytest.approx((r.chunk_times[1] - r.chunk_times[0]) / 3)
    assert itl[6] == pytest.approx(r.chunk_times[3] - r.chunk_times[2])
    assert r.tpot_s == pytest.approx(r.decode_s / 9)
    assert run.client_cpu_s is not None and run.client_cpu_share is not None


def test_without_token_ids_one_token_per_chunk_is_assumed_and_said() -> None:
    with serve_in_thread(Behaviour(tokens_per_chunk=2)) as s:
        r = run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=6).requests[0]
    assert r.ok and r.completion_tokens == 6 and r.chunk_tokens == [1, 1, 1]
    assert r.tokens_per_chunk_source == "assumed_one" and r.token_ids is None


def test_error_event_mid_stream_names_the_engine_error() -> None:
    with (
        serve_in_thread(Behaviour(error_after_chunks=2, error_message="EngineCore died: boom")) as s,
        pytest.raises(BenchError) as ei,
    ):
        run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=8)
    msg = str(ei.value)
    assert "the engine reported an error mid-stream: EngineCore died: boom" in msg
    assert "include_usage" not in msg


def test_server_dying_mid_stream_is_named_and_fails_fast() -> None:
    prompts = [Prompt(f"p{i}", "hi") for i in range(20)]
    seen: list[RequestResult] = []
    t0 = time.monotonic()
    with serve_in_thread(Behaviour(die_after_chunks=3, token_delay_s=0.002)) as s, pytest.raises(BenchError) as ei:
        run_openai(s.base_url, "m", prompts=prompts, max_tokens=50, on_result=seen.append)
    assert time.monotonic() - t0 < 5
    # the server drops the connection after 3 events: the stream ends before its [DONE]
    # however the cut lands (between events or inside one), it reads the same
    assert "first: p0: the stream ended early, without [DONE], after 3 chunk(s) (did the server die?)" in str(ei.value)
    assert "include_usage" not in str(ei.value)
    # the first request failed; the others were not sent
    assert seen[0].chunks == 3 and not seen[0].ok
    assert all(r.error == "not sent: an earlier request failed" for r in seen[1:])


def test_watchdog_error_wins_over_the_client_error() -> None:
    calls = {"n": 0}

    def watchdog() -> None:
        calls["n"] += 1
        if calls["n"] >= 2:
            raise EngineError("the engine died (exit code -9)")

    with serve_in_thread(Behaviour(die_after_chunks=1)) as s, pytest.raises(EngineError, match="exit code -9"):
        run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=8, watchdog=watchdog)


def test_watchdog_ends_a_stuck_run_within_seconds() -> None:
    def watchdog() -> None:
        raise EngineError("the server exited during the benchmark")

    t0 = time.monotonic()
    with serve_in_thread(Behaviour(first_token_delay_s=30)) as s, pytest.raises(EngineError):
        run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=8, watchdog=watchdog)
    assert time.monotonic() - t0 < 5


def test_slow_first_token() -> None:
    """The server sends its headers at once, then holds the first token back 0.3 s (a slow prefill),
    then sends all 20 back to back: the wait is the first token's (TTFT runs to the first token, not to
    the headers), and decode (first token to last) is not charged with it."""
    with serve_in_thread(Behaviour(first_token_delay_s=0.3)) as s:
        r = run_openai(s.base_url, "m", prompts=[Prompt("a", "hi")], max_tokens=20, extras=IDS).requests[0]
    assert r.ok and r.completion_tokens == 20 and r.token_ids == [token_id(i) for i in range(20)]
    assert r.ttft_s >= 0.3  # the first token cannot arrive before the server let it go
    assert r.decode_s < r.ttft_s  # the wait sits before the first token, not between the tokens
    assert r.e2e_s >= r.ttft_s + r.decode_s


def test_per_prompt_max_tokens_and_concurrency_cycles_prompts() -> None:
    with serve_in_thread() as s:
        run = run_openai(
            s.base_url, "m", prompts=[Prompt("a", "x", output_len=3), Prompt("b", "y")], max_tokens=7, concurrency=4
        )
    assert [r.prompt_id for r in run.requests] == ["a", "b", "a#1", "b#1"]
    assert [r.completion_tokens for r in run.requests] == [3, 7, 3, 7]
    # each request records the length its own prompt asked for, not the run's
    assert [r.max_tokens for r in run.requests] == [3, 7, 3, 7]
    assert run.completion_tokens == 20 and all(r.ok for r in run.requests)


def test_arrival_times_poisson_and_gamma() -> None:
    assert arrival_times(3, None) == [0.0, 0.0, 0.0]
    a = arrival_times(4000, 50.0, seed=1)
    assert a == arrival_times(4000, 50.0, seed=1) and a != arrival_times(4000, 50.0, seed=2)
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.06)
    assert statistics.stdev(gaps) == pytest.approx(1 / 50, rel=0.08)  # exponential: sd == mean
    b = arrival_times(4000, 50.0, burstiness=16.0, seed=1)
    even = [y - x for x, y in zip(b, b[1:], strict=False)]
    assert statistics.stdev(even) == pytest.approx(1 / 50 / 4, rel=0.1)  # gamma shape 16: cv = 1/4
    with pytest.raises(BenchError):
        arrival_times(2, -1.0)


def test_request_rate_sends_on_schedule() -> None:
    """Open loop: each request goes out at its drawn arrival time, never before it and in the drawn order,
    whether or not the earlier ones have finished. Each request here takes 0.4 s (a slow first token),
    longer than the whole schedule (the 8 arrivals of seed 3 fall within 0.09 s): all are sent while the
    first is still in flight (a client that waited for answers would send the second after the first ended)."""
    prompts = [Prompt(f"p{i}", "x") for i in range(8)]
    with serve_in_thread(Behaviour(first_token_delay_s=0.4)) as s:
        run = run_openai(s.base_url, "m", prompts=prompts, max_tokens=4, request_rate=40.0, seed=3, concurrency=8)
    expected = arrival_times(8, 40.0, seed=3)
    assert run.request_rate == 40.0 and [r.prompt_id for r in run.requests] == [p.id for p in prompts]
    assert all(r.ok and r.completion_tokens == 4 for r in run.requests)
    starts = [r.start_s for r in run.requests]
    assert all(at >= t - 1e-3 for at, t in zip(starts, expected, strict=True)), (starts, expected)  # never early
    assert starts == sorted(starts)  # in the order drawn
    first = run.requests[0]
    assert max(starts) < first.start_s + first.e2e_s  # every one sent while the first was in flight


def test_progress_is_quiet_when_stdout_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_in_thread() as s:
        run_openai(s.base_url, "m", prompts=[Prompt("a", "x")], max_tokens=4, progress="baseline c=1")
    assert capsys.readouterr() == ("", "")


def test_http_error_status_is_reported() -> None:
    with serve_in_thread() as s, pytest.raises(BenchError, match="HTTP 404"):
        run_openai(s.base_url, "m", prompts=[Prompt("a", "x")], max_tokens=4, build=lambda p, n: ("/nope", {}))


def test_sglang_native_chunks_count_tokens_from_meta_info() -> None:
    res = RequestResult(prompt_id="a", ok=False)
    f = _Folder(res)
    assert f.fold({"text": "Hello", "meta_info": {"completion_tokens": 1, "prompt_tokens": 3}}) == 1
    assert f.fold({"text": "Hello world, you", "meta_info": {"completion_tokens": 4}}) == 3
    assert (
        f.fold(
            {
                "text": "Hello world, you!",
                "meta_info": {"completion_tokens": 5, "finish_reason": {"type": "length"}, "spec_verify_ct": 2},
            }
        )
        == 1
    )
    assert res.text == "Hello world, you!" and res.completion_tokens == 5 and res.prompt_tokens == 3
    assert res.finish_reason == "length" and res.tokens_per_chunk_source == "meta_info"
    assert res.final_payload["meta_info"]["spec_verify_ct"] == 2


@pytest.mark.parametrize("incremental", [False, True])
def test_sglang_native_output_ids_become_the_token_ids(incremental: bool) -> None:
    """/generate streams ``output_ids``: all so far (SGLang's default), or only the new ones
    (--incremental-streaming-output); either way the request's token ids are the whole answer,
    which the lossless check compares token by token."""
    res = RequestResult(prompt_id="a", ok=False)
    f = _Folder(res)
    chunks = [[11, 12], [13, 14, 15], [16]]
    done: list[int] = []
    for i, new in enumerate(chunks):
        done += new
        meta = {"completion_tokens": len(done)} | ({"finish_reason": {"type": "length"}} if i == 2 else {})
        f.fold({"text": "x" * len(done), "output_ids": new if incremental else list(done), "meta_info": meta})
    f.finish(done=True)
    assert res.token_ids == [11, 12, 13, 14, 15, 16]


def test_continuous_usage_gives_exact_tokens_per_chunk() -> None:
    res = RequestResult(prompt_id="a", ok=False)
    f = _Folder(res)
    chunk = {"choices": [{"text": "ab"}], "usage": {"completion_tokens": 2, "prompt_tokens": 1}}
    assert f.fold(chunk) == 2
    assert f.fold({"choices": [{"text": "c"}], "usage": {"completion_tokens": 5, "prompt_tokens": 1}}) == 3
    assert f.fold({"choices": [], "usage": {"completion_tokens": 5, "prompt_tokens": 1}}) == 0
    assert res.tokens_per_chunk_source == "usage" and res.completion_tokens == 5


def test_progress_bar_on_a_terminal_shows_requests_tokens_and_rate() -> None:
    """The run's bar is the log's (one progress system): requests done of all, tokens, tok/s; where the
    console is no terminal, nothing at all unless the run asks for plain lines."""
    import io

    from rich.console import Console

    from specrig.core.log import Log
    from specrig.serve.client import _Bar

    out = io.StringIO()
    on_terminal = Log()
    on_terminal.console = Console(file=out, force_terminal=True, width=120)
    with on_terminal.progress(None, transient=False) as progress:
        bar = _Bar(progress, "ngram c=4", 2)
        bar.tokens(30)
        bar.request_done()
    text = out.getvalue()
    assert "ngram c=4" in text and "1/2" in text and "30 tokens" in text and "tok/s" in text
    quiet, lines = io.StringIO(), io.StringIO()
    for file, every_s in ((quiet, None), (lines, 30.0)):
        to_file = Log()
        to_file.console = Console(file=file, force_terminal=False, width=120)
        with to_file.progress(every_s, transient=False) as progress:
            bar = _Bar(progress, "target answers", 2)
            bar.tokens(7)
            bar.request_done()
            bar.request_done()
    assert quiet.getvalue() == ""
    assert "target answers: 2/2 (100%) 7 tokens" in lines.getvalue() and "\u2501" not in lines.getvalue()
