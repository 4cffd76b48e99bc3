"""The client's tests ask for runs as they read best: an OpenAI completions run of ``prompts``
(``extras`` in every body, or their own ``build``), its time limits and load as keywords. Each call
is one typed :class:`~specrig.serve.types.RunSpec` handed to ``run_workload``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
