"""Prometheus parsing and deltas: label filtering, summing over engines, _created ignored; a malformed
exposition named by its line; counters that went backwards (a restart) or are NaN flagged."""

from __future__ import annotations

import pytest

from specrig.core.errors import EngineError
from specrig.engine.metrics import (
    WENT_BACKWARDS,
    CounterWarning,
    check_deltas,
    checked_delta,
    delta,
    describe_deltas,
    parse,
)
from specrig.engine.vllm import ENGINE as VLLM
from specrig.recipe.schema import SpecConfig

BEFORE = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 1000.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.79e+09
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 15.0
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 3.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 0.0
"""


def _after() -> str:
    # every counter of model "m" grows by a known amount; "other" grows a lot
    out = []
    bumps = {"num_drafts_total": 10, "num_draft_tokens_total": 30, "num_accepted_tokens_total": 18}
    for line in BEFORE.splitlines():
        if line.startswith("#") or "_created" in line:
            out.append(line)
            continue
        name, value = line.rsplit(" ", 1)
        v = float(value)
        for key, bump in bumps.items():
            if f"spec_decode_{key}{{" in name:
                v += bump if 'model_name="m"' in name else 999
        if "per_pos" in name and 'model_name="m"' in name:
            v += {'"0"': 8, '"1"': 6, '"2"': 4}[name.rsplit("position=", 1)[1].rstrip("}")] / 2
        out.append(f"{name} {v}")
    return "\n".join(out) + "\n"


def test_parse_filters_and_sums() -> None:
    exp = parse(BEFORE)
    assert exp.total("vllm:spec_decode_num_drafts_total", {"model_name": "m"}) == 15.0
    assert exp.total("vllm:spec_decode_num_drafts_total") == 1015.0
    assert exp.total("vllm:spec_decode_num_drafts_created", {"model_name": "m"}) == 1.79e9  # a gauge, never in counters
    assert exp.by_label("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position", {"model_name": "m"}) == {
        "0": 10.0,
        "1": 4.0,
        "2": 1.0,
    }
    assert exp.total("vllm:nope") is None
    assert delta(None, exp, "vllm:spec_decode_num_drafts_total", {"model_name": "m"}) == 15.0


def test_vllm_counters_from_two_scrapes() -> None:
    spec = SpecConfig(method="ngram", num_speculative_tokens=3)
    c = VLLM.spec_counters(
        metrics_before=BEFORE,
        metrics_after=_after(),
        info_before=None,
        info_after=None,
        requests=[],
        completion_tokens=0,
        served_name="m",
        spec=spec,
    )
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (20.0, 60.0, 36.0)  # summed over both engines
    assert c.accepted_per_position == (8.0, 6.0, 4.0)
    assert c.k == 3 and "model_name='m'" in c.source
    none = VLLM.spec_counters(
        metrics_before=None,
        metrics_after="# nothing\n",
        info_before=None,
        info_after=None,
        requests=[],
        completion_tokens=0,
        served_name="m",
        spec=spec,
    )
    assert none is None


def test_a_malformed_exposition_names_metrics_and_the_first_bad_line() -> None:
    text = BEFORE + 'vllm:spec_decode_num_drafts_total{engine="2",model_name="m" 3.0\nvllm:fine_total 1\n'
    bad_line = len(BEFORE.splitlines()) + 1
    with pytest.raises(EngineError) as ei:
        parse(text)
    msg = str(ei.value)
    assert "/metrics is not a valid Prometheus exposition" in msg
    assert f'line {bad_line}: \'vllm:spec_decode_num_drafts_total{{engine="2",model_name="m" 3.0\'' in msg
    with pytest.raises(EngineError, match=r"line 2: '<body>oops</body>'"):
        parse("\n<body>oops</body>\n")
    with pytest.raises(EngineError, match=r"line 1: '# TYPE x bogus'"):
        parse("# TYPE x bogus\nx 1\n")


def _scaled(text: str, factor: float) -> str:
    """The exposition with every sample's value multiplied by ``factor`` (a restarted server's: smaller)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or "_created" in line:
            out.append(line)
        else:
            name, value = line.rsplit(" ", 1)
            out.append(f"{name} {float(value) * factor}")
    return "\n".join(out) + "\n"


