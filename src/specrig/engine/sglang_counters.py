"""SGLang's speculative-decoding counts, from what it reports (engine room): the
per-request ``meta_info`` of ``/generate``, the Prometheus counters, the cumulative
average in ``/server_info``. The names are SGLang 0.5.17's, with 0.5.9's read too
(see :mod:`specrig.engine.sglang` and docs/sglang.md)."""

from __future__ import annotations

from typing import Any

from specrig.engine.base import RequestSpec, SpecCounters
from specrig.engine.metrics import checked_delta, parse
from specrig.recipe.schema import SpecConfig

GAUGE = "sglang:spec_accept_length"
VERIFY_COUNTER = "sglang:spec_verify_calls_total"
TOKENS_COUNTER = "sglang:generation_tokens_total"

_ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_DRAFTED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


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
    named = sorted({next(key for key in _ACCEPTED_KEYS if key in r.raw) for r in stats} if exact else set())
    how = " / ".join(named) if exact else "completion_tokens - spec_verify_ct (counts each prefill token as accepted)"
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


def _counter_deltas(before: str | None, after: str | None, served_name: str) -> tuple[float | None, float | None]:
    """Deltas of the verify-step and generated-token counters for this model (None: absent,
    or no measurement because a counter went backwards or is NaN)."""
    if not before or not after:
        return None, None
    b, a = parse(before), parse(after)
    out = []
    for name in (VERIFY_COUNTER, TOKENS_COUNTER):
        d = checked_delta(b, a, name, {"model_name": served_name})
        out.append(d.value if d.ok else None)
    return out[0], out[1]


def _from_counters(
    verify: float | None, tokens: float | None, requests: list[RequestSpec | None], spec: SpecConfig
) -> SpecCounters | None:
    """From ``sglang:spec_verify_calls_total`` and ``sglang:generation_tokens_total``: each
    finished request's tokens are its prefill token plus, per verify step, the accepted drafts
    and one more, so accepted = tokens - verify steps - requests. Drafts cut off by
    ``max_tokens`` in a request's last step are not in the token count: a lower bound."""
    if not verify or tokens is None or not requests:
        return None
    k = spec.num_speculative_tokens
    n = len(requests)
    accepted = max(tokens - verify - n, 0.0)
    return SpecCounters(
        drafts=verify,
        draft_tokens=verify * k,
        accepted_tokens=accepted,
        k=k,
        accepted_per_position=None,
        source=f"SGLang Prometheus counters for this model: drafts = delta of {VERIFY_COUNTER}, accepted = "
        f"delta of {TOKENS_COUNTER} - drafts - {n} requests (each request's prefill token); drafts past "
        "max_tokens in a request's last step are not counted (a lower bound); no per-position data",
        raw={
            "drafts": verify,
            "draft_tokens": verify * k,
            "accepted_tokens": accepted,
            "requests": n,
            "estimated": True,
        },
    )


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
