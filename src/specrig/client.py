"""The streaming load generator: OpenAI ``/v1/completions`` with ``stream``
(or an engine's native endpoint, e.g. SGLang's ``/generate``), greedy, a fixed
number of output tokens (``ignore_eos``), N requests in flight.

Per request it records the send time, the arrival of the first and the last
token-bearing chunk, and the server's own ``usage.completion_tokens``. Token
counts are never inferred from chunks: under speculative decoding several
tokens arrive per chunk, so TPOT = (last - first) / (completion_tokens - 1).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import httpx

from .errors import BenchError

__all__ = ["Prompt", "PROMPTS", "RequestResult", "RunResult", "run_workload", "openai_request", "RequestBuilder"]


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


# The workload of the original story: five prompts, 512 tokens each, one stream at a time.
PROMPTS: tuple[Prompt, ...] = (
    Prompt("relativity", "Explain Einstein's theory of general relativity in detail, including its key predictions."),
    Prompt("n_queens", "Write a Python program that solves the N-queens problem and explain how it works step by step."),
    Prompt("tcp_udp", "Compare TCP and UDP: how each works, their trade-offs, and when to use which."),
    Prompt("photosynthesis", "Describe the process of photosynthesis, from light absorption to sugar production."),
    Prompt("primes", "Prove that there are infinitely many prime numbers, and explain each step of the proof."),
)


@dataclass
class RequestResult:
    prompt_id: str
    ok: bool
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    chunks: int = 0
    text: str = ""
    final_payload: dict[str, Any] = field(default_factory=dict)

    @property
    def tpot_s(self) -> float | None:
        if self.decode_s is None or self.completion_tokens < 2:
            return None
        return self.decode_s / (self.completion_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        if not self.decode_s or self.completion_tokens < 2:
            return None
        return (self.completion_tokens - 1) / self.decode_s

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("final_payload")
        d["text"] = self.text[:200]
        d["tpot_s"] = self.tpot_s
        d["decode_tok_s"] = self.decode_tok_s
        return d


@dataclass
class RunResult:
    requests: list[RequestResult]
    wall_s: float
    concurrency: int
    max_tokens: int

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    def aggregate(self) -> dict[str, Any]:
        ok = [r for r in self.requests if r.ok]
        decode = [r.decode_tok_s for r in ok if r.decode_tok_s]
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        tpot = [r.tpot_s for r in ok if r.tpot_s is not None]

        def stat(xs: list[float], f: Any) -> float | None:
            return f(xs) if xs else None

        return {
            "requests": len(self.requests),
            "failed": len(self.requests) - len(ok),
            "concurrency": self.concurrency,
            "max_tokens": self.max_tokens,
            "completion_tokens": self.completion_tokens,
            "wall_s": self.wall_s,
            "output_tok_s": self.completion_tokens / self.wall_s if self.wall_s else None,
            "decode_tok_s_mean": stat(decode, statistics.fmean),
            "decode_tok_s_median": stat(decode, statistics.median),
            "decode_tok_s_min": stat(decode, min),
            "decode_tok_s_max": stat(decode, max),
            "ttft_s_median": stat(ttft, statistics.median),
            "ttft_s_mean": stat(ttft, statistics.fmean),
            "tpot_ms_median": stat([t * 1000 for t in tpot], statistics.median),
            "tpot_ms_mean": stat([t * 1000 for t in tpot], statistics.fmean),
        }


RequestBuilder = Callable[[Prompt, int], tuple[str, dict[str, Any]]]


def openai_request(extras: dict[str, Any], model: str) -> RequestBuilder:
    """Streaming ``/v1/completions``: greedy, fixed length, usage in the last chunk."""

    def build(p: Prompt, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body = {
            "model": model, "prompt": p.text, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, **extras,
        }  # fmt: skip
        return "/v1/completions", body

    return build


def _absorb(res: RequestResult, payload: dict[str, Any]) -> str:
    """Fold one streamed payload into ``res``; returns the new text it carried.

    OpenAI chunks carry text deltas and a final ``usage``; SGLang's native
    ``/generate`` chunks carry the cumulative text and ``meta_info``."""
    meta = payload.get("meta_info")
    if isinstance(meta, dict):
        full = payload.get("text") or ""
        new = full[len(res.text):]
        res.text = full
        res.completion_tokens = int(meta.get("completion_tokens") or res.completion_tokens)
        res.prompt_tokens = int(meta.get("prompt_tokens") or res.prompt_tokens)
        if meta.get("finish_reason") is not None:
            res.final_payload = payload
        return new
    choices = payload.get("choices") or []
    new = "".join(c.get("text") or "" for c in choices)
    res.text += new
    if payload.get("usage"):
        res.completion_tokens = int(payload["usage"].get("completion_tokens") or 0)
        res.prompt_tokens = int(payload["usage"].get("prompt_tokens") or 0)
    if payload.get("usage") or payload.get("metrics"):
        res.final_payload.update(payload)
    return new


async def _one(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], prompt: Prompt, timeout_s: float
) -> RequestResult:
    res = RequestResult(prompt_id=prompt.id, ok=False)
    t0 = time.perf_counter()
    first = last = None
    try:
        async with client.stream("POST", url, json=body, timeout=timeout_s) as resp:
            if resp.status_code != 200:
                res.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                if _absorb(res, json.loads(data)):
                    res.chunks += 1
                    first = first if first is not None else now
                    last = now
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    end = time.perf_counter()
    res.e2e_s = end - t0
    if first is None:
        res.error = "no tokens streamed"
        return res
    res.ttft_s = first - t0
    res.decode_s = (last or first) - first
    if not res.completion_tokens:
        res.error = "the server reported no usage (stream_options.include_usage unsupported?)"
        return res
    res.ok = True
    return res


async def _run(
    base_url: str, prompts: list[Prompt], *, max_tokens: int, concurrency: int,
    build: RequestBuilder, timeout_s: float,
) -> RunResult:  # fmt: skip
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:

        async def guarded(p: Prompt) -> RequestResult:
            path, body = build(p, max_tokens)
            async with sem:
                return await _one(client, path, body, p, timeout_s)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(guarded(p) for p in prompts))
        wall = time.perf_counter() - t0
    return RunResult(list(results), wall, concurrency, max_tokens)


def run_workload(
    base_url: str,
    model: str,
    *,
    prompts: list[Prompt] | tuple[Prompt, ...] = PROMPTS,
    max_tokens: int,
    concurrency: int = 1,
    extras: dict[str, Any] | None = None,
    build: RequestBuilder | None = None,
    timeout_s: float = 1800.0,
) -> RunResult:
    """Send every prompt (at least ``concurrency`` requests: prompts are cycled).
    ``build`` makes each request (default: OpenAI completions with ``extras``)."""
    plist = list(prompts)
    while len(plist) < concurrency:
        plist += list(prompts)[: concurrency - len(plist)]
    result = asyncio.run(
        _run(base_url, plist, max_tokens=max_tokens, concurrency=concurrency,
             build=build or openai_request(extras or {}, model), timeout_s=timeout_s)  # fmt: skip
    )
    failed = [r for r in result.requests if not r.ok]
    if failed:
        raise BenchError(
            f"{len(failed)} of {len(result.requests)} requests failed; first: {failed[0].prompt_id}: {failed[0].error}",
            hint="see the server log in the results folder",
        )
    return result
