"""The target answers the drafter's prompts itself (self-distillation): a real
vLLM server from the engine environment, launched with specrig's own engine
adapter and server code, greedy, several requests in flight so the engine
batches them, sent and streamed by the bench's own client
(:func:`specrig.serve.client.run_workload`). Token ids come back from the server
(``return_token_ids``), so training sees exactly the tokens the engine produced.

Resumable and shared: each finished answer is appended to an answers file
keyed by what decides an answer (model, engine lock, server arguments, output
length); any run with the same key, for any prompt set, sends only the prompts
still missing from it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specrig.core.errors import BenchError, EngineError
from specrig.core.log import log
from specrig.core.prompt import Prompt
from specrig.drafter.prompts import DrafterPrompt
from specrig.engine import get_engine
from specrig.env.make import Env
from specrig.model.folder import ModelRef
from specrig.recipe.schema import Recipe
from specrig.serve.client import run_workload
from specrig.serve.server import Server, free_port
from specrig.serve.types import Limits, RequestResult, RunSpec

__all__ = ["generate_samples", "generation_server", "request_for"]

_DAY_S = 86400.0  # the whole request: no limit that a real answer meets
_SILENT_S = 1800.0  # the longest a stream may go silent


def request_for(
    p: DrafterPrompt, model: str, max_tokens: int, bench_tokens: int | None = None
) -> tuple[str, dict[str, Any]]:
    """(path, body) of the greedy request for one prompt. A bench-shaped prompt is
    asked exactly as the bench asks: raw text, EOS ignored, ``bench_tokens`` tokens."""
    common = {"model": model, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True}
    if p.format == "chat":
        return "/v1/chat/completions", common | {"messages": p.messages()}
    if p.format == "bench":
        return "/v1/completions", common | {
            "prompt": p.text,
            "max_tokens": bench_tokens or max_tokens,
            "ignore_eos": True,
        }
    return "/v1/completions", common | {"prompt": p.text}


def _answer_all(
    base_url: str,
    model: str,
    todo: list[DrafterPrompt],
    max_tokens: int,
    concurrency: int,
    partial: Path,
    deadline: float | None,
    bench_tokens: int | None = None,
    watchdog: Callable[[], None] | None = None,
) -> int:
    """Every prompt of ``todo`` answered through the bench's client, each answer appended to
    ``partial`` as it comes; returns the tokens generated. Past ``deadline`` (monotonic), a
    training prompt not yet sent is not sent: it trains on its dataset answer."""
    by_id = {p.id: p for p in todo}
    slots = max(1, min(concurrency, len(todo)))  # no prompt sent twice to fill the slots

    def build(p: Prompt, n: int) -> tuple[str, dict[str, Any]]:
        path, body = request_for(by_id[p.id], model, max_tokens, bench_tokens)
        return path, body | {"stream": True, "stream_options": {"include_usage": True}}

    def out_of_time(p: Prompt) -> bool:
        return deadline is not None and time.monotonic() > deadline and by_id[p.id].split == "train"

    spec = RunSpec(
        prompts=tuple(Prompt(p.id, p.text) for p in todo),
        max_tokens=max_tokens,
        build=build,
        concurrency=slots,
        # a long answer streams, so the stall limit is httpx's read limit of old: no request is cut for its length
        limits=Limits(timeout_s=_DAY_S, stall_timeout_s=_SILENT_S),
        progress="target answers",
        progress_lines_s=30.0,
        # one connection per request in flight; at hundreds in flight a server closes kept-alive connections
        # just as they are reused: such a request is sent again, up to 3 times, after 0.5 s, 1 s, 1.5 s
        connections=slots,
        retries=3,
        retry_backoff_s=0.5,
        skip=out_of_time,
    )
    tokens = 0
    with open(partial, "a") as sink:

        def record(res: RequestResult) -> None:
            nonlocal tokens
            if not res.ok:
                return
            if res.prompt_token_ids is None or res.token_ids is None:
                raise EngineError(
                    "the server returned no token ids", hint="this vLLM does not support return_token_ids"
                )
            p = by_id[res.prompt_id]
            rec = {
                "id": p.id,
                "split": p.split,
                "format": p.format,
                "prompt_ids": res.prompt_token_ids,
                "output_ids": res.token_ids,
            }
            sink.write(json.dumps(rec) + "\n")
            sink.flush()
            tokens += len(res.token_ids)

        run_workload(base_url, spec, on_result=record, watchdog=watchdog)
    return tokens


def read_partial(partial: Path) -> dict[str, dict]:
    done = {}
    if partial.exists():
        for line in partial.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by an interruption
            done[rec["id"]] = rec
    return done


def generation_server(
    recipe: Recipe, env: Env, model: ModelRef, server_args: tuple[str, ...] | list[str], log_path: Path
) -> Server:
    """The target's plain vLLM server (no speculation) that answers the drafter's prompts, not yet
    started: the engine adapter's launch with ``server_args`` added, its log at ``log_path``."""
    engine = get_engine("vllm")
    plan = engine.launch(
        python=str(env.python),
        model_path=str(model.path),
        served_name=model.served_name,
        port=free_port(),
        recipe=recipe,
        spec=None,
        drafter=None,
        extra_args=list(server_args),
    )
    return Server(
        plan=plan,
        log_path=log_path,
        health_path=engine.health_path,
        served_name=model.served_name,
        startup_timeout_s=recipe.engine["vllm"].startup_timeout_s,
    )


