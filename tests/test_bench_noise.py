"""``--compare`` knows its noise (specrig.lab.regression) and a failed run is no baseline
(specrig.lab.history): pytest-benchmark's own parsed expressions, its JSON's shape, real stored
files. The same end to end, real benches against the synthetic server, is in
tests/test_bench_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_benchmark.utils import get_machine_id, parse_compare_fail

from specrig.core.errors import ConfigError
from specrig.lab.history import compared_run, failed
from specrig.lab.regression import Comparison, judge, judge_runs, prediction_interval, repeatless_name

MEAN_25 = parse_compare_fail("mean:25%")  # the default at the cpu recipe's regression_tolerance


def _bench(test: str, repeat: int, mean: float) -> dict:
    """One test of the suite as pytest-benchmark's JSON holds it (one round: min = max = mean)."""
    return {
        "name": f"test_decode[r{repeat}-{test}]",
        "fullname": f"bench/test_decode.py::test_decode[r{repeat}-{test}]",
        "stats": {"min": mean, "max": mean, "mean": mean, "median": mean, "stddev": 0, "rounds": 1},
        "extra_info": {"specrig": {"config": test.split("-")[0], "repeat": repeat}},
    }


def test_a_test_is_one_configuration_at_one_load_over_its_repeats() -> None:
    assert repeatless_name("bench/test_decode.py::test_decode[r12-ngram-k2-c4]") == (
        "bench/test_decode.py::test_decode[ngram-k2-c4]"
    )
    now = [_bench("baseline-c1", r, m) for r, m in enumerate([1.2, 1.3, 1.1])] + [_bench("ngram-c1", 0, 9.0)]
    stored = [_bench("baseline-c1", r, m) for r, m in enumerate([1.0, 1.1])]
    [v] = judge_runs(now, stored, [MEAN_25])  # ngram has nothing stored to compare with
    assert v.test.endswith("test_decode[baseline-c1]") and v.now == [1.2, 1.3, 1.1] and v.stored == [1.0, 1.1]


def test_one_repeat_each_side_says_it_knows_no_noise() -> None:
    """Two normal runs on a busy host, 58% apart: with nothing to judge the noise by, the tolerance
    alone decides, and the verdict says so and how to get one that knows the noise."""
    v = judge("t", MEAN_25, [1.58], [1.0])
    assert v.regressed and v.basis == "no spread" and round(v.change) == 58
    assert "one repeat on each side: no spread to judge the noise by" in v.line()
    assert "--repeat 3 on both runs" in v.line()
    c = Comparison(Path("stored.json"), [MEAN_25], [v])
    assert any("one repeat on each side: the comparison knows no noise" in n for n in c.notes)


def test_one_repeat_is_judged_against_the_stored_runs_spread() -> None:
    """The stored run was repeated: a single run now is a regression only beyond where 95% of single
    runs of the stored setup land (its prediction interval), not merely beyond the tolerance."""
    stored = [1.0, 1.5, 0.8, 1.3]  # a busy host: the same setup, four runs
    band = prediction_interval(stored)
    assert band.low < 1.15 < band.high and band.n == 4
    within = judge("t", MEAN_25, [1.58], stored)
    assert within.beyond and not within.regressed and within.basis == "stored spread"
    assert "from one repeat against the stored run's spread" in within.line()
    assert within.line().endswith("within it: within the noise, not a regression")
    beyond = judge("t", MEAN_25, [band.high * 1.5], stored)
    assert beyond.regressed and "this run is beyond it" in beyond.line()
    c = Comparison(Path("stored.json"), [MEAN_25], [within])
    assert c.regressions == [] and c.notes == [
        "one repeat in this run: each test is judged against the stored run's spread",
        within.line(),
    ]


def test_repeats_give_each_side_an_interval_and_a_regression_needs_them_to_separate() -> None:
    noisy = judge("t", MEAN_25, [1.2, 1.9, 1.6], [1.0, 1.4, 0.9])  # +36% on the means, intervals overlap
    assert noisy.beyond and not noisy.regressed and noisy.basis == "intervals"
    assert "(95% CI" in noisy.line() and "n=3" in noisy.line() and "the intervals overlap" in noisy.line()
    clear = judge("t", MEAN_25, [2.0, 2.1, 2.05], [1.0, 1.02, 0.98])
    assert clear.regressed and "the intervals separate" in clear.line()
    faster = judge("t", MEAN_25, [0.5, 0.52, 0.51], [1.0, 1.02, 0.98])  # separate, the good way
    assert not faster.regressed and not faster.beyond
    by_seconds = judge("t", parse_compare_fail("mean:0.5"), [2.0, 2.1, 2.05], [1.0, 1.02, 0.98])
    assert by_seconds.regressed and not by_seconds.percent and "(tolerance 0.5 s)" in by_seconds.line()


