"""What every engine adapter provides: how to launch its server, how to know
it is ready, where its counters are, and how to turn what the engine reports
into speculative-decoding counters. Adapters hold no statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specrig.core.counters import RequestSpec, SpecCounters
from specrig.host.machine import Gpu
from specrig.recipe.schema import Recipe, SpecConfig

__all__ = ["Engine", "LaunchPlan", "SpecCounters", "RequestSpec", "last_value"]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start a server process."""

    argv: list[str]
    environment: dict[str, str]
    base_url: str


class Engine(Protocol):
    name: str
    health_path: str
    """GET path that answers 200 once the server is up."""
    metrics_path: str | None
    """GET path of the Prometheus exposition; None if the engine has none."""
    server_info_path: str | None
    """GET path of a JSON server-state document scraped before/after each run; None if unused."""
    generation_tokens_metric: str | None
    """Counter of generated tokens (cross-check of client counts); None if absent."""
    native_generate_path: str | None
    """POST path of the engine's native generate endpoint, used for speculative runs because
    its OpenAI endpoints report no per-request stats (SGLang's ``/generate``); None: the bench
    uses OpenAI ``/v1/completions``."""

    def launch(
        self,
        *,
        python: str,
        model_path: str,
        served_name: str,
        port: int,
        recipe: Recipe,
        spec: SpecConfig | None,
        drafter: str | None,
        extra_args: list[str],
    ) -> LaunchPlan:
        """The command and environment that start the server on 127.0.0.1:port."""
        ...

    def request_body_extras(self, spec: SpecConfig | None) -> dict[str, Any]:
        """Extra JSON fields for each completion request (e.g. to get per-request stats)."""
        ...

    profile_paths: tuple[str, str] | None
    """POST paths that start and stop the engine's torch profiler (None: specrig cannot profile it)."""

    def profile_launch(self, trace_dir: str) -> tuple[list[str], dict[str, str]]:
        """Server arguments and environment that make the profiler write its traces into ``trace_dir``."""
        ...

    def profile_start_body(self, trace_dir: str) -> dict[str, Any] | None:
        """The JSON the start path takes (None: none), so that a server specrig did not launch
        writes its trace into ``trace_dir`` too where the engine allows it."""
        ...

    def native_generate_body(
        self, *, prompt: str, max_tokens: int, ignore_eos: bool, input_ids: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """Body for ``native_generate_path`` (greedy, streamed; ``input_ids`` instead of the text where
        given); only called when that path is set."""
        ...

    def eager_flag(self, args: list[str]) -> str | None:
        """The one server flag that turns off the compiled / CUDA-graph path this server ran with
        (``args``: its whole argv), or None when it already runs eager. A shortfall of online
        acceptance against the drafter's offline figure names it as the rerun that tells the engine's
        mode from the rest of serving."""
        ...

    batch_cap_flag: str
    """The server argument that caps the requests it runs at once (vLLM's ``--max-num-seqs``)."""
    context_flag: str
    """The server argument that sets the context in tokens, prompt and output (vLLM's ``--max-model-len``)."""

    def default_batch_cap(self, args: list[str], recipe: Recipe, gpus: Sequence[Gpu]) -> tuple[int, str] | None:
        """The cap the engine sets itself when ``args`` hold no :attr:`batch_cap_flag`, and where it comes
        from, on a host with ``gpus``; None where it is only known once the server runs."""
        ...

    def memory_share(self, args: list[str]) -> float:
        """The fraction of a GPU's memory one server takes with these arguments (the last
        such flag wins, as the engine's own parser does), or the engine's default."""
        ...

    def shared_gpu_args(self, fraction: float, kv_cache_bytes: int) -> list[str]:
        """Server arguments for one of several servers sharing a GPU: ``fraction`` of its
        memory and a fixed KV cache, so that concurrent start-ups do not size their caches
        from each other's allocations; empty when the engine cannot do that (then its
        servers start one at a time)."""
        ...

    def request_spec(self, final_payload: dict[str, Any]) -> RequestSpec | None:
        """Per-request speculative stats from the last streamed payload(s) of a response."""
        ...

    def spec_counters(
        self,
        *,
        metrics_before: str | None,
        metrics_after: str | None,
        info_before: dict[str, Any] | None,
        info_after: dict[str, Any] | None,
        requests: list[RequestSpec | None],
        completion_tokens: int,
        served_name: str,
        spec: SpecConfig,
    ) -> SpecCounters | None:
        """Counters for one measured run, from whatever sources the engine offers:
        Prometheus text before/after (``metrics_*``), a server-info JSON before/after
        (``info_*``, fetched from ``server_info_path`` if the adapter has one), and
        the per-request stats."""
        ...


def last_value(args: list[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` or ``flag=VALUE`` in ``args`` (argparse: the last wins)."""
    found = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found
