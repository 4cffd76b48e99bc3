"""The SGLang adapter, offline. SGLang cannot run on this project's machines, so
parsing is tested against real SGLang outputs kept in tests/fixtures/sglang/
(see SOURCES.md there: which version each comes from). Inputs that no public
capture was found for are built here from the field names of the SGLang source
(0.5.17, the hopper-sm90 recipe's pin; 0.5.9, the blackwell-sm120 recipe's) and
marked ``CONSTRUCTED``."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.engine import get_engine
from specrig.engine.sglang import ENGINE, SGLANG_VERSION, pinned_version
from specrig.recipe.schema import SpecConfig, load_recipe

FIXTURES = Path(__file__).parent / "fixtures" / "sglang"
PY = "/envs/sglang/bin/python"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture(scope="module")
def recipe():
    return load_recipe("blackwell-sm120")


@pytest.fixture(scope="module")
def hopper():
    return load_recipe("hopper-sm90")


def counters(
    requests,
    *,
    completion_tokens=0,
    metrics_before=None,
    metrics_after=None,
    info_before=None,
    info_after=None,
    k=5,
    served_name="kimi-k2.5",
):
    return ENGINE.spec_counters(
        metrics_before=metrics_before,
        metrics_after=metrics_after,
        info_before=info_before,
        info_after=info_after,
        requests=requests,
        completion_tokens=completion_tokens,
        served_name=served_name,
        spec=SpecConfig(method="eagle3", model="/d", num_speculative_tokens=k),
    )


# --------------------------------------------------------------------------- launch


def test_registry_and_paths():
    """The adapter's paths and metric are SGLang's: the metric reads the server's token count out of an
    exposition built from the 0.5.17 wheel's names (two is_streaming series, summed), and each path is
    the one docs/sglang.md's endpoint table records from the pinned wheels' routes."""
    from specrig.engine.metrics import delta, parse

    assert get_engine("sglang") is ENGINE
    before, after = _exposition_0517(0, 7000, 3), _exposition_0517(0, 7000 + 500, 3 + 12)
    tokens = delta(parse(before), parse(after), ENGINE.generation_tokens_metric, {"model_name": "smollm2"})
    assert tokens == 512
    section = (Path(__file__).parents[1] / "docs" / "sglang.md").read_text().split("## Endpoints", 1)[1]
    table = dict(re.findall(r"^\| ([A-Za-z][\w -]*?) \| `([^`]+)`", section, re.M))
    assert (ENGINE.health_path, ENGINE.server_info_path, ENGINE.metrics_path, ENGINE.generation_tokens_metric) == (
        table["health"],
        table["server state"],
        table["Prometheus"],
        table["generated tokens"],
    )


def test_baseline_argv(recipe):
    plan = ENGINE.launch(
        python=PY,
        model_path="/m/Kimi-K2.5",
        served_name="kimi-k2.5",
        port=8123,
        recipe=recipe,
        spec=None,
        drafter=None,
        extra_args=["--log-level", "info"],
    )
    assert plan.argv == [
        PY,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m/Kimi-K2.5",
        "--served-model-name",
        "kimi-k2.5",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--tp-size",
        "8",
        "--enable-metrics",
        "--context-length",
        "32768",
        "--trust-remote-code",
        "--attention-backend",
        "flashinfer",
        "--log-level",
        "info",
    ]
    assert plan.base_url == "http://127.0.0.1:8123"
    assert plan.environment["PYTHONUNBUFFERED"] == "1"
    assert not any(a.startswith("--speculative") for a in plan.argv)


def test_eagle3_argv(recipe):
    spec = recipe.spec["eagle3"]
    plan = ENGINE.launch(
        python=PY,
        model_path="/m/Kimi-K2.5",
        served_name="kimi-k2.5",
        port=8123,
        recipe=recipe,
        spec=spec,
        drafter="/m/Kimi-K2.5-eagle3",
        extra_args=[],
    )
    tail = plan.argv[plan.argv.index("flashinfer") + 1 :]
    assert tail == [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/m/Kimi-K2.5-eagle3",
        "--speculative-num-steps",
        "5",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "6",
    ]


def test_ngram_argv_maps_prompt_lookup_on_059(recipe):
    assert pinned_version(recipe) == "0.5.9"
    args = ENGINE.spec_args(recipe.spec["ngram"], None, "/m", "0.5.9")
    assert args == [
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-ngram-max-match-window-size",
        "4",
        "--speculative-ngram-min-match-window-size",
        "2",
        "--speculative-ngram-max-bfs-breadth",
        "1",
        "--speculative-num-draft-tokens",
        "5",
    ]


def test_ngram_prompt_lookup_is_refused_on_0517(hopper):
    """0.5.10+ (0.5.17 too) draft ngrams from a suffix trie: no match-window flags to map to."""
    assert pinned_version(hopper) == SGLANG_VERSION == "0.5.17"
    with pytest.raises(ConfigError) as err:
        ENGINE.spec_args(hopper.spec["ngram"], None, "/m", "0.5.17")
    assert "prompt_lookup_max" in err.value.message and "trie" in err.value.message
    assert "--engine-arg" in err.value.hint
    plain = SpecConfig(method="ngram", num_speculative_tokens=4)
    assert ENGINE.spec_args(plain, None, "/m") == [
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-ngram-max-bfs-breadth",
        "1",
        "--speculative-num-draft-tokens",
        "5",
    ]


def test_draft_model_and_mtp():
    draft = SpecConfig(method="draft_model", model="/small", num_speculative_tokens=3)
    assert ENGINE.spec_args(draft, "/small", "/m")[:4] == [
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-draft-model-path",
        "/small",
    ]
    # the target drafting for itself (draft_model = @target): STANDALONE still needs the path
    oracle = ENGINE.spec_args(SpecConfig(method="draft_model", model="@target", num_speculative_tokens=4), "/m", "/m")
    assert oracle[:4] == ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m"]
    assert oracle[-2:] == ["--speculative-num-draft-tokens", "5"]
    mtp = SpecConfig(method="mtp", num_speculative_tokens=2)
    assert ENGINE.spec_args(mtp, None, "/m") == [
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    ]


def test_unsupported_method_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        ENGINE.spec_args(SpecConfig(method="suffix", num_speculative_tokens=4), None, "/m")
    assert "suffix" in err.value.message and "eagle3" in err.value.hint and "NGRAM" in err.value.hint


def test_missing_drafter_and_unmapped_option_are_config_errors():
    with pytest.raises(ConfigError, match="drafter"):
        ENGINE.spec_args(SpecConfig(method="eagle3", model="/d", num_speculative_tokens=3), None, "/m")
    odd = SpecConfig(method="ngram", num_speculative_tokens=3, options={"lookup_window": 9})
    with pytest.raises(ConfigError, match="lookup_window"):
        ENGINE.spec_args(odd, None, "/m")


def test_no_sglang_table_is_a_config_error(recipe):
    bare = recipe.model_copy(update={"engine": {"vllm": recipe.engine["vllm"]}})
    with pytest.raises(ConfigError, match=r"\[engine.sglang\]"):
        ENGINE.launch(
            python=PY, model_path="/m", served_name="m", port=1, recipe=bare, spec=None, drafter=None, extra_args=[]
        )


# --------------------------------------------------------------------------- requests


def test_openai_endpoint_asks_for_token_ids_and_yields_no_stats():
    assert ENGINE.request_body_extras(None) == {"return_token_ids": True}
    # the last chunk of a 0.5.9 /v1/completions stream carries no speculative fields
    chunk = {
        "id": "x",
        "object": "text_completion",
        "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 64, "total_tokens": 69},
    }
    assert ENGINE.request_spec(chunk) is None


def test_native_generate_body():
    body = ENGINE.native_generate_body(prompt="hi", max_tokens=64)
    assert body == {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 64, "temperature": 0.0, "ignore_eos": False},
        "stream": True,
    }
    assert ENGINE.native_generate_path == "/generate"


def test_real_meta_info_2025_01_verify_ct_only():
    meta = fixture("generate_meta_info.sglang-main-2025-01.json")
    r = ENGINE.request_spec({"text": "...", "meta_info": meta})
    assert r.verify_steps == 101
    assert r.accepted_tokens == 256 - 101  # no accepted count in this format
    assert r.draft_tokens is None
    assert r.acceptance_length == pytest.approx(256 / 101)
    c = counters([r], k=3)
    assert (c.drafts, c.accepted_tokens, c.draft_tokens) == (101, 155, 303)
    assert c.accepted_per_position is None
    assert "prefill token" in c.source


def test_real_meta_info_newer_names():
    meta = fixture("spec_meta_info.sglang-main-4ad990ba.json") | {"completion_tokens": 106}  # 106: same comment
    r = ENGINE.request_spec({"meta_info": meta})
    assert (r.verify_steps, r.accepted_tokens, r.draft_tokens) == (43, 63, 215)
    assert r.acceptance_length == pytest.approx(106 / 43)
    c = counters([r], k=5)
    assert c.accepted_per_position == (32, 18, 7, 3, 3)
    assert sum(c.accepted_per_position) == c.accepted_tokens == 63
    assert c.drafts == sum(meta["spec_correct_drafts_histogram"])


# CONSTRUCTED: the 0.5.9 field names of tokenizer_manager._calculate_spec_decoding_metrics;
# numbers chosen to fit its formulas (k=5: draft = verify * 5, length = completion / verify)
META_059 = {
    "id": "r1",
    "finish_reason": {"type": "length", "length": 135},
    "prompt_tokens": 12,
    "completion_tokens": 135,
    "cached_tokens": 0,
    "e2e_latency": 1.25,
    "spec_accept_rate": 0.475,
    "spec_accept_length": 3.375,
    "spec_accept_token_num": 95,
    "spec_draft_token_num": 200,
    "spec_verify_ct": 40,
    "spec_accept_histogram": [8, 8, 6, 5, 5, 8],
}


def test_counters_from_meta_info_059_names():
    r = ENGINE.request_spec({"text": "t", "output_ids": [1], "meta_info": META_059})
    assert (r.verify_steps, r.accepted_tokens, r.draft_tokens) == (40, 95, 200)
    c = counters([r, None, copy.deepcopy(r)], completion_tokens=270)
    assert (c.drafts, c.accepted_tokens, c.draft_tokens, c.k) == (80, 190, 400, 5)
    assert c.accepted_per_position == (64, 48, 36, 26, 16)
    assert "2 of 3 requests" in c.source and "spec_accept_token_num" in c.source


# CONSTRUCTED: what 0.5.17's tokenizer_manager._calculate_spec_decoding_metrics writes into the
# meta_info of a finished /generate request (EAGLE-3, k=3: num_draft_tokens 4): the counts under
# their new names, their compat aliases, the histogram under both names; numbers chosen to fit its
# formulas (proposed = verify * 3, accept_length = completion / verify, rate = correct / proposed)
META_0517 = {
    "id": "r2",
    "finish_reason": {"type": "length", "length": 512},
    "prompt_tokens": 40,
    "completion_tokens": 512,
    "cached_tokens": 0,
    "e2e_latency": 0.9,
    "spec_accept_rate": 0.5,
    "spec_accept_length": 512 / 204,
    "spec_num_correct_drafts": 306,
    "spec_num_proposed_drafts": 612,
    "spec_verify_ct": 204,
    "spec_accepted_drafts": 306,
    "spec_proposed_drafts": 612,
    "spec_correct_drafts_histogram": [50, 52, 52, 50],
    "spec_accept_histogram": [50, 52, 52, 50],
}


def test_counters_from_meta_info_0517_names():
    r = ENGINE.request_spec({"text": "t", "output_ids": [1], "meta_info": META_0517})
    assert (r.verify_steps, r.accepted_tokens, r.draft_tokens) == (204, 306, 612)
    assert r.acceptance_length == pytest.approx(512 / 204)
    c = counters([r], k=3)
    assert (c.drafts, c.accepted_tokens, c.draft_tokens) == (204, 306, 612)
    # h = [50, 52, 52, 50] steps accepted exactly 0..3 drafts: position i accepted in the steps with j > i
    assert c.accepted_per_position == (154, 102, 50)
    assert sum(c.accepted_per_position) == c.accepted_tokens
    assert "spec_num_correct_drafts" in c.source and "spec_accept_token_num" not in c.source
    # only the compat aliases (a release between the rename and its removal): same counts
    alias = {k: v for k, v in META_0517.items() if k not in ("spec_num_correct_drafts", "spec_num_proposed_drafts")}
    ra = ENGINE.request_spec({"meta_info": alias})
    assert (ra.accepted_tokens, ra.draft_tokens) == (306, 612)


# --------------------------------------------------------------------------- server info


def test_real_server_info_without_speculation():
    info = fixture("server_info.sglang-main-g87549f8f0.json")
    assert info["speculative_algorithm"] is None and len(info["internal_states"]) == 1
    assert counters([None], completion_tokens=500, info_before=info, info_after=info) is None


def test_server_info_fallback_is_cumulative_estimate():
    info = fixture("server_info.sglang-main-g87549f8f0.json")
    after = copy.deepcopy(info)
    after["internal_states"][0]["avg_spec_accept_length"] = 2.5  # CONSTRUCTED: key name from 0.5.9
    c = counters([None, None], completion_tokens=1000, info_before=info, info_after=after, k=4)
    assert (c.drafts, c.accepted_tokens, c.draft_tokens) == (400, 600, 1600)
    assert c.accepted_per_position is None
    assert "cumulative" in c.source and "dp rank 0" in c.source and "no per-position" in c.source
    assert c.raw["estimated"] is True
    # a value already there before the run is reported as mixing in earlier traffic
    before = copy.deepcopy(after)
    assert "before this run" in counters([None], completion_tokens=1000, info_before=before, info_after=after).source


# --------------------------------------------------------------------------- the gauge


def _exposition(value: float) -> str:
    """CONSTRUCTED from the 0.5.9 collector.py names, help texts and scheduler labels."""
    labels = 'engine_type="unified",model_name="kimi-k2.5",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    return (
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f"sglang:spec_accept_length{{{labels}}} {value}\n"
        "# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding "
        "(`accepted tokens / total draft tokens` in batch).\n"
        "# TYPE sglang:spec_accept_rate gauge\n"
        f"sglang:spec_accept_rate{{{labels}}} 0.5\n"
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        'sglang:generation_tokens_total{model_name="kimi-k2.5"} 4321.0\n'
    )


def test_gauge_alone_gives_no_counters():
    assert (
        counters([None], completion_tokens=500, metrics_before=_exposition(1.2), metrics_after=_exposition(3.1)) is None
    )


def test_gauge_is_recorded_not_differenced():
    r = ENGINE.request_spec({"meta_info": META_059})
    plain = counters([r])
    with_gauge = counters([r], metrics_before=_exposition(1.2), metrics_after=_exposition(3.1))
    assert (with_gauge.drafts, with_gauge.accepted_tokens, with_gauge.draft_tokens) == (
        plain.drafts,
        plain.accepted_tokens,
        plain.draft_tokens,
    )
    assert with_gauge.raw["gauge_spec_accept_length_last_interval"] == 3.1
    assert (
        counters([r], metrics_after=_exposition(3.1), served_name="other").raw.get(
            "gauge_spec_accept_length_last_interval"
        )
        is None
    )


def _exposition_0517(verify: float, tokens_streaming: float, tokens_plain: float, model: str = "smollm2") -> str:
    """CONSTRUCTED from 0.5.17's metrics_collector.py: the tokenizer-side counters (labels model_name,
    engine_type; generation tokens split by is_streaming) and a scheduler-side gauge."""
    tok = f'engine_type="unified",model_name="{model}"'
    return (
        "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.\n"
        "# TYPE sglang:spec_verify_calls_total counter\n"
        f"sglang:spec_verify_calls_total{{{tok}}} {verify}\n"
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        f'sglang:generation_tokens_total{{{tok},is_streaming="true"}} {tokens_streaming}\n'
        f'sglang:generation_tokens_total{{{tok},is_streaming="false"}} {tokens_plain}\n'
        "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding "
        "(accepted drafts + bonus token per forward).\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f'sglang:spec_accept_length{{{tok},moe_ep_rank="0",pp_rank="0",tp_rank="0"}} 2.4\n'
    )


def test_counter_deltas_cross_check_the_per_request_sums():
    r = ENGINE.request_spec({"meta_info": META_0517})
    before, after = _exposition_0517(1000, 7000, 3), _exposition_0517(1000 + 204, 7000 + 512, 3)
    c = counters([r], k=3, metrics_before=before, metrics_after=after, served_name="smollm2")
    assert (c.drafts, c.accepted_tokens) == (204, 306)  # the per-request sums stay the numbers
    assert c.raw["counter_spec_verify_calls"] == 204 == c.drafts
    assert c.raw["counter_generation_tokens"] == 512  # both is_streaming series summed
    assert c.raw["gauge_spec_accept_length_last_interval"] == 2.4
    # another model's series are not this one's
    other = counters([r], k=3, metrics_before=before, metrics_after=after, served_name="other")
    assert "counter_spec_verify_calls" not in other.raw


def test_counters_alone_when_no_request_carried_stats():
    """Attached through the OpenAI endpoints (no meta_info): drafts from the verify counter, accepted
    = tokens - verify steps - one prefill token per request (a lower bound), no per-position data."""
    before, after = _exposition_0517(10, 100, 0), _exposition_0517(10 + 90, 100 + 300, 0)
    c = counters([None, None], k=3, metrics_before=before, metrics_after=after, served_name="smollm2")
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (90, 270, 300 - 90 - 2)
    assert c.accepted_per_position is None and c.raw["estimated"] is True
    assert "spec_verify_calls_total" in c.source and "lower bound" in c.source
    # a counter that went backwards (a restarted server) is no measurement: fall through to /server_info
    assert counters([None], k=3, metrics_before=after, metrics_after=before, served_name="smollm2") is None
    # 0.5.9 has no verify counter: nothing from Prometheus
    assert counters([None], metrics_before=_exposition(1.0), metrics_after=_exposition(2.0)) is None


def test_memory_share_and_shared_gpu_args():
    assert ENGINE.memory_share(["--mem-fraction-static", "0.85", "--mem-fraction-static=0.5"]) == 0.5
    assert ENGINE.memory_share([]) == 0.88  # SGLang sizes its default from the GPU: about this on an H200
    assert ENGINE.shared_gpu_args(1 / 6, 10 * 2**30) == []  # SGLang cannot share a GPU while starting


def test_launch_sets_load_format_spec_args_and_offline_hub(recipe):
    dummy = recipe.model.model_copy(update={"load_format": "dummy"})
    eng = recipe.engine["sglang"].model_copy(update={"spec_args": ["--speculative-accept-threshold-single", "1.0"]})
    r = recipe.model_copy(update={"model": dummy, "engine": {**recipe.engine, "sglang": eng}})
    base = ENGINE.launch(
        python=PY, model_path="/m", served_name="m", port=1, recipe=r, spec=None, drafter=None, extra_args=[]
    )
    assert base.argv[base.argv.index("--load-format") + 1] == "dummy"
    assert "--speculative-accept-threshold-single" not in base.argv  # spec_args only for spec configurations
    assert base.environment["HF_HUB_OFFLINE"] == "1" and base.environment["TRANSFORMERS_OFFLINE"] == "1"
    spec = ENGINE.launch(
        python=PY,
        model_path="/m",
        served_name="m",
        port=1,
        recipe=r,
        spec=r.spec["eagle3"],
        drafter="/d",
        extra_args=[],
    )
    assert spec.argv[-2:] == ["--speculative-accept-threshold-single", "1.0"]


def test_every_fixture_is_versioned_and_sourced():
    sources = (FIXTURES / "SOURCES.md").read_text()
    files = sorted(p.name for p in FIXTURES.glob("*.json"))
    assert len(files) == 3
    for name in files:
        assert ".sglang-" in name and f"`{name}`" in sources


# --------------------------------------------------------------------------- real captures (H200, 0.5.17)

# SGLang 0.5.17 as it answered on an H200: the record of studies/2026-12-02-sglang-h200 (SOURCES.md there)
H200 = Path(__file__).resolve().parents[1] / "studies" / "2026-12-02-sglang-h200" / "capture"


def _events(name: str) -> list[dict]:
    lines = (H200 / name).read_text().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_a_real_0517_generate_stream_gives_token_ids_and_per_request_stats():
    """REAL CAPTURE: a draft_model (k=4) server on an H200, POST /generate streamed, 48 tokens.
    specrig's client folds it into the whole answer's token ids, and the adapter reads its
    speculative stats from the last chunk's meta_info."""
    from specrig.serve.http import _Folder
    from specrig.serve.types import RequestResult

    res = RequestResult(prompt_id="p", ok=False)
    f = _Folder(res)
    for e in _events("generate.stream.txt"):
        f.fold(e)
    f.finish(done=True)
    meta = res.final_payload["meta_info"]
    assert res.completion_tokens == meta["completion_tokens"] == len(res.token_ids or []) > 0
    spec = ENGINE.request_spec(res.final_payload)
    assert spec is not None  # 0.5.17's names: the verify steps, the correct and the proposed drafts
    counts = (meta["spec_verify_ct"], meta["spec_num_correct_drafts"], meta["spec_num_proposed_drafts"])
    assert (spec.verify_steps, spec.accepted_tokens, spec.draft_tokens) == counts and 0 < counts[1] < counts[2]
    assert spec.acceptance_length == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])


