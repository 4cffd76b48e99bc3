"""The lab against a synthetic server (no engine): prompt cycling to fill every
slot, the per-prompt output length recorded, the engine's token counter
checked against the client's (counters-are-our-own, and what happens when
other traffic shares the server), pairing lookups, and the plan's secrets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_support import run_openai
from specrig.core.prompt import Prompt
from specrig.lab.measure import Lab
from specrig.lab.plan import BenchPlan, Case, ConfigId, ConfigPlan
from specrig.lab.results import LoadPoint, Workload
from specrig.recipe.schema import load_recipe
from specrig.serve.synthetic import Behaviour, serve_in_process


@pytest.fixture
def synthetic() -> Iterator[str]:
    with serve_in_process(Behaviour(tokens_per_chunk=2, token_delay_s=0.002)) as s:
        yield s.base_url


def _plan(tmp_path: Path, endpoint: str, **workload) -> BenchPlan:
    recipe = load_recipe("cpu")
    return BenchPlan(
        startup_timeout_s=60.0,
        recipe="cpu",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=[ConfigPlan(name="baseline")],
        workload=Workload(
            dataset="story",
            num_prompts=5,
            max_tokens=12,
            points=[LoadPoint(concurrency=1), LoadPoint(concurrency=8)],
            warmup_requests=1,
            stall_timeout_s=5,
            first_token_timeout_s=5,
            **workload,
        ),
        served_name="smollm2",
        endpoint=endpoint,
        engine_args=["--api-key", "s3cret", "--token=abc"],
    )


def test_the_lab_cycles_prompts_and_owns_its_counters(tmp_path: Path, synthetic: str) -> None:
    plan = _plan(tmp_path, synthetic)
    lab = Lab(plan)
    try:
        c1 = lab.measure(Case(ConfigId(), LoadPoint(concurrency=1), 0))
        c8 = lab.measure(Case(ConfigId(), LoadPoint(concurrency=8), 0))
    finally:
        lab.close()
    assert [r.prompt_id for r in c1.requests] == ["relativity", "n_queens", "tcp_udp", "photosynthesis", "primes"]
    # eight slots, five prompts: cycled once, ids unique
    assert [r.prompt_id for r in c8.requests][5:] == ["relativity#1", "n_queens#1", "tcp_udp#1"]
    for m in (c1, c8):
        assert all(r.completion_tokens == 12 and r.output_len == 12 for r in m.requests)
        # the synthetic server counts what it streamed, as vLLM does: the lab's run is the only traffic
        assert m.server_generation_tokens == m.completion_tokens and m.counters_own is True
        assert m.counter_problem is None and m.rounds == 0  # no benchmark fixture: untimed
        assert m.latency.itl_ms.n > 0 and m.client_cpu_share is not None
    # pairing: a speculative case at c8 finds this run's baseline at c8, repeat 0
    assert lab.paired_baseline(Case(ConfigId(spec="ngram"), LoadPoint(concurrency=8), 0)) == [c8]
    assert lab.paired_baseline(Case(ConfigId(spec="ngram"), LoadPoint(concurrency=4), 0)) == []
    # measured once: asking again returns the same measurement
    assert lab.measure(Case(ConfigId(), LoadPoint(concurrency=1), 0)) is c1
    saved = json.loads((tmp_path / "prompts.json").read_text())
    assert saved[0] == {"id": "relativity", "output_len": None}


def test_other_traffic_is_seen_in_the_counters(tmp_path: Path, synthetic: str) -> None:
    plan = _plan(tmp_path, synthetic)
    lab = Lab(plan)
    stop = threading.Event()

    def other_client() -> None:
        while not stop.is_set():
            run_openai(synthetic, "smollm2", prompts=[Prompt("x", "y")], max_tokens=20)

    t = threading.Thread(target=other_client, daemon=True)
    t.start()
    try:
        m = lab.measure(Case(ConfigId(), LoadPoint(concurrency=1), 0))
    finally:
        stop.set()
        t.join(timeout=10)
        lab.close()
    assert m.server_generation_tokens is not None and m.server_generation_tokens > m.completion_tokens
    assert m.counters_own is False


def test_a_custom_prompt_file_carries_its_own_lengths(tmp_path: Path, synthetic: str) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "one", "output_len": 3}\n{"prompt": "two"}\n')
    plan = _plan(tmp_path, synthetic)
    plan = plan.model_copy(
        update={
            "workload": plan.workload.model_copy(update={"dataset": "custom", "dataset_path": str(f), "num_prompts": 2})
        }
    )
    lab = Lab(plan)
    try:
        m = lab.measure(Case(ConfigId(), LoadPoint(concurrency=1), 0))
    finally:
        lab.close()
    assert [(r.prompt_id, r.output_len, r.completion_tokens) for r in m.requests] == [
        ("custom-1", 3, 3),
        ("custom-2", 12, 12),
    ]


def test_the_plan_file_holds_no_secret(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "http://127.0.0.1:9")
    plan.write(tmp_path / "plan.json")
    text = (tmp_path / "plan.json").read_text()
    assert "s3cret" not in text and "abc" not in text and "--api-key" in text
    assert plan.engine_args == ["--api-key", "s3cret", "--token=abc"]  # the server still gets the real ones


def test_a_custom_file_shorter_than_num_prompts_is_sent_as_counted(tmp_path: Path, synthetic: str) -> None:
    """The header's count is the run's: a one-line file with --num-prompts 3 sends three requests (the
    line cycled, as the story's five are), and the workload says 3 once, where the run said 1."""
    from specrig.lab.options import BenchOptions
    from specrig.lab.plan import workload_from

    f = tmp_path / "one.jsonl"
    f.write_text('{"prompt": "only one", "output_len": 4}\n')
    opts = BenchOptions(dataset="custom", dataset_path=str(f), num_prompts=3, concurrency=(1,), warmup=0)
    workload = workload_from(opts, load_recipe("cpu"))
    assert workload.num_prompts == 3 and workload.describe().startswith("3 custom prompts")
    plan = _plan(tmp_path, synthetic)
    lab = Lab(plan.model_copy(update={"workload": workload.model_copy(update={"first_token_timeout_s": 5})}))
    try:
        m = lab.measure(Case(ConfigId(), LoadPoint(concurrency=1), 0))
    finally:
        lab.close()
    assert [r.prompt_id for r in m.requests] == ["custom-1", "custom-1#1", "custom-1#2"]
    assert json.loads((tmp_path / "prompts.json").read_text())[2] == {"id": "custom-1#2", "output_len": 4}
