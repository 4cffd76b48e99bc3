"""Where vLLM's compiled path loses EAGLE-3 acceptance, replayed from REAL captures of one H100
(capture/, SOURCES.md): the summaries ``specrig study run study.toml`` wrote through the kit for
one drafter served at k=1 and k=3 on the story's prompts under each mode, the acceptance check's
run, and one bench with compilation off (``-O0``). The figures the README quotes are re-derived
here from the raw captures with today's code."""

from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace

import pytest

from specrig.lab.eager import acceptance_checks
from specrig.lab.results import RunSummary
from specrig.study.record import StudyState

CAPTURE = Path(__file__).resolve().parent / "capture"
MODES = ("story-eager", "story-compile-off", "story-none", "story-piecewise", "story-full-and-piecewise", "story-full")


def captured(name: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((CAPTURE / f"{name}.summary.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunSummary]:
    return {n: captured(n) for n in (*MODES, "check")}


def pairing(s: RunSummary, config: str, concurrency: int):
    return next(p for p in s.pairings if p.config == config and p.point.concurrency == concurrency)


def rate(s: RunSummary, k: int = 1, concurrency: int = 1) -> float:
    p = pairing(s, f"eagle3-trained-k{k}", concurrency)
    assert p.acceptance_rate is not None
    return p.acceptance_rate


def test_one_drafter_one_workload_counters_their_own(runs: dict[str, RunSummary]) -> None:
    drafters = {c.drafter for s in runs.values() for c in s.configs if c.drafter}
    assert len(drafters) == 1  # the study's drafter step, served by every bench
    for s in runs.values():
        assert s.engine == "vllm" and s.workload.dataset == "story" and s.workload.max_tokens == 512
        assert all(m.server_generation_tokens == m.completion_tokens for m in s.measurements)


def test_compilation_not_the_cuda_graphs_loses_acceptance(runs: dict[str, RunSummary]) -> None:
    eager, off = rate(runs["story-eager"]), rate(runs["story-compile-off"])
    none, piecewise = rate(runs["story-none"]), rate(runs["story-piecewise"])
    default = rate(runs["story-full-and-piecewise"])
    assert eager == pytest.approx(off, abs=1e-9)  # -O0 (graphs off, compilation off) accepts as eager does
    assert none == pytest.approx(piecewise, abs=1e-9)  # compiled, with and without piecewise graphs: alike
    assert eager - none > 0.05  # compilation alone costs the points
    assert default <= piecewise  # vLLM's default mode accepts least of the lossless modes
    for mode in ("story-eager", "story-none", "story-piecewise", "story-full-and-piecewise"):
        for p in runs[mode].pairings:  # each mode against its own baseline: token-identical
            assert p.lossless is not None and p.lossless.identical == p.lossless.compared, (mode, p.config)


def test_full_cuda_graphs_change_the_answers(runs: dict[str, RunSummary]) -> None:
    """``cudagraph_mode: FULL`` with EAGLE-3: answers differ from the same mode's plain decode,
    and at least one divergence per configuration is a real loss, not a near-tie."""
    for p in runs["story-full"].pairings:
        ll = p.lossless
        assert ll is not None and ll.identical < ll.compared
        assert any(d.target is not None and d.target.verdict == "real loss" for d in ll.divergences)


def test_the_acceptance_check_replays(runs: dict[str, RunSummary]) -> None:
    s = runs["check"]
    [recorded] = s.acceptance_checks
    twin = next(c for c in s.configs if c.name == recorded.eager_config)
    planned = [SimpleNamespace(id=twin.id, server_args=recorded.eager_args)]  # the twin's own flag
    [again] = acceptance_checks(s.configs, s.measurements, s.workload.points, planned)
    assert again.gap == pytest.approx(recorded.gap) and again.verdict == recorded.verdict == "loses"
    assert (again.prompts, again.same_text) == (5, 0)  # the eager twin's answers differ on every prompt
    assert "the rates count different text" in again.line
    assert recorded.gap_high is not None and recorded.gap_high < 0
    # the twin's rate is eager's: the same drafter on the same prompts, whichever bench ran it
    assert recorded.eager_rate == pytest.approx(rate(runs["story-eager"]), abs=1e-9)
    assert "the compiled path loses acceptance" in pairing(s, "eagle3-trained-k1", 1).diagnosis


def test_the_study_was_stopped_and_resumed_on_the_host() -> None:
    """The run's own record, read by today's model: every step to ``check`` done once, exit 0; the
    second console (after ``study stop`` and a rerun) skipped the finished steps and redid the one stopped."""
    state = StudyState.model_validate_json((CAPTURE / "state.json").read_text())
    done = [n for n, r in state.steps.items() if r.status == "done"]
    modes = ("eager", "full-and-piecewise", "piecewise", "none", "full")
    assert done == ["drafter", *(f"story-{m}" for m in modes), "check"]  # the study file's order
    assert all(state.steps[n].exit_code == 0 for n in done)
    first, second = sorted(CAPTURE.glob("study-*.console.log"))
    assert "[4/12] story-piecewise" in first.read_text() and "interrupted (SIGTERM)" in first.read_text()
    again = second.read_text()
    skipped = [n for n in ("drafter", "story-eager", "story-full-and-piecewise") if f"{n}: unchanged since" in again]
    assert len(skipped) == 3 and "story-piecewise: done in" in again
