"""SGLang 0.5.17 served on specrig's own sglang-kernel 0.4.5 on an H200, from the documented lease job
(its steps: studies/2026-12-03-sglang-kernel-build/study.toml): the real summaries (tests/fixtures/h200-sglang-serve,
SOURCES.md) replayed through the current summary model and report. What they show: with real
acceptance (draft_model) the built wheel accepts exactly what the repacked published one did on
2026-12-02, and two runs of one wheel minutes apart differ by more than a wheel could explain."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from rich.console import Console

from specrig.lab.results import RunSummary
from specrig.report.compare import write_comparison
from specrig.report.render import write_report

FIX = Path(__file__).parent / "fixtures" / "h200-sglang-serve"
BUILT = "sglang-kernel 0.4.5+sm90.cu130.torch2110 sha256:55f9090638ab"


def _summary(name: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((FIX / f"{name}.summary.json.gz").read_bytes()))


def _pairing(s: RunSummary, config: str, level: int):
    return next(p for p in s.pairings if p.config == config and p.point.concurrency == level)


def test_the_built_wheel_accepts_what_the_published_one_did() -> None:
    s = _summary("sgl-built-draft")
    assert s.engine == "sglang" and s.host.gpus[0].name == "NVIDIA H200"
    p = _pairing(s, "draft_model", 1)
    # 2026-12-02, the repacked published wheel, same command (docs/sglang.md): 93.8% accepted, mean
    # length 4.75, per position 97.0 / 94.8 / 92.4 / 90.9%; every divergence from the baseline a near-tie
    assert round(p.acceptance_rate * 100, 1) == 93.8 and round(p.mean_acceptance_length, 2) == 4.75
    assert [round(x * 100, 1) for x in p.per_position] == [97.0, 94.8, 92.4, 90.9]
    assert p.lossless.compared == 5 and p.lossless.identical == 0
    assert {d.target.verdict for d in p.lossless.divergences} == {"near-tie"}
    assert p.speedup.mean == pytest.approx(1.30, abs=0.005)


def test_two_runs_of_one_wheel_differ_by_more_than_a_wheel_could_explain() -> None:
    """Both eagle3-random runs served the built wheel (the bench installs what the record names, and
    the build had recorded it): their spread is this host's run-to-run noise at one repeat."""
    first, second = _summary("sgl-repacked"), _summary("sgl-built")
    for s in (first, second):
        for p in s.pairings:
            assert p.acceptance_rate == 0.0 and p.mean_acceptance_length == 1.0  # a random drafter
    a, b = _pairing(first, "eagle3-random-k2", 1).speedup.mean, _pairing(second, "eagle3-random-k2", 1).speedup.mean
    assert (round(a, 2), round(b, 2)) == (0.60, 0.37)
    assert all(p.speedup.n == 1 for s in (first, second) for p in s.pairings)  # one repeat: no interval
    logs = [
        gzip.decompress((FIX / f"{n}.server-eagle3-random-k2.log.gz").read_bytes()).decode()
        for n in ("sgl-repacked", "sgl-built")
    ]
    for log in logs:  # the same server both times: CUDA graphs captured, no kernel fallback logged
        assert "Capture draft decode CUDA graph end" in log and "fallback" not in log.lower()


def test_the_report_names_the_built_wheel_it_served(tmp_path: Path) -> None:
    s = _summary("sgl-built").model_copy(update={"built": [BUILT]})
    assert _summary("sgl-built").built == []  # captured before summaries named their built wheels
    write_report(tmp_path / "run", s)
    text = (tmp_path / "run" / "report.md").read_text()
    assert f"Built wheels served: `{BUILT}`." in text
    write_comparison(
        [(tmp_path / "a", s), (tmp_path / "b", _summary("sgl-repacked"))],
        tmp_path / "cmp",
        Console(file=None, width=200, record=True),
    )
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"- `{tmp_path / 'a'}`: hopper-sm90 / sglang; built wheels: {BUILT}" in md
    assert f"- `{tmp_path / 'b'}`: hopper-sm90 / sglang\n" in md
