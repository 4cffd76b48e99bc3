"""One test per (repeat, configuration, load point): the measured run timed by
pytest-benchmark (one round per measured workload run), its typed Measurement in
``extra_info``, and the checks that must hold for every run."""

from __future__ import annotations

from specrig.lab.measure import Lab
from specrig.lab.plan import Case


def test_decode(benchmark, lab: Lab, case: Case, paired_baseline: list) -> None:
    benchmark.group = f"{lab.plan.recipe}/{lab.plan.engine} {case.point.label}"
    m = lab.measure(case, benchmark)
    benchmark.extra_info["specrig"] = m.model_dump(mode="json")
    # a baseline this test had measured for itself travels with it into the JSON
    benchmark.extra_info["specrig_baselines"] = [b.model_dump(mode="json") for b in paired_baseline]
    assert m.completion_tokens > 0 and m.decode_tok_s.mean, "no decode throughput measured"
    if m.server_generation_tokens is not None:
        assert m.counters_own, (
            f"the engine counted {m.server_generation_tokens:g} generated tokens, this run received "
            f"{m.completion_tokens}: other traffic shared the server, its counters are not this run's"
        )
    if not case.config.is_baseline:
        c = m.spec_counters
        assert c is not None and c.drafts > 0, "speculation was configured but the engine counted no drafts"
