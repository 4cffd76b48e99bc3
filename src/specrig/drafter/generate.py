"""The target answers the drafter's prompts itself (self-distillation): a real
vLLM server from the engine environment, launched with specrig's own engine
adapter and server code, greedy, several requests in flight so the engine
batches them. Token ids come back from the server (``return_token_ids``), so
training sees exactly the tokens the engine produced.

Resumable and shared: each finished answer is appended to an answers file
keyed by what decides an answer (model, engine lock, server arguments, output
length); any run with the same key, for any prompt set, sends only the prompts
still missing from it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from specrig.core.errors import EngineError
from specrig.core.log import log
from specrig.drafter.prompts import DrafterPrompt
from specrig.engine import get_engine
from specrig.env.make import Env
from specrig.model.folder import ModelRef
from specrig.recipe.schema import Recipe
from specrig.serve.server import Server, free_port

__all__ = ["generate_samples", "request_for"]


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


def _ids(payload: dict[str, Any]) -> tuple[list[int], list[int]]:
    choice = payload["choices"][0]
    prompt = payload.get("prompt_token_ids") or choice.get("prompt_token_ids")
    out = choice.get("token_ids")
    if prompt is None or out is None:
        raise EngineError("the server returned no token ids", hint="this vLLM does not support return_token_ids")
    return list(prompt), list(out)


async def _send_all(
    base_url: str,
    model: str,
    todo: list[DrafterPrompt],
    max_tokens: int,
    concurrency: int,
    partial: Path,
    deadline: float | None,
    bench_tokens: int | None = None,
) -> int:
    sem = asyncio.Semaphore(concurrency)
    tokens = 0
    t0 = time.monotonic()
    # one connection per request in flight (httpx's default pool holds 100: it would cap the concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=1800, limits=limits) as client:
        with log.progress() as bar, open(partial, "a") as sink:
            task = bar.add_task("target answers", total=len(todo), note="")

            async def one(p: DrafterPrompt) -> None:
                nonlocal tokens
                path, body = request_for(p, model, max_tokens, bench_tokens)
                async with sem:
                    if deadline and time.monotonic() > deadline and p.split == "train":
                        bar.update(task, advance=1)
                        return  # out of time: this prompt trains on its dataset answer
                    r = await _post(client, path, body)
                if r.status_code != 200:
                    raise EngineError(f"generation request for {p.id} returned HTTP {r.status_code}: {r.text[:300]}")
                prompt_ids, output_ids = _ids(r.json())
                rec = {
                    "id": p.id,
                    "split": p.split,
                    "format": p.format,
                    "prompt_ids": prompt_ids,
                    "output_ids": output_ids,
                }
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                tokens += len(output_ids)
                rate = tokens / max(time.monotonic() - t0, 1e-6)
                bar.update(task, advance=1, note=f"{tokens} tokens, {rate:.0f} tok/s")

            try:
                async with asyncio.TaskGroup() as group:  # one failure cancels the rest before the sink closes
                    for p in todo:
                        group.create_task(one(p))
            except BaseExceptionGroup as group_error:
                raise group_error.exceptions[0] from None
    return tokens


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any], attempts: int = 4) -> httpx.Response:
    """POST, again after a dropped connection (a server closing a kept-alive connection just
    as the client reuses it reads as ReadError / RemoteProtocolError at hundreds in flight)."""
    for attempt in range(attempts):
        try:
            return await client.post(path, json=body)
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError, httpx.WriteError):
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


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
        engine = get_engine("vllm")
        port = free_port()
        plan = engine.launch(
            python=str(env.python),
            model_path=str(model.path),
            served_name=model.served_name,
            port=port,
            recipe=recipe,
            spec=None,
            drafter=None,
            extra_args=list(server_args),
        )
        server = Server(
            plan=plan,
            log_path=work / "server.log",
            health_path=engine.health_path,
            served_name=model.served_name,
            startup_timeout_s=recipe.engine["vllm"].startup_timeout_s,
        )
        with server:
            log.step(f"starting vLLM on {plan.base_url} to generate {len(todo)} answers (log: {server.log_path})")
            server.start()
            facts["server_ready_s"] = server.wait_ready()
            log.info(f"server ready after {facts['server_ready_s']:.0f} s")
            t0 = time.monotonic()
            try:
                deadline = time.monotonic() + seconds if seconds else None
                facts["tokens"] = asyncio.run(
                    _send_all(
                        plan.base_url, model.served_name, todo, max_tokens, concurrency, answers, deadline, bench_tokens
                    )
                )
            except httpx.HTTPError as exc:
                server.check_alive()
                raise EngineError(f"generation failed: {exc}", hint=f"server log: {server.log_path}") from None
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
