"""Speculative-decoding statistics and theory, checked on the original story's numbers."""

from __future__ import annotations

import pytest

from specrig.core.counters import SpecCounters
from specrig.specdec.theory import break_even, compute, diagnose, offline_gap, solve_a_from_mean, tokens_per_step


def test_theory() -> None:
    assert tokens_per_step(0.0, 5) == 1.0
    assert tokens_per_step(1.0, 5) == 6.0
    assert tokens_per_step(0.5, 2) == pytest.approx(1.75)
    a = solve_a_from_mean(0.75, 3)
    assert a + a**2 + a**3 == pytest.approx(0.75, abs=1e-9)
    assert break_even(7.0, 5) is None  # more than k+1 tokens per step would be needed
    assert tokens_per_step(break_even(2.0, 4), 4) == pytest.approx(2.0)


def test_story_numbers() -> None:
    """Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000: 1,127 of 7,530 drafted tokens accepted
    over 1,506 drafts at k=5; 54.6 tok/s against an 82.5 tok/s baseline."""
    s = compute(
        SpecCounters(1506, 7530, 1127, 5),
        tpot_spec_s=1 / 54.6,
        tpot_base_s=1 / 82.5,
        decode_tok_s_spec=54.6,
        decode_tok_s_base=82.5,
    )
    assert s.acceptance_rate == pytest.approx(0.1497, abs=1e-4)
    # worked by hand: 1,506 steps emitted 1,127 accepted + 1,506 bonus tokens = 2,633, i.e. 1.7483 a step
    assert s.mean_acceptance_length == pytest.approx(1.7483, abs=1e-4)
    assert s.measured_speedup == pytest.approx(0.6618, abs=1e-4)
    # step cost from the time spent: 2,633 tokens at 54.6 tok/s took 48.223 s, so a step took
    # 48.223 / 1,506 = 32.02 ms, against 1 / 82.5 = 12.12 ms a plain token: 2.6417 plain tokens a step
    assert s.step_cost == pytest.approx(2.6417, abs=1e-4)
    # and the two views agree: what a step costs x how much faster it went = what a step emits
    assert s.step_cost * s.measured_speedup == pytest.approx(s.mean_acceptance_length)
    # break-even: 1 + a + a^2 + ... + a^5 tokens a step must reach 2.6417; at a = 0.65 the sum is 2.6417
    assert s.break_even_a == pytest.approx(0.650, abs=1e-3)
    assert sum(s.break_even_a**i for i in range(6)) == pytest.approx(s.step_cost, abs=1e-6)
    line = diagnose(s)
    assert line.startswith("acceptance 15% at k=5 → 1.75 tokens per step")
    assert "0.66x" in line and "break-even needs a ≥ 0.65" in line and "the drafter costs more than it saves" in line


def test_a_speedup_of_per_request_rates_against_mean_tpots() -> None:
    """Two speculative requests at TPOT 1 and 3 ms (one accepts well, one not), two baseline requests
    at 2 ms: the mean TPOTs say 1.00x (a step of 2 tokens costs 2x), the mean per-request rates
    (0.667 against 0.5 tokens a ms) say 1.33x. The note names the gap and its cause."""
    spec, base = (1e-3, 3e-3), (2e-3, 2e-3)
    mean = sum(spec) / 2
    rates = sum(1 / t for t in spec) / 2
    s = compute(
        SpecCounters(100, 300, 100, 3),  # 2 tokens a step
        tpot_spec_s=mean,
        tpot_base_s=2e-3,
        decode_tok_s_spec=rates,
        decode_tok_s_base=1 / base[0],
    )
    assert s.step_cost == pytest.approx(2.0) and s.mean_acceptance_length / s.step_cost == pytest.approx(1.0)
    assert s.measured_speedup == pytest.approx(4 / 3) and s.rate_spread == pytest.approx(4 / 3)
    assert s.measured_speedup == pytest.approx(s.rate_spread * s.mean_acceptance_length / s.step_cost)
    line = diagnose(s)
    assert "speculation pays: 1.33x (2.00 tokens a step over that cost give 1.00x by mean TPOT" in line
    assert "is 33% above: the speculative requests' rates spread wider" in line
    even = compute(
        SpecCounters(100, 300, 100, 3), tpot_spec_s=1e-3, tpot_base_s=1e-3, decode_tok_s_spec=1e3, decode_tok_s_base=1e3
    )
    assert even.rate_spread == pytest.approx(1.0) and "mean TPOT" not in diagnose(even)  # alike: no note


def test_per_position() -> None:
    s = compute(SpecCounters(200, 800, 300, 4, (150, 90, 45, 15)))
    assert s.per_position == (0.75, 0.45, 0.225, 0.075)
    assert s.per_position_conditional == pytest.approx((0.75, 0.6, 0.5, 1 / 3))
    assert s.a == 0.75 and s.theoretical_tokens_per_step == pytest.approx(tokens_per_step(0.75, 4))
    assert "no paired baseline" in diagnose(s)


