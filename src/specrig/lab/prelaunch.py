"""What a bench is judged on before any server starts, each message naming the limit and
where it comes from:

* the load against this process's limits: every request in flight holds one connection to
  the server (the client keeps :data:`SPARE_CONNECTIONS` more), each one open file
  (``ulimit -n``) and one local port (the kernel's ``ip_local_port_range``). Over either is
  refused: the run would end in "Too many open files" (or "Cannot assign requested address")
  after a server start was paid for.
* the load against the engine's batch cap (vLLM's ``--max-num-seqs``, SGLang's
  ``--max-running-requests``; from the recipe's arguments, ``--engine-arg`` or the engine's
  default): a warning, not a refusal. The run is valid, but the requests above the cap wait
  in the engine's queue: their TTFT includes the wait, and the load point measures a batch of
  the cap's size, which the user may want (a saturation sweep) or not (then raise the cap).
* output lengths against the model's context (``max_model_len``: the recipe's, or the
  engine's flag in its arguments): ``--max-tokens``, the recipe's default, a custom line's
  ``output_len``. Refused before anything is made.
* every prompt known before launch (the story's, random words, a custom file) against the
  context, with its output: counted with the served model's tokenizer in the engine's
  environment (:func:`specrig.model.tokens.count_tokens`), or, where that cannot be loaded,
  by a conservative bound (at least one token per :data:`BYTES_PER_TOKEN` bytes), said so.

ShareGPT prompts are fitted to the context at run time, with the server's own tokenizer.
An attached server (``--endpoint``) is judged by its own limits: only the client's are checked."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specrig.core.errors import ConfigError, EnvError
from specrig.core.log import log
from specrig.core.prompt import Prompt
from specrig.engine.base import Engine, last_value
from specrig.host.limits import ConnectionLimits
from specrig.host.machine import Gpu
from specrig.lab.options import BenchOptions
from specrig.lab.results import Workload
from specrig.model.datasets import load_custom, random_prompts, story_prompts
from specrig.model.tokens import count_tokens
from specrig.recipe.schema import Recipe

__all__ = [
    "Limit",
    "fixed_prompts",
    "context_limit",
    "check_connections",
    "check_outputs",
    "check_prompts",
    "warn_batch_cap",
]

SPARE_CONNECTIONS = 2
"""Connections the client keeps beyond the requests in flight (``serve.types.RunSpec.connections``)."""
FD_HEADROOM = 64
"""Open files besides the connections: the server's log, the metrics scrapes, pytest's own."""
BYTES_PER_TOKEN = 8
"""The bound used without a tokenizer: a token of English text averages about 4 bytes."""


@dataclass(frozen=True)
class Limit:
    """A number a server is started with, and where it comes from (for the messages)."""

    value: int
    source: str


def _sources(opts: BenchOptions, recipe: Recipe, spec: bool) -> list[tuple[list[str], str]]:
    """The server's arguments by where they come from, in the order a launch passes them (the last of a flag wins)."""
    eng = recipe.engine[opts.engine]
    where = f"recipe {recipe.name}'s [engine.{opts.engine}]"
    out = [(list(eng.args), f"{where} args")]
    if spec:
        out.append((list(eng.spec_args), f"{where} spec_args"))
    return [*out, (list(opts.engine_arg), "--engine-arg")]


def _count(text: str) -> int | None:
    """A token count as the engines read one: ``2048``, ``32k`` (x1000), ``32K`` (x1024); None: not a count."""
    for suffix, unit in (("k", 1000), ("K", 1024), ("m", 1000**2), ("M", 1024**2)):
        if text.endswith(suffix) and text[:-1].isdigit():
            return int(text[:-1]) * unit
    return int(text) if text.isdigit() else None


def _flag(sources: list[tuple[list[str], str]], flag: str) -> Limit | None | bool:
    """The last ``flag`` in the server's arguments (False: none; None: a value that is no count)."""
    found: Limit | None | bool = False
    for args, where in sources:
        value = last_value(args, flag)
        if value is not None:
            n = _count(value)
            found = Limit(n, f"{flag} {value} in {where}") if n else None
    return found