def test_a_real_0517_completions_stream_carries_the_answers_token_ids():
    """REAL CAPTURE: the same server's /v1/completions with return_token_ids (what the adapter
    asks for): specrig's client reads each chunk's ids into the whole greedy answer (as many ids as
    usage counts, as many as /generate gave for the same prompt; where the two part: the study's replay)."""
    from specrig.serve.http import _Folder
    from specrig.serve.types import RequestResult

    res = RequestResult(prompt_id="p", ok=False)
    f = _Folder(res)
    for e in _events("completions.stream.txt"):
        f.fold(e)
    f.finish(done=True)
    answer = [e["output_ids"] for e in _events("generate.stream.txt")][-1]
    assert res.tokens_per_chunk_source == "token_ids" and res.token_ids is not None
    assert res.completion_tokens == len(res.token_ids) == len(answer) > 0


def test_real_0517_metrics_give_this_runs_counters():
    """REAL CAPTURE: /metrics before and after the two requests above (the same length each): the
    generated tokens between the scrapes are theirs."""
    from specrig.engine.sglang_counters import _counter_deltas

    before, after = ((H200 / f"metrics.{w}.txt").read_text() for w in ("before", "after"))
    verify, tokens = _counter_deltas(before, after, "smollm2")
    answer = [e["meta_info"]["completion_tokens"] for e in _events("generate.stream.txt")][-1]
    assert tokens == 2 * answer and verify is not None and verify > 0
    info = json.loads((H200 / "server_info.after.json").read_text())
    assert info["speculative_algorithm"] == "STANDALONE" and info["speculative_num_draft_tokens"] == 5