def test_oracle_and_no_drafts() -> None:
    s = compute(
        SpecCounters(10, 40, 40, 4, (10, 10, 10, 10)),
        tpot_spec_s=0.2,
        tpot_base_s=0.05,
        decode_tok_s_spec=5,
        decode_tok_s_base=20,
    )
    assert s.acceptance_rate == 1.0 and s.mean_acceptance_length == 5.0
    assert "acceptance 100%" in diagnose(s)
    empty = compute(SpecCounters(0, 0, 0, 3))
    assert empty.acceptance_rate is None and "no speculative steps" in diagnose(empty)
    # drafts but nothing accepted: a = 0 exactly, one token per step, a verdict that names the drafter
    zero = compute(
        SpecCounters(5, 15, 0, 3, (0, 0, 0)),
        tpot_spec_s=0.1,
        tpot_base_s=0.05,
        decode_tok_s_spec=10,
        decode_tok_s_base=20,
    )
    assert (zero.a, zero.acceptance_rate, zero.mean_acceptance_length) == (0.0, 0.0, 1.0)
    assert zero.theoretical_tokens_per_step == 1.0 and zero.measured_speedup == 0.5
    assert zero.step_cost == pytest.approx(2.0) and zero.break_even_a == pytest.approx(break_even(2.0, 3))
    assert "the drafter costs more than it saves" in diagnose(zero)


def test_best_k_from_measured_cost() -> None:
    """a = 0.8 with a cheap drafter (step cost 1.2 at k=2): a longer draft pays more."""
    s = compute(
        SpecCounters(100, 200, 144, 2, (80, 64)),
        tpot_spec_s=1.2 / 2.44,
        tpot_base_s=1.0,
        decode_tok_s_spec=2.44 / 1.2,
        decode_tok_s_base=1.0,
    )
    assert s.a == 0.8 and s.step_cost == pytest.approx(1.2)
    c = 0.2 / 2  # per-draft-token cost
    best = max(range(1, 9), key=lambda k: tokens_per_step(0.8, k) / (1 + k * c))
    assert s.best_k == best == 6
    assert s.best_k_predicted_speedup == pytest.approx(tokens_per_step(0.8, 6) / 1.6)
    assert "k=6 may do better" in diagnose(s)


def test_offline_vs_online_acceptance() -> None:
    assert offline_gap(0.42, 0.45, 3000) is None  # within noise: serving matches the drafter
    assert offline_gap(0.40, 0.45, 30000) is None  # other prompts: 5 points allowed
    assert offline_gap(0.40, 0.45, 30000, matched=True) is not None  # the bench's own prompts: 3
    serving = offline_gap(0.05, 0.40, 3000)
    assert serving and "serving side is wrong" in serving and "aux layer ids" in serving
    assert "does not represent" in (offline_gap(0.60, 0.30, 3000) or "")
    s = compute(SpecCounters(1000, 3000, 150, 3, (120, 25, 5)))
    assert "serving side is wrong" in diagnose(s, offline_acceptance=0.40)
    assert "serving is faithful" in diagnose(s, offline_acceptance=0.06)


def test_a_shortfall_against_offline_names_the_engines_eager_rerun() -> None:
    """A server that ran compiled (no eager flag in its argv) and accepts far less than the drafter offline:
    the diagnosis names the engine's mode as the first suspect with the one-flag rerun; an eager server's
    shortfall points at the rest of serving instead."""
    from specrig.engine import get_engine

    vllm, sglang = get_engine("vllm"), get_engine("sglang")
    assert vllm.eager_flag(["vllm", "serve", "M", "--max-num-seqs", "16"]) == "--enforce-eager"
    assert vllm.eager_flag(["vllm", "serve", "M", "--enforce-eager"]) is None
    assert sglang.eager_flag(["python", "-m", "sglang.launch_server"]) == "--disable-cuda-graph"
    assert sglang.eager_flag(["python", "-m", "sglang.launch_server", "--disable-cuda-graph"]) is None
    s = compute(SpecCounters(1000, 3000, 150, 3, (120, 25, 5)))
    compiled = diagnose(s, offline_acceptance=0.40, eager_flag="--enforce-eager")
    assert "--engine-arg=--enforce-eager" in compiled and "compiled" in compiled
    eager = diagnose(s, offline_acceptance=0.40, eager_flag=None)
    assert "--engine-arg" not in eager and "serving side is wrong" in eager
    # within noise, no rerun is suggested whatever the mode
    assert "--engine-arg" not in diagnose(s, offline_acceptance=0.06, eager_flag="--enforce-eager")
