"""Speculative-decoding statistics and theory. Pure functions, no I/O.

From one run's counters (deltas around the run):

* acceptance rate            = accepted / draft_tokens
* mean acceptance length     = 1 + accepted / drafts   (tokens emitted per verification step)
* per-position acceptance    p_i = accepted_at_position_i / drafts        (unconditional)
                             c_i = p_i / p_(i-1), c_0 = p_0               (conditional)
* per-token acceptance a     = p_0 when positions are known (how often the first guess is
                               right); else the a whose i.i.d. chain gives the measured mean
* theoretical tokens / step  T(a, k) = (1 - a^(k+1)) / (1 - a)   (Leviathan et al., 2023)

With a paired baseline from the same invocation:

* step cost r        = (time per verification step) / (baseline time per token)
                     = TPOT_spec * mean_acceptance_length / TPOT_base
* measured speedup   = decode tok/s with speculation / without
* predicted speedup  = T(a, k) / r
* break-even a*      : T(a*, k) = r  (none when r > k + 1: no acceptance can pay)
* best k             : maximise T(a, k') / (1 + k' c) with the per-draft-token cost
                       c = (r - 1) / k measured at this k
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specrig.core.counters import SpecCounters

__all__ = [
    "SpecStats",
    "compute",
    "tokens_per_step",
    "solve_a_from_mean",
    "break_even",
    "diagnose",
    "offline_gap",
    "SpecCounters",
]


def tokens_per_step(a: float, k: int) -> float:
    """Expected tokens per verification step with k drafts, i.i.d. acceptance a."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def _solve(f: Any, target: float) -> float:
    """a in [0, 1] with f(a) = target, f increasing (bisection)."""
    lo, hi = 0.0, 1.0
    if target <= f(lo):
        return 0.0
    if target >= f(hi):
        return 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def solve_a_from_mean(mean_accepted_per_step: float, k: int) -> float:
    """The a for which an i.i.d. chain of k drafts accepts this many tokens per step on average."""
    return _solve(lambda a: tokens_per_step(a, k) - 1.0, mean_accepted_per_step)


def break_even(step_cost: float, k: int) -> float | None:
    """Smallest a for which speculation is not slower than plain decoding (None: impossible)."""
    if step_cost > k + 1:
        return None
    return _solve(lambda a: tokens_per_step(a, k), step_cost)


@dataclass(frozen=True)
class SpecStats:
    k: int
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: tuple[float, ...] | None
    per_position_conditional: tuple[float, ...] | None
    a: float | None
    a_source: str
    theoretical_tokens_per_step: float | None
    step_cost: float | None = None
    measured_speedup: float | None = None
    predicted_speedup: float | None = None
    break_even_a: float | None = None
    best_k: int | None = None
    best_k_predicted_speedup: float | None = None
    source: str = ""

    @property
    def rate_spread(self) -> float | None:
        """The speedup (a mean of per-request rates) over what the mean length and step cost give
        (a ratio of mean TPOTs), i.e. mean(1/TPOT) x mean(TPOT) of the speculative run over the
        baseline's. 1 when every request decodes alike; above 1 when speculative requests spread
        wider (each has its own acceptance), whatever the engine does."""
        if not (self.measured_speedup and self.step_cost and self.mean_acceptance_length):
            return None
        return self.measured_speedup * self.step_cost / self.mean_acceptance_length

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("per_position", "per_position_conditional"):
            d[key] = list(d[key]) if d[key] is not None else None
        return d