def generate_samples(
    recipe: Recipe,
    env: Env,
    model: ModelRef,
    prompts: list[DrafterPrompt],
    *,
    max_tokens: int,
    concurrency: int,
    work: Path,
    answers: Path,
    seconds: float = 0.0,
    bench_tokens: int | None = None,
    server_args: tuple[str, ...] = (),
) -> tuple[list[dict], dict[str, Any]]:
    """Answers for every prompt (in prompt order) and facts about the run.

    ``seconds`` (0: no limit) bounds the answering: training prompts still
    unanswered then carry ``reference`` (the dataset's own answer) instead of
    token ids; the hidden-state stage tokenizes those. Held-out prompts are
    always answered by the target, first."""
    done = {k: r for k, r in read_partial(answers).items() if r.get("format") in ("chat", "raw", "bench")}
    todo = [p for p in prompts if p.id not in done or done[p.id]["format"] != p.format]
    # held-out answers first (the offline eval needs them all), then the bench-shaped ones (the
    # drafter's view of what the bench measures), then the rest, as far as the time budget goes
    todo.sort(key=lambda p: (p.split != "heldout", p.format != "bench"))
    facts: dict[str, Any] = {"resumed": len(prompts) - len(todo)}
    if todo:
        server = generation_server(recipe, env, model, server_args, work / "server.log")
        plan = server.plan
        with server:
            log.step(f"starting vLLM on {plan.base_url} to generate {len(todo)} answers (log: {server.log_path})")
            server.start()
            facts["server_ready_s"] = server.wait_ready()
            log.info(f"server ready after {facts['server_ready_s']:.0f} s")
            t0 = time.monotonic()
            try:
                deadline = time.monotonic() + seconds if seconds else None
                facts["tokens"] = _answer_all(
                    plan.base_url,
                    model.served_name,
                    todo,
                    max_tokens,
                    concurrency,
                    answers,
                    deadline,
                    bench_tokens,
                    watchdog=server.check_alive,
                )
            except BenchError as exc:
                raise EngineError(f"generation failed: {exc.message}", hint=f"server log: {server.log_path}") from None
            facts["generate_s"] = time.monotonic() - t0
            facts["tok_s"] = facts["tokens"] / facts["generate_s"] if facts["generate_s"] else None
    done = read_partial(answers)
    out = []
    for p in prompts:
        if p.id in done and done[p.id]["format"] == p.format:
            out.append(done[p.id])
        else:
            rec = {"id": p.id, "split": p.split, "format": p.format, "prompt": p.text, "reference": p.reference}
            out.append(rec | ({"context": [list(c) for c in p.context]} if p.context else {}))
    facts["reference_samples"] = sum("reference" in r for r in out)
    return out, facts