def test_every_distribution_a_real_start_imported_from_the_lock_is_kept():
    """REAL CAPTURE: what the SGLang server processes imported in real starts of every shipped
    configuration on the H200 (recorded there). What came from the lock (not the host image)
    includes what the import sweep never reached: deep_gemm, at CUDA-graph capture of a
    speculative worker; none of it may be pruned."""
    from specrig.lock.file import read_lock

    imported = set(json.loads((H200 / "imports.json").read_text())["distributions"])
    recipe = load_recipe("hopper-sm90")
    lock = {p.name for p in read_lock(recipe.lock_path("sglang")).installed_packages}
    pruned = {o.split(";")[0].strip() for o in recipe.env["sglang"].overrides if "'never'" in o}
    assert {"sglang", "sglang-kernel", "sgl-deep-gemm", "apache-tvm-ffi", "flashinfer-python", "xgrammar"} <= imported
    assert not (imported & lock) & pruned
    assert {"sgl-deep-gemm", "apache-tvm-ffi"} <= imported & lock


def _venv_with_sgl_kernel(root: Path, *, fa3: bool) -> str:
    """A venv's layout as uv makes it, holding an sglang-kernel with or without its FA3 library."""
    kernel = root / "lib" / "python3.12" / "site-packages" / "sgl_kernel"
    (kernel / "sm90").mkdir(parents=True)
    (kernel / "sm90" / "common_ops.abi3.so").write_bytes(b"")
    if fa3:
        (kernel / "flash_ops.abi3.so").write_bytes(b"")
    (root / "bin").mkdir()
    (root / "bin" / "python").write_bytes(b"")
    return str(root / "bin" / "python")