def context_limit(opts: BenchOptions, recipe: Recipe, engine: Engine, model_dir: Path | None = None) -> Limit | None:
    """The context a launched server gets, in tokens (prompt and output together): the engine's flag in
    its arguments, else the recipe's ``max_model_len``, else (``model_dir``) the model's own; None: unknown."""
    found = _flag(_sources(opts, recipe, spec=False), engine.context_flag)
    if found is not False:
        return found or None
    served = recipe.model_named(opts.model)
    if served.max_model_len:
        table = "[model]" if opts.model in (None, "", "default") else f"[models.{opts.model}]"
        return Limit(served.max_model_len, f"max_model_len in recipe {recipe.name}'s {table}")
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text()) if model_dir else {}
    except (OSError, ValueError):
        return None
    n = cfg.get("max_position_embeddings") if isinstance(cfg, dict) and not cfg.get("rope_scaling") else None
    return Limit(n, "max_position_embeddings in the model's config.json") if isinstance(n, int) and n > 0 else None


def _in_flight(w: Workload, opts: BenchOptions) -> tuple[int, str]:
    """The most requests in flight at any load point, and the option that asks for it."""
    worst = (0, "")
    for p in w.points:
        if p.request_rate is not None:
            n = w.num_prompts
            what = f"--request-rate {p.request_rate:g} (open loop: all {n:,} prompts may be in flight)"
        else:
            n = p.concurrency or 1
            what = f"--concurrency {n}" if opts.concurrency else f"the recipe's [bench] concurrency {n}"
        worst = max(worst, (n, what), key=lambda x: x[0])
    return worst


def check_connections(w: Workload, opts: BenchOptions, limits: ConnectionLimits) -> None:
    """Refuse a load this process cannot hold open: one file and one local port a connection."""
    n, what = _in_flight(w, opts)
    need = n + SPARE_CONNECTIONS
    soft, hard = limits.open_files_soft, limits.open_files_hard
    if soft is not None and need + limits.open_now + FD_HEADROOM > soft:
        files = need + limits.open_now + FD_HEADROOM
        most = max(1, soft - limits.open_now - FD_HEADROOM - SPARE_CONNECTIONS)
        beyond = f" (ulimit -n goes up to the hard limit, {hard:,}; beyond it: root, or /etc/security/limits.conf)"
        raise ConfigError(
            f"{what} holds {need:,} connections to the server, one open file each, and this process may open "
            f"{soft:,} files (ulimit -n, the RLIMIT_NOFILE soft limit; {limits.open_now} open now): the run would "
            "fail on 'Too many open files'",
            hint=f"lower the load to at most {most:,} requests in flight, or raise the limit in the shell that runs "
            f"specrig: `ulimit -n {files}`{beyond if hard is not None and files > hard else ''}",
        )
    ports = limits.local_port_count
    if ports is not None and need > ports:
        lo, hi = limits.local_ports or (0, 0)
        raise ConfigError(
            f"{what} holds {need:,} connections to one server address, each from a local port of its own, and "
            f"the kernel hands out {ports:,} ({lo}-{hi}, /proc/sys/net/ipv4/ip_local_port_range)",
            hint=f"lower the load to at most {max(1, ports - SPARE_CONNECTIONS):,} requests in flight, or widen the "
            'range (as root): sysctl -w net.ipv4.ip_local_port_range="1024 65535"',
        )


def warn_batch_cap(
    w: Workload, opts: BenchOptions, recipe: Recipe, engine: Engine, gpus: Sequence[Gpu], spec: bool
) -> str | None:
    """A warning (logged, and returned) when more requests are in flight than the engine runs at once."""
    sources = _sources(opts, recipe.serving(opts.model), spec)
    cap = _flag(sources, engine.batch_cap_flag)
    if cap is False:
        default = engine.default_batch_cap([a for args, _ in sources for a in args], recipe.serving(opts.model), gpus)
        cap = Limit(*default) if default else None
    n, what = _in_flight(w, opts)
    if not isinstance(cap, Limit) or n <= cap.value:
        return None
    said = (
        f"{what}: {n:,} requests in flight, and {engine.name} runs at most {cap.value:,} at once ({cap.source}); "
        f"the other {n - cap.value:,} wait in its queue, so their TTFT includes the wait and this load point measures "
        f"a batch of {cap.value:,}. To batch all {n:,}, pass --engine-arg={engine.batch_cap_flag}={n} (memory allowing)"
    )
    log.warn(said)
    return said