def compute(
    counters: SpecCounters,
    *,
    tpot_spec_s: float | None = None,
    tpot_base_s: float | None = None,
    decode_tok_s_spec: float | None = None,
    decode_tok_s_base: float | None = None,
) -> SpecStats:
    k = counters.k
    drafts, draft_tokens, accepted = counters.drafts, counters.draft_tokens, counters.accepted_tokens
    rate = accepted / draft_tokens if draft_tokens else None
    mal = 1.0 + accepted / drafts if drafts else None
    per_pos = cond = None
    if counters.accepted_per_position and drafts:
        per_pos = tuple(x / drafts for x in counters.accepted_per_position)
        cond_list = []
        prev = 1.0
        for p in per_pos:
            cond_list.append(p / prev if prev > 0 else 0.0)
            prev = p
        cond = tuple(cond_list)
    if per_pos:
        a, a_source = per_pos[0], "first-position acceptance p_0"
    elif mal is not None:
        a, a_source = solve_a_from_mean(mal - 1.0, k), "i.i.d. fit to the mean acceptance length"
    else:
        a, a_source = None, "no drafts in the run"
    theory = tokens_per_step(a, k) if a is not None else None

    step_cost = measured = predicted = be = None
    best_k = best_pred = None
    if tpot_spec_s and tpot_base_s and mal:
        step_cost = tpot_spec_s * mal / tpot_base_s
        predicted = theory / step_cost if theory is not None else None
        be = break_even(step_cost, k)
        if a is not None:
            c = max(step_cost - 1.0, 0.0) / k
            options = {kk: tokens_per_step(a, kk) / (1.0 + kk * c) for kk in range(1, 9)}
            best_k = max(options, key=lambda kk: options[kk])
            best_pred = options[best_k]
    if decode_tok_s_spec and decode_tok_s_base:
        measured = decode_tok_s_spec / decode_tok_s_base
    return SpecStats(
        k=k,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=rate,
        mean_acceptance_length=mal,
        per_position=per_pos,
        per_position_conditional=cond,
        a=a,
        a_source=a_source,
        theoretical_tokens_per_step=theory,
        step_cost=step_cost,
        measured_speedup=measured,
        predicted_speedup=predicted,
        break_even_a=be,
        best_k=best_k,
        best_k_predicted_speedup=best_pred,
        source=counters.source,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x < 0.995 or x >= 1 else f"{100 * x:.1f}%"


def offline_gap(
    online: float, offline: float, draft_tokens: float, *, matched: bool = False, eager_flag: str | None = None
) -> str | None:
    """Which side a gap between the drafter's offline (teacher-forced) acceptance and
    the engine's online acceptance points at; None when they agree within noise.

    Noise: two binomial standard errors of the online rate over its draft tokens,
    plus 3 points when the offline figure is on the bench's own prompts (transformers
    and the engine round differently, so long greedy answers drift apart) or 5 points
    when it is on other prompts (held-out ShareGPT)."""
    se = (max(online * (1 - online), 0.0) / draft_tokens) ** 0.5 if draft_tokens else 1.0
    allowed = (0.03 if matched else 0.05) + 2 * se
    gap = offline - online
    if abs(gap) <= allowed:
        return None
    if gap > 0 and eager_flag:
        return (
            f"online acceptance {_pct(online)} is far below the drafter's offline {_pct(offline)} "
            f"(gap {100 * gap:.0f} points, noise ±{100 * allowed:.0f}): the serving side loses it, not the drafter; "
            f"first suspect the engine's compiled / CUDA-graph path: rerun this configuration with "
            f"--engine-arg={eager_flag} (the same prompts); if acceptance comes back, the engine's mode is at "
            "fault, else check aux layer ids, norms, vocabulary map, chat template, dtype "
            "(`specrig drafter-check DRAFTER`)"
        )
    if gap > 0:
        return (
            f"online acceptance {_pct(online)} is far below the drafter's offline {_pct(offline)} "
            f"(gap {100 * gap:.0f} points, noise ±{100 * allowed:.0f}): the serving side is wrong, not the drafter "
            "(check aux layer ids, norms, vocabulary map, chat template, dtype: `specrig drafter-check DRAFTER`)"
        )
    return (
        f"online acceptance {_pct(online)} is above the drafter's offline {_pct(offline)}: "
        "the offline evaluation does not represent the bench's prompts"
    )


def diagnose(
    s: SpecStats,
    offline_acceptance: float | None = None,
    *,
    matched: bool = False,
    offline_unbound: str | None = None,
    drafter_fault: str | None = None,
    eager_flag: str | None = None,
) -> str:
    """One plain-words line derived from the numbers.

    ``offline_acceptance``: the drafter's teacher-forced acceptance rate, only when it was
    computed for the very files being served (``specrig.model.offline.offline_eval_status``
    checks that); ``matched``: measured on the bench's own prompts; ``offline_unbound``: why
    there is no such figure (missing, or computed for other bytes); ``drafter_fault``: what
    is wrong with the drafter folder itself (its vocabulary map, files changed since it was
    made). Serving is blamed only against a bound offline figure, and never while the
    drafter itself is found faulty. ``eager_flag``: the engine flag that would turn off the compiled path
    the server ran with (None: it ran eager), named as the rerun when online falls short of offline."""
    if s.acceptance_rate is None or s.mean_acceptance_length is None:
        return "no speculative steps were counted: is speculation enabled on the server?"
    line = _diagnose(s)
    if drafter_fault:
        return line + f"; the drafter is at fault, not serving: {drafter_fault}"
    if offline_acceptance is not None:
        side = offline_gap(
            s.acceptance_rate, offline_acceptance, s.draft_tokens, matched=matched, eager_flag=eager_flag
        )
        if side is None:
            return line + (
                f"; online matches the drafter's offline acceptance ({_pct(offline_acceptance)}"
                f"{' on these prompts' if matched else ''}): "
                "serving is faithful, any shortfall is the drafter's"
            )
        return line + "; " + side
    if offline_unbound:
        return line + (
            f"; no offline figure for the served drafter to tell serving from drafter ({offline_unbound}; "
            "`specrig drafter-eval DRAFTER` scores these bytes)"
        )
    return line


def _spread_note(s: SpecStats) -> str:
    """Why the speedup differs from mean length / step cost, where it does by over 3%."""
    spread = s.rate_spread
    if spread is None or abs(spread - 1) <= 0.03:
        return ""
    assert s.mean_acceptance_length and s.step_cost  # rate_spread is derived from both
    side, wider = ("above", "wider") if spread > 1 else ("below", "narrower")
    return (
        f" ({s.mean_acceptance_length:.2f} tokens a step over that cost give "
        f"{s.mean_acceptance_length / s.step_cost:.2f}x by mean TPOT; the speedup, a mean of per-request "
        f"rates, is {100 * abs(spread - 1):.0f}% {side}: the speculative requests' rates spread {wider}, "
        "each with its own acceptance)"
    )


def _diagnose(s: SpecStats) -> str:
    assert s.acceptance_rate is not None and s.mean_acceptance_length is not None
    head = f"acceptance {_pct(s.acceptance_rate)} at k={s.k} → {s.mean_acceptance_length:.2f} tokens per step"
    if s.theoretical_tokens_per_step is not None and s.per_position:
        head += f" (an i.i.d. drafter with a={s.a:.2f} would give {s.theoretical_tokens_per_step:.2f})"
    if s.step_cost is None or s.measured_speedup is None:
        return head + "; no paired baseline, so no speedup verdict"
    cost = f"a step costs {s.step_cost:.1f}x a plain decode step"
    if s.measured_speedup >= 1.0:
        verdict = f"; {cost}, so speculation pays: {s.measured_speedup:.2f}x{_spread_note(s)}"
        if (
            s.best_k
            and s.best_k != s.k
            and s.best_k_predicted_speedup
            and s.best_k_predicted_speedup > s.measured_speedup * 1.05
        ):
            verdict += f"; k={s.best_k} may do better (predicted {s.best_k_predicted_speedup:.2f}x)"
        return head + verdict
    verdict = f"; {cost}, so it runs at {s.measured_speedup:.2f}x of the baseline{_spread_note(s)}"
    if s.break_even_a is None:
        verdict += (
            f"; even 100% acceptance (k+1 = {s.k + 1} tokens per step) cannot pay for that step cost: "
            "drafting plus verification is too expensive on this host"
        )
        return head + verdict + _k_advice(s)
    verdict += f"; break-even needs a ≥ {s.break_even_a:.2f}"
    if s.a is not None:
        verdict += f", measured a ≈ {s.a:.2f}"
    if s.acceptance_rate >= 0.9:
        verdict += "; acceptance is not the problem: the drafter or verification costs too much"
    elif s.acceptance_rate < 0.3:
        verdict += "; the drafter costs more than it saves" + _k_advice(s)
        verdict += (
            "; check the drafter (trained for this target? aux-layer convention: `specrig drafter-check DRAFTER`)"
        )
    else:
        verdict += _k_advice(s)
    return head + verdict


def _k_advice(s: SpecStats) -> str:
    """Suggest another k only when the cost model says it would pay."""
    if not s.best_k or s.best_k_predicted_speedup is None:
        return ""
    if s.best_k != s.k and s.best_k_predicted_speedup >= 1.0:
        return f"; try k={s.best_k} (predicted {s.best_k_predicted_speedup:.2f}x)"
    if s.best_k_predicted_speedup < 1.0:
        return f"; no k pays at this acceptance and cost (best: k={s.best_k} at {s.best_k_predicted_speedup:.2f}x)"
    return ""
