"""Decode throughput and speculative-decoding acceptance, one test per configuration."""

from __future__ import annotations

from specrig.benchrun import BenchPlan, failed_thresholds, run_config


def test_decode(benchmark, plan: BenchPlan, config_name: str) -> None:
    benchmark.group = f"{plan.recipe}/{plan.engine}"
    doc = run_config(
        plan, config_name, measure=lambda run: benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    )
    agg = doc["aggregate"]
    benchmark.extra_info.update(
        {
            "config": config_name,
            **{k: v for k, v in agg.items() if isinstance(v, (int, float)) or v is None},
            "server_generation_tokens": doc["server_generation_tokens"],
            "token_count_error": doc["token_count_error"],
            "spec_stats": doc.get("spec_stats"),
            "diagnosis": doc.get("diagnosis"),
            "thresholds": doc["thresholds"],
        }
    )
    assert agg["decode_tok_s_mean"] and agg["decode_tok_s_mean"] > 0, "no decode throughput measured"
    err = doc["token_count_error"]
    assert err is None or err <= 0.01, (
        f"client counted {agg['completion_tokens']} tokens, the server's counter moved by "
        f"{doc['server_generation_tokens']}: {err:.1%} apart (> 1%)"
    )
    failed = failed_thresholds(doc)
    assert not failed, "below the recipe's threshold: " + "; ".join(failed)