@pytest.mark.parametrize(
    "extra, refused",
    [
        ([], "--attention-backend is fa3"),
        (["--attention-backend", "fa3"], "--attention-backend is fa3"),
        (["--attention-backend", "triton"], None),
        (["--attention-backend", "triton", "--speculative-draft-attention-backend", "fa3"], "draft-attention"),
    ],
)
def test_fa3_without_its_library_is_refused_before_the_server_starts(
    hopper, tmp_path: Path, extra: list[str], refused: str | None
) -> None:
    """A repacked sglang-kernel without flash_ops cannot serve SGLang's Hopper default (fa3): the
    server would die at its first forward. The launch says so and how to serve, before any start."""
    launch = {
        "model_path": "/m",
        "served_name": "m",
        "port": 30000,
        "recipe": hopper,
        "spec": None,
        "drafter": None,
        "extra_args": extra,
    }
    without = _venv_with_sgl_kernel(tmp_path / "repacked", fa3=False)
    if refused is None:
        assert ENGINE.launch(python=without, **launch).argv[0] == without
    else:
        with pytest.raises(ConfigError) as exc:
            ENGINE.launch(python=without, **launch)
        assert "has no FA3 library (flash_ops" in str(exc.value) and refused in str(exc.value)
        assert "--engine-arg=--attention-backend --engine-arg=triton" in exc.value.hint
    with_fa3 = _venv_with_sgl_kernel(tmp_path / "published", fa3=True)
    assert ENGINE.launch(python=with_fa3, **launch).argv[0] == with_fa3  # the published wheel: served
