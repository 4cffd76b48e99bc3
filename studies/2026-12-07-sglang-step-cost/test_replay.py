"""What an EAGLE-3 step costs SGLang 0.5.17 by attention backend and overlap scheduling, replayed from
REAL captures (capture/, SOURCES.md): the summaries ``specrig study run study.toml`` wrote through
the kit for a random EAGLE-3 head at k=3 at SGLang's defaults (fa3) and with triton attention on one
H100, and with the overlap scheduler off on one H200. The figures the README quotes are re-derived
here from the raw captures with today's code."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from specrig.lab.results import RunSummary
from specrig.lab.summary import pair

CAPTURE = Path(__file__).resolve().parent / "capture"
STEPS = {  # step: (the attention backend, overlap scheduling off, the GPU)
    "sglang-defaults": ("fa3", False, "NVIDIA H100 80GB HBM3"),
    "sglang-triton": ("triton", False, "NVIDIA H100 80GB HBM3"),
    "sglang-no-overlap": ("fa3", True, "NVIDIA H200"),
}
SPEC = "eagle3-random-k3"


def captured(step: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((CAPTURE / f"{step}.summary.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunSummary]:
    return {step: captured(step) for step in STEPS}


def repaired(s: RunSummary, concurrency: int):
    """The pairing at ``concurrency``, paired again from the raw measurements by today's code."""
    runs = [m for m in s.measurements if m.point.concurrency == concurrency]
    cfg = s.config(SPEC)
    assert cfg is not None
    spec = [m for m in runs if m.config == SPEC]
    return pair(cfg, spec, [m for m in runs if m.config == "baseline"], engine=s.engine)


def test_each_step_ran_the_backend_it_names(runs: dict[str, RunSummary]) -> None:
    for step, (backend, no_overlap, gpu) in STEPS.items():
        s = runs[step]
        assert s.engine == "sglang" and s.workload.dataset == "story" and s.workload.max_tokens == 512
        assert [g.name for g in s.host.gpus] == [gpu]
        assert all(m.server_generation_tokens == m.completion_tokens for m in s.measurements)  # counters their own
        for server in ("baseline", SPEC):
            log = gzip.decompress((CAPTURE / f"{step}.server-{server}.log.gz").read_bytes()).decode()
            assert set(re.findall(r"attention_backend='(\w+)'", log)) == {backend}, (step, server)
            assert set(re.findall(r"sampling_backend='(\w+)'", log)) == {"flashinfer"}
            assert set(re.findall(r"disable_overlap_schedule=(\w+)", log)) == {str(no_overlap)}, (step, server)


def test_the_random_head_verifies_every_step_and_keeps_one_token(runs: dict[str, RunSummary]) -> None:
    for s in runs.values():
        for p in s.pairings:
            assert p.k == 3 and p.acceptance_rate == 0 and p.mean_acceptance_length == 1


def test_the_step_costs_replay(runs: dict[str, RunSummary]) -> None:
    """One stream: a step costs 2.46x a plain one on either backend (H100), 2.57x with the overlap
    scheduler off (H200); eight streams: 3.27x on fa3, 2.46x on triton, 2.67x without overlap. The
    speedup is the inverse (nothing is accepted)."""
    want = {("sglang-defaults", 1): 2.46, ("sglang-defaults", 8): 3.27, ("sglang-triton", 1): 2.46}
    want |= {("sglang-triton", 8): 2.46, ("sglang-no-overlap", 1): 2.57, ("sglang-no-overlap", 8): 2.67}
    for (step, c), cost in want.items():
        recorded = next(p for p in runs[step].pairings if p.point.concurrency == c)
        again = repaired(runs[step], c)
        assert again.step_cost == pytest.approx(recorded.step_cost, rel=1e-9)
        assert round(again.step_cost, 2) == cost, (step, c)
        assert again.speedup is not None and again.speedup.mean == pytest.approx(1 / cost, rel=0.02)


def test_fa3_keeps_the_answers_with_or_without_overlap_and_triton_parts_on_near_ties(
    runs: dict[str, RunSummary],
) -> None:
    """Compared again from the captured answers; the verdicts are the ones the target gave at the
    bench (its logits at each divergence are not in the capture)."""
    for c in (1, 8):
        for step in ("sglang-defaults", "sglang-no-overlap"):
            fa3 = repaired(runs[step], c).lossless
            assert fa3 is not None and fa3.identical == fa3.compared  # token-identical to its baseline
        triton = repaired(runs["sglang-triton"], c).lossless
        assert triton is not None and triton.identical < triton.compared
        recorded = next(p for p in runs["sglang-triton"].pairings if p.point.concurrency == c).lossless
        assert recorded is not None and len(recorded.divergences) == len(triton.divergences)
        assert all(d.target is not None and d.target.verdict == "near-tie" for d in recorded.divergences)
