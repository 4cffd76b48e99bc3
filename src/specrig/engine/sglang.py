"""SGLang (pinned 0.5.9): ``python -m sglang.launch_server`` from the engine
environment, readiness on ``/health``, speculative-decoding counters from the
per-request ``meta_info`` of the native ``/generate`` endpoint, else from the
cumulative ``avg_spec_accept_length`` in ``/server_info``.

Facts checked against the SGLang 0.5.9 wheel (see docs/sglang.md):

* ``/health`` and ``/health_generate`` share one handler: 503 while the server
  is starting, then a one-token generation (``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``
  defaults to true), 200 once it answers.
* ``/server_info`` is the 0.5.9 name; ``/get_server_info`` still works but logs a
  deprecation warning on every call (older releases have only ``/get_server_info``).
* ``/metrics`` exists only with ``--enable-metrics``. ``sglang:spec_accept_length``
  and ``sglang:spec_accept_rate`` are gauges over the last decode-log interval:
  they are never differenced here.
* Per-request speculative stats are in ``meta_info`` of the finished ``/generate``
  response (last streamed chunk): ``spec_verify_ct``, ``spec_accept_token_num``,
  ``spec_draft_token_num``, ``spec_accept_length``, ``spec_accept_rate``,
  ``spec_accept_histogram``. The OpenAI ``/v1/completions`` and
  ``/v1/chat/completions`` endpoints of 0.5.9 drop them (only later SGLang adds an
  ``sglext`` carrier), so a client that wants them must call ``/generate``
  (:meth:`SGLangEngine.native_generate_body`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specrig.core.errors import ConfigError
from specrig.engine.base import LaunchPlan, RequestSpec, SpecCounters, last_value
from specrig.engine.metrics import parse
from specrig.recipe.schema import Recipe, SpecConfig

__all__ = ["ENGINE", "SGLangEngine", "SGLANG_VERSION", "ALGORITHMS"]

SGLANG_VERSION = "0.5.9"

ALGORITHMS: dict[str, str] = {
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "mtp": "NEXTN",  # SGLang rewrites NEXTN to EAGLE and finds the MTP layers itself
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
}
"""specrig method -> ``--speculative-algorithm`` value (0.5.9 choices:
EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM)."""

NEEDS_DRAFTER = ("eagle3", "eagle", "draft_model")

NGRAM_OPTIONS = {
    "prompt_lookup_max": "--speculative-ngram-max-match-window-size",
    "prompt_lookup_min": "--speculative-ngram-min-match-window-size",
}
"""Spec options the adapter maps for ``ngram``; anything else goes in extra_args."""

GAUGE = "sglang:spec_accept_length"

# meta_info keys: 0.5.x name first, then the name later SGLang uses (PR #23530 renamed them)
_ACCEPTED_KEYS = ("spec_accept_token_num", "spec_num_correct_drafts")
_DRAFTED_KEYS = ("spec_draft_token_num", "spec_num_proposed_drafts")
_HISTOGRAM_KEYS = ("spec_accept_histogram", "spec_correct_drafts_histogram")


class SGLangEngine:
    name = "sglang"
    health_path = "/health"
    metrics_path = "/metrics"
    server_info_path = "/server_info"
    generation_tokens_metric = "sglang:generation_tokens_total"
    native_generate_path = "/generate"
    profile_paths = None  # its traces carry none of the step scopes specrig's breakdown reads (yet)

    def profile_launch(self, trace_dir: str) -> tuple[list[str], dict[str, str]]:
        return [], {"SGLANG_TORCH_PROFILER_DIR": trace_dir}

    """POST path that returns per-request speculative stats (``meta_info``)."""

    # ------------------------------------------------------------------ launch

    def spec_args(self, spec: SpecConfig, drafter: str | None, model_path: str) -> list[str]:
        """The ``--speculative-*`` flags for one configuration. ``k`` drafts per
        verify step: a chain (top-k 1) of ``k`` steps verifies ``k + 1`` tokens."""
        algorithm = ALGORITHMS.get(spec.method)
        if algorithm is None:
            raise ConfigError(
                f"SGLang {SGLANG_VERSION} has no speculative method {spec.method!r}",
                hint=f"SGLang supports: {', '.join(sorted(ALGORITHMS))} "
                f"(--speculative-algorithm {', '.join(sorted(set(ALGORITHMS.values())))}); "
                "run this configuration on vLLM instead",
            )
        k = spec.num_speculative_tokens
        args = ["--speculative-algorithm", algorithm]
        if spec.method == "ngram":
            args += _ngram_option_args(spec)
            # max BFS breadth 1 keeps the draft a chain, so k drafts per step as in vLLM
            args += ["--speculative-ngram-max-bfs-breadth", "1", "--speculative-num-draft-tokens", str(k + 1)]
            return args
        if spec.options:
            raise ConfigError(
                f"spec option(s) {', '.join(sorted(spec.options))} have no SGLang mapping for method {spec.method!r}",
                hint="pass SGLang flags through the extra server arguments instead",
            )
        if spec.method in NEEDS_DRAFTER and not drafter:
            raise ConfigError(
                f"SGLang method {algorithm} needs a drafter path (--speculative-draft-model-path)",
                hint="set model in the [spec.*] table to the drafter folder",
            )
        if drafter and drafter != model_path:
            args += ["--speculative-draft-model-path", drafter]
        args += [
            "--speculative-num-steps",
            str(k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
        return args

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
        eng = recipe.engine.get("sglang")
        if eng is None:
            raise ConfigError(
                f"recipe {recipe.name!r} has no [engine.sglang] table",
                hint="add [engine.sglang] with env = the environment that has sglang installed",
            )
        argv = [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model_path,
            "--served-model-name",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tp-size",
            str(recipe.model.tensor_parallel),
            "--enable-metrics",
        ]
        if recipe.model.dtype != "auto":
            argv += ["--dtype", recipe.model.dtype]
        if recipe.model.max_model_len:
            argv += ["--context-length", str(recipe.model.max_model_len)]
        argv += list(eng.args)
        if spec is not None:
            argv += self.spec_args(spec, drafter, model_path)
        argv += list(extra_args)
        environment = dict(eng.environment) | {"PYTHONUNBUFFERED": "1"}
        return LaunchPlan(argv=argv, environment=environment, base_url=f"http://127.0.0.1:{port}")

    # ------------------------------------------------------------------ requests

    def memory_share(self, args: list[str]) -> float:
        return float(last_value(args, "--mem-fraction-static") or 0.88)

    def shared_gpu_args(self, fraction: float, kv_cache_bytes: int) -> list[str]:
        # SGLang's static fraction covers weights and KV cache; it has no fixed-size KV flag
        return ["--mem-fraction-static", f"{fraction:.4f}"]

    def request_body_extras(self, spec: SpecConfig | None) -> dict[str, Any]:
        """Nothing: SGLang 0.5.9's OpenAI endpoints return no speculative stats
        whatever the request asks. Use :meth:`native_generate_body` for them."""
        return {}

    def native_generate_body(
        self,
        *,
        prompt: str,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = False,
        stream: bool = True,
    ) -> dict[str, Any]:
        """Body for ``POST /generate``. Streamed, each ``data:`` line is
        ``{"text", "output_ids", "meta_info"}`` where ``text``, ``output_ids`` and
        ``meta_info.completion_tokens`` are cumulative (``output_ids`` holds only
        the new ids if the server runs with ``--stream-output``); the chunk whose ``meta_info.finish_reason`` is set carries the
        speculative fields; the stream ends with ``data: [DONE]``."""
        params = {"max_new_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        return {"text": prompt, "sampling_params": params, "stream": stream}

    def request_spec(self, final_payload: dict[str, Any]) -> RequestSpec | None:
        """Stats from a finished ``/generate`` payload (or its ``meta_info``);
        None when it has no ``spec_verify_ct`` (no speculation, or an OpenAI
        payload of 0.5.9)."""
        meta = final_payload.get("meta_info", final_payload)
        if not isinstance(meta, dict):
            return None
        if "spec_verify_ct" not in meta and isinstance(final_payload.get("sglext"), dict):
            meta = final_payload["sglext"]  # later SGLang's OpenAI carrier
        verify = _number(meta.get("spec_verify_ct"))
        if not verify:
            return None
        completion = _number(meta.get("completion_tokens"))
        accepted = _first(meta, _ACCEPTED_KEYS)
        if accepted is None and completion is not None:
            # older SGLang reports only verify_ct: this counts the prefill token as accepted
            accepted = max(completion - verify, 0.0)
        length = _number(meta.get("spec_accept_length"))
        if length is None and completion is not None:
            length = completion / verify
        keep = (
            "completion_tokens",
            "spec_verify_ct",
            "spec_accept_length",
            "spec_accept_rate",
            *_ACCEPTED_KEYS,
            *_DRAFTED_KEYS,
            *_HISTOGRAM_KEYS,
        )
        return RequestSpec(
            verify_steps=verify,
            accepted_tokens=accepted,
            draft_tokens=_first(meta, _DRAFTED_KEYS),
            acceptance_length=length,
            raw={key: meta[key] for key in keep if key in meta},
        )

    # ------------------------------------------------------------------ counters

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
        """Per-request ``meta_info`` sums when any request carried them, else an
        estimate from the cumulative ``/server_info`` accept length. The
        ``sglang:spec_accept_length`` gauge is only recorded (last value), never
        differenced: it is a snapshot of the last decode-log interval."""
        gauge = _gauge_last_interval(metrics_after, served_name)
        counters = _from_requests(requests, spec) or _from_server_info(info_before, info_after, completion_tokens, spec)
        if counters is None or gauge is None:
            return counters
        return replace(counters, raw=counters.raw | {"gauge_spec_accept_length_last_interval": gauge})


def _ngram_option_args(spec: SpecConfig) -> list[str]:
    unknown = sorted(set(spec.options) - set(NGRAM_OPTIONS))
    if unknown:
        raise ConfigError(
            f"spec option(s) {', '.join(unknown)} have no SGLang mapping for ngram",
            hint=f"mapped: {', '.join(NGRAM_OPTIONS)}; pass other SGLang flags through the extra server arguments",
        )
    args: list[str] = []
    for key, flag in NGRAM_OPTIONS.items():
        if key in spec.options:
            args += [flag, str(spec.options[key])]
    return args


def _from_requests(requests: list[RequestSpec | None], spec: SpecConfig) -> SpecCounters | None:
    stats = [r for r in requests if r is not None and r.verify_steps and r.accepted_tokens is not None]
    if not stats:
        return None
    k = spec.num_speculative_tokens
    drafts = sum(r.verify_steps or 0.0 for r in stats)
    accepted = sum(r.accepted_tokens or 0.0 for r in stats)
    draft_tokens = sum(r.draft_tokens if r.draft_tokens is not None else (r.verify_steps or 0.0) * k for r in stats)
    per_position = _per_position(stats, k)
    exact = all(any(key in r.raw for key in _ACCEPTED_KEYS) for r in stats)
    how = (
        "spec_accept_token_num"
        if exact
        else "completion_tokens - spec_verify_ct (counts each prefill token as accepted)"
    )
    return SpecCounters(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        k=k,
        accepted_per_position=per_position,
        source=f"SGLang per-request meta_info from /generate ({len(stats)} of {len(requests)} requests): "
        f"drafts = spec_verify_ct, accepted = {how}",
        raw={
            "drafts": drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": accepted,
            "requests_with_stats": len(stats),
            "requests": len(requests),
            "accepted_per_position": list(per_position or []),
        },
    )


def _per_position(stats: list[RequestSpec], k: int) -> tuple[float, ...] | None:
    """Steps whose i-th draft was accepted, from the per-request histograms
    (``h[j]`` = verify steps that accepted exactly ``j`` drafts; a chain accepts a prefix)."""
    totals = [0.0] * k
    for r in stats:
        hist = next((r.raw[key] for key in _HISTOGRAM_KEYS if isinstance(r.raw.get(key), list)), None)
        if hist is None:
            return None
        for j, count in enumerate(hist):
            for i in range(min(j, k)):
                totals[i] += count
    return tuple(totals)


def _from_server_info(
    info_before: dict[str, Any] | None,
    info_after: dict[str, Any] | None,
    completion_tokens: int,
    spec: SpecConfig,
) -> SpecCounters | None:
    length = _avg_accept_length(info_after)
    if length is None or length <= 0 or completion_tokens <= 0:
        return None
    before = _avg_accept_length(info_before)
    k = spec.num_speculative_tokens
    drafts = completion_tokens / length
    accepted = completion_tokens - drafts
    scope = (
        f"includes traffic before this run (it read {before:.3f} before the run)"
        if before is not None
        else "no value before the run, so it covers this run (and any warmup after the last /flush_cache)"
    )
    return SpecCounters(
        drafts=drafts,
        draft_tokens=drafts * k,
        accepted_tokens=accepted,
        k=k,
        accepted_per_position=None,
        source="SGLang /server_info internal_states[0].avg_spec_accept_length: cumulative since server start "
        f"or the last /flush_cache, dp rank 0 only, folded in every decode-log interval; {scope}; "
        "drafts estimated as completion_tokens / accept length; no per-position data",
        raw={
            "avg_spec_accept_length_after": length,
            "avg_spec_accept_length_before": before,
            "estimated": True,
            "drafts": drafts,
            "draft_tokens": drafts * k,
            "accepted_tokens": accepted,
        },
    )


def _avg_accept_length(info: dict[str, Any] | None) -> float | None:
    states = (info or {}).get("internal_states") or []
    if not states or not isinstance(states[0], dict):
        return None
    return _number(states[0].get("avg_spec_accept_length"))


def _gauge_last_interval(text: str | None, served_name: str) -> float | None:
    """Last value of the gauge for this model on tp rank 0 (informational only)."""
    if not text:
        return None
    for sample in parse(text).samples:
        labels = dict(sample.labels)
        if (
            sample.name == GAUGE
            and labels.get("model_name", served_name) == served_name
            and labels.get("tp_rank", "0") == "0"
        ):
            return float(sample.value)
    return None


def _first(meta: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = _number(meta.get(key))
        if value is not None:
            return value
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


ENGINE = SGLangEngine()