def test_counters_that_grew_are_fine() -> None:
    assert check_deltas(BEFORE, _after(), match={"model_name": "m"}) == []
    assert check_deltas(parse(BEFORE), parse(_after())) == []
    assert check_deltas(None, _after()) == []
    assert describe_deltas([]) is None
    d = checked_delta(parse(BEFORE), parse(_after()), "vllm:spec_decode_num_drafts_total", {"model_name": "m"})
    assert d.ok and d.value == 20.0 and (d.before, d.after) == (15.0, 35.0)


def test_a_counter_that_went_backwards_is_flagged() -> None:
    before, after = parse(BEFORE), parse(_scaled(BEFORE, 0.1))  # the engine restarted between the scrapes
    d = checked_delta(before, after, "vllm:spec_decode_num_drafts_total", {"model_name": "m"})
    assert not d.ok and d.problem == WENT_BACKWARDS and d.value == pytest.approx(-13.5)
    with pytest.warns(CounterWarning, match="went backwards") as rec:
        value = delta(before, after, "vllm:spec_decode_num_drafts_total", {"model_name": "m"})
    assert value == pytest.approx(-13.5)  # the old signature and value, now with a warning to record
    assert rec[0].message.delta.problem == WENT_BACKWARDS  # type: ignore[union-attr]
    problems = check_deltas(BEFORE, _scaled(BEFORE, 0.1), match={"model_name": "m"})
    names = {p.name for p in problems}
    assert (
        "vllm:spec_decode_num_drafts_total" in names and "vllm:spec_decode_num_accepted_tokens_per_pos_total" in names
    )
    assert all(p.problem == WENT_BACKWARDS for p in problems)
    assert not any(dict(p.labels).get("model_name") == "other" for p in problems)
    note = describe_deltas(problems)
    assert note is not None
    assert note.startswith("the counter went backwards: the engine restarted, or another server answered (")
    assert (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"}: 8 -> 0.8' in note
    )
    assert "more)" in note


def test_one_rank_restarting_is_seen_even_when_the_sum_grew() -> None:
    after = BEFORE.replace(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 2.0',
    ).replace(
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0',
    )
    assert checked_delta(parse(BEFORE), parse(after), "vllm:spec_decode_num_drafts_total", {"model_name": "m"}).ok
    problems = check_deltas(BEFORE, after, ["vllm:spec_decode_num_drafts_total"], {"model_name": "m"})
    assert [p.describe() for p in problems] == [
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}}: 10 -> 2: {WENT_BACKWARDS}'
    ]


def test_nan_and_vanished_counters_are_flagged() -> None:
    after = _after().replace(
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 60.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} NaN',
    )
    after = "\n".join(ln for ln in after.splitlines() if 'accepted_tokens_total{engine="1"' not in ln) + "\n"
    problems = {(p.name, dict(p.labels)["engine"]): p for p in check_deltas(BEFORE, after, match={"model_name": "m"})}
    assert problems.keys() == {
        ("vllm:spec_decode_num_draft_tokens_total", "0"),
        ("vllm:spec_decode_num_accepted_tokens_total", "1"),
    }
    assert problems[("vllm:spec_decode_num_draft_tokens_total", "0")].problem == "the counter is NaN"
    gone = problems[("vllm:spec_decode_num_accepted_tokens_total", "1")]
    assert gone.problem == WENT_BACKWARDS and gone.after is None and "3 -> absent" in gone.describe()
    d = checked_delta(parse(BEFORE), parse(after), "vllm:spec_decode_num_draft_tokens_total", {"model_name": "m"})
    assert d.problem == "the counter is NaN"