def test_a_stored_run_of_one_repeat_is_judged_by_this_runs_spread() -> None:
    v = judge("t", MEAN_25, [1.2, 1.9, 1.6], [1.0])
    assert v.basis == "this run's spread" and not v.regressed  # 1.0 lies where one run of this setup may land
    assert judge("t", MEAN_25, [3.0, 3.1, 3.05], [1.0]).regressed
    c = Comparison(Path("stored.json"), [MEAN_25], [v])
    assert "the stored run has one repeat: it is judged against this run's spread" in c.notes


def test_a_stored_run_that_cannot_be_read_is_said_and_judges_nothing(tmp_path: Path) -> None:
    (tmp_path / "0001_x.json").write_text('{"benchmarks": [')
    c = Comparison(tmp_path / "0001_x.json", [MEAN_25])
    c.judge([_bench("baseline-c1", 0, 1.0)])
    assert c.regressions == [] and "cannot be read" in c.notes[0]


# ------------------------------------------------------------------ a failed run is stored, not a baseline


def _stored(storage: Path, name: str, verdict: dict | None) -> Path:
    f = storage / get_machine_id() / name
    f.parent.mkdir(parents=True, exist_ok=True)
    data: dict = {"benchmarks": [_bench("baseline-c1", 0, 1.0)]}
    if verdict is not None:
        data["specrig_verdict"] = verdict
    f.write_text(json.dumps(data))
    return f


def test_latest_is_the_last_run_that_passed_and_a_failed_one_stays_reachable(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    storage = tmp_path / "benchmarks"
    older = _stored(storage, "0001_before-verdicts.json", None)  # stored before runs recorded a verdict
    passed = _stored(storage, "0002_passed.json", {"passed": True, "problems": []})
    bad = {"passed": False, "problems": ["regression against the stored run X: test_decode[baseline-c1]: mean +58%"]}
    regressed = _stored(storage, "0003_regressed.json", bad)
    assert failed(older) is None and failed(passed) is None
    assert failed(regressed) == f"it failed its gates: {bad['problems'][0]}"
    capsys.readouterr()
    assert compared_run(storage, "latest") == passed.resolve()
    err = " ".join(capsys.readouterr().err.split())
    assert "--compare latest: passed over 0003_regressed.json: it failed its gates: regression against" in err
    assert compared_run(storage, "3") == regressed.resolve()  # by its number, as asked
    assert "the stored run 0003_regressed.json is compared with as asked, though it failed its gates" in " ".join(
        capsys.readouterr().err.split()
    )
    assert compared_run(storage, "0003_regressed") == regressed.resolve()  # by its name
    for f in (older, passed):
        f.unlink()
    with pytest.raises(ConfigError, match="passed over: 0003_regressed.json: it failed its gates") as ei:
        compared_run(storage, "latest")
    assert "--compare NUM" in (ei.value.hint or "")


def test_a_run_records_whether_it_passed() -> None:
    from specrig.lab.regression import run_verdict
    from specrig.lab.results import BenchFailure

    assert run_verdict([], None, [], 0) == {"passed": True, "problems": []}
    c = Comparison(Path("/s/0001_x.json"), [MEAN_25], [judge("test_decode[baseline-c1]", MEAN_25, [1.58], [1.0])])
    v = run_verdict(["ngram: speedup 0.9 < 1.0"], c, [BenchFailure(test="t", type="EngineError", message="died")], 2)
    assert v["passed"] is False and v["problems"][0] == "ngram: speedup 0.9 < 1.0"
    assert v["problems"][1].startswith("regression against the stored run /s/0001_x.json: test_decode[baseline-c1]")
    assert v["problems"][2:] == ["t: died"]
    assert run_verdict([], None, [], 1)["problems"] == ["1 test(s) of the suite failed"]
