"""The client reads every stream as it comes, all of them at once: a synthetic
server (its own process) paces 8 streams at 5 ms per token, and the client must
receive every token of every stream, in order, one event per token, with the 8
streams in flight together and their events interleaved. A client that serialises
the streams (one connection, a request that waits for the previous one, a
blocking read) receives one stream after another instead.

What this asserts is the order of events, never a rate: how many tokens a second
the client takes is a speed goal, measured by the harness-ceiling benchmark
(``bench/test_harness.py``), not a pass/fail threshold in a unit test."""

from __future__ import annotations

from client_support import run_openai
from specrig.core.prompt import Prompt
from specrig.serve.synthetic import Behaviour, serve_in_process, token_id

STREAMS, TOKENS, DELAY_S = 8, 100, 0.005


def test_client_reads_all_paced_streams_at_once() -> None:
    with serve_in_process(Behaviour(tokens_per_chunk=1, token_delay_s=DELAY_S)) as s:
        run = run_openai(
            s.base_url,
            "synthetic",
            prompts=[Prompt(f"p{i}", "x") for i in range(STREAMS)],
            max_tokens=TOKENS,
            concurrency=STREAMS,
            extras={"return_token_ids": True},
        )
    # every token of every stream, in order, each event counted as the one token it carried
    assert [r.prompt_id for r in run.requests] == [f"p{i}" for i in range(STREAMS)]
    for r in run.requests:
        assert r.ok and r.token_ids == [token_id(i) for i in range(TOKENS)], r.prompt_id
        assert r.completion_tokens == TOKENS and r.chunk_tokens == [1] * TOKENS
    # the streams were in flight together: each one's first token came before any one's last
    first = [r.start_s + r.chunk_times[0] for r in run.requests]
    last = [r.start_s + r.chunk_times[-1] for r in run.requests]
    assert max(first) < min(last), (first, last)
    # and their events interleave: on one timeline of all events, the stream changes from one event to
    # the next several times as often as the 7 times of streams received one after another
    timeline = sorted((r.start_s + t, n) for n, r in enumerate(run.requests) for t in r.chunk_times)
    switches = sum(a[1] != b[1] for a, b in zip(timeline, timeline[1:], strict=False))
    assert switches > 3 * (STREAMS - 1), f"{switches} switches between streams in {len(timeline)} events"
