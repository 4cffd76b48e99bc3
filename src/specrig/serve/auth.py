"""The API key of a server that wants one (vLLM's and SGLang's ``--api-key``): where it comes
from (``--api-key``, the server's own ``--engine-arg=--api-key``, ``OPENAI_API_KEY`` as ``vllm
bench serve`` reads it), the header that carries it, and what a refusal (HTTP 401) means.

vLLM's ``--api-key`` guards the paths under ``/v1`` (``/v2``, ``/inference``) only: ``/health``,
``/metrics``, ``/tokenize`` and the profiler's paths stay open. SGLang's guards every path but
``/health*`` and ``/metrics*``. Every request and probe specrig sends carries the key, so neither
rule matters to it. The key is registered with :mod:`specrig.core.redact`: it is never written."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from specrig.core.errors import ConfigError
from specrig.core.redact import register

__all__ = [
    "API_KEY_ENV",
    "KEY_HINT",
    "auth_headers",
    "bench_api_key",
    "engine_api_key",
    "refused",
    "unauthorized",
]

API_KEY_ENV = "OPENAI_API_KEY"
"""Where the key comes from when no option gives it (what ``vllm bench serve`` reads)."""

KEY_HINT = (
    "give the key the server was started with: --api-key KEY (pytest bench/: --specrig-api-key KEY), "
    f"or {API_KEY_ENV}=KEY in the environment (as `vllm bench serve` reads it)"
)


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header every request and probe carries when there is a key (OpenAI's ``Authorization: Bearer``)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def engine_api_key(engine_args: Sequence[str]) -> str | None:
    """The key a server is given in its own arguments (``--api-key KEY`` or ``--api-key=KEY``; the
    last flag wins, as argparse has it; of several keys after one flag, vLLM accepts any: the first)."""
    found = None
    for i, a in enumerate(engine_args):
        if a == "--api-key" and i + 1 < len(engine_args):
            found = engine_args[i + 1]
        elif a.startswith("--api-key="):
            found = a.split("=", 1)[1]
    return found or None


def bench_api_key(
    option: str | None, engine_args: Sequence[str], *, launching: bool, environ: Mapping[str, str] | None = None
) -> tuple[str | None, list[str]]:
    """The key the client sends, and the server arguments to add for it. In order: ``option``
    (``--api-key``; a server specrig launches gets ``--api-key KEY`` too); the key a launched server
    is given through ``engine_args`` (``--engine-arg=--api-key --engine-arg=KEY``); ``OPENAI_API_KEY``
    (sent only: a launched server is not made to want it). The key is registered for redaction."""
    environ = os.environ if environ is None else environ
    given = engine_api_key(engine_args) if launching else None
    if option is not None and not option:
        raise ConfigError("--api-key is empty", hint=KEY_HINT)
    if option and given and option != given:
        raise ConfigError(
            "--api-key and the --api-key of --engine-arg differ: the server would refuse every request",
            hint="give the key once: --api-key KEY alone passes it to the server too",
        )
    key = option or given or environ.get(API_KEY_ENV) or None
    register(key)
    extra = ["--api-key", option] if option and launching and not given else []
    return key, extra


def unauthorized(where: str, status: int, sent: bool) -> str:
    """What a 401/403 means, for an error's message: the server wants a key, and specrig sent none or a wrong one."""
    said = "HTTP 401 (Unauthorized)" if status == 401 else f"HTTP {status} (Forbidden)"
    if sent:
        return f"{where} answered {said}: the server refused the API key specrig sent"
    return f"{where} answered {said}: the server wants an API key, and specrig sent none"


def refused(error: str | None) -> int | None:
    """The status of a request's error that is a refused (or missing) key, else None."""
    for status in (401, 403):
        if error and error.startswith(f"HTTP {status}"):
            return status
    return None
