"""The client keeps up with a server streaming at a modest, known rate: a
synthetic server (its own process) paced at 5 ms per token on each of 8
streams (1,600 tok/s in all, a tenth of what one core of this client takes)
must be received at >= 70% of that rate (asyncio.sleep overshoots a little, and the box may be busy). Fails when the client, not the
server, sets the pace (a blocking call in the event loop, a per-token
parse that grows with the stream...)."""

from __future__ import annotations

from specrig.core.prompt import Prompt
from specrig.serve.client import run_workload
from specrig.serve.synthetic import Behaviour, serve_in_process

STREAMS, TOKENS, DELAY_S = 8, 200, 0.005


def test_client_keeps_up_with_a_paced_server() -> None:
    known = STREAMS / DELAY_S  # tokens per second the server sends at most
    with serve_in_process(Behaviour(tokens_per_chunk=1, token_delay_s=DELAY_S)) as s:
        run = run_workload(
            s.base_url,
            "synthetic",
            prompts=[Prompt(f"p{i}", "x") for i in range(STREAMS)],
            max_tokens=TOKENS,
            concurrency=STREAMS,
            extras={"return_token_ids": True},
        )
    assert run.completion_tokens == STREAMS * TOKENS
    achieved = run.completion_tokens / run.wall_s
    print(
        f"\npaced server {known:,.0f} tok/s at most; the client received {achieved:,.0f} tok/s ({achieved / known:.0%})"
    )
    assert achieved >= 0.7 * known, f"the client received {achieved:,.0f} tok/s of a server sending {known:,.0f}"
    # and each stream's own pace is the server's: inter-token latency ~ the delay, not more
    itl = sorted(x for r in run.requests for x in r.itl_s)
    assert itl[len(itl) // 2] < 3 * DELAY_S