def _too_long(n: int, ctx: Limit, what: str, fix: str) -> ConfigError:
    return ConfigError(
        f"{what} asks for {n:,} output tokens, and the model's context is {ctx.value:,} tokens ({ctx.source}), "
        f"prompt and output together: the engine would refuse every such request",
        hint=f"{fix}, at most {ctx.value - 1:,} less the prompt's tokens; or serve a longer context where the model "
        "allows it (max_model_len in the recipe, or --engine-arg=--max-model-len=N; SGLang: --context-length)",
    )


def check_outputs(w: Workload, opts: BenchOptions, ctx: Limit | None) -> None:
    """Refuse an output length that leaves no room in the context (before anything is made)."""
    if ctx is None:
        return
    if w.max_tokens is not None and w.max_tokens >= ctx.value:
        what = f"--max-tokens {w.max_tokens}" if opts.max_tokens else f"the recipe's [bench] max_tokens {w.max_tokens}"
        raise _too_long(w.max_tokens, ctx, what, "ask for fewer with --max-tokens N")
    if w.dataset == "custom":
        for p in load_custom(str(w.dataset_path)):
            n = w.output_len(p)
            if n >= ctx.value:
                where = _name(p, w)
                raise _too_long(n, ctx, where, f"lower the output_len of {where} (or pass --max-tokens N)")


def fixed_prompts(w: Workload) -> list[Prompt] | None:
    """The workload's prompts when they are known without a server (None: ShareGPT, fitted to the
    context at run time with the server's tokenizer)."""
    if w.dataset == "story":
        return story_prompts(w.num_prompts)
    if w.dataset == "custom":
        ps = load_custom(str(w.dataset_path), w.num_prompts)
        if w.max_tokens is None:
            ps = [p if p.output_len else Prompt(p.id, p.text, w.request_len, p.reference) for p in ps]
        return ps
    if w.dataset == "random":
        return random_prompts(w.num_prompts, input_words=w.random_input_len, output_len=w.max_tokens, seed=w.seed)
    return None


def _name(p: Prompt, w: Workload) -> str:
    """How a message names a prompt: a custom file's line (``FILE:N``), else the set's id."""
    base = p.id.split("#")[0]
    if w.dataset == "custom" and base.startswith("custom-"):
        return f"{w.dataset_path}:{base.removeprefix('custom-')}"
    return f"{w.dataset} prompt {base!r}"


def _counts(texts: list[str], python: Path | str, model_dir: Path, chat: bool) -> tuple[list[int], str]:
    """Each text's tokens, and how they were counted: the model's tokenizer, else the bound."""
    try:
        return count_tokens(python, model_dir, texts, chat=chat), "counted with the model's tokenizer"
    except EnvError as exc:
        how = f"at least one token per {BYTES_PER_TOKEN} bytes, a conservative bound"
        log.warn(f"the prompts' tokens could not be counted with the model's tokenizer ({exc.message.splitlines()[0]})")
        log.warn(f"judging each prompt by {how} instead")
        return [math.ceil(len(t.encode()) / BYTES_PER_TOKEN) for t in texts], how


def check_prompts(w: Workload, ctx: Limit | None, python: Path | str, model_dir: Path) -> None:
    """Refuse prompts that with their output do not fit the context, counted with the model's tokenizer
    in the engine's environment (after the model is made, before any server starts)."""
    prompts = fixed_prompts(w)
    if ctx is None or not prompts:
        return
    unique = list({p.text: p for p in prompts}.values())
    counts, how = _counts([p.text for p in unique], python, model_dir, w.chat)
    over = []
    for p, n_in in zip(unique, counts, strict=True):
        n_out = w.output_len(p)
        if n_in + n_out > ctx.value:
            over.append(f"{_name(p, w)}: {n_in:,} prompt tokens + {n_out:,} output = {n_in + n_out:,}")
    if over:
        shown = "\n".join(f"  {line}" for line in over[:5]) + (f"\n  and {len(over) - 5} more" if len(over) > 5 else "")
        raise ConfigError(
            f"{len(over)} prompt(s) with their output do not fit the model's context of {ctx.value:,} tokens "
            f"({ctx.source}; {how}{', through the chat template' if w.chat else ''}):\n{shown}",
            hint="shorten or drop those prompts, ask for fewer output tokens (--max-tokens, a line's output_len), "
            "or serve a longer context where the model allows it (max_model_len in the recipe, or "
            "--engine-arg=--max-model-len=N; SGLang: --context-length)",
        )
