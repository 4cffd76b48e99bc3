"""Prometheus parsing and deltas: label filtering, summing over engines, _created ignored."""

from __future__ import annotations

from specrig.engine.metrics import delta, parse
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
