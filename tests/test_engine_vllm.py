"""The vLLM adapter's launch command and per-request stats."""

from __future__ import annotations

import json

from specrig.engine.vllm import ENGINE
from specrig.host.cpus import cpu_list_text, usable_cpu_list
from specrig.recipe.schema import load_recipe


def test_launch_blackwell_eagle3() -> None:
    r = load_recipe("blackwell-sm120")
    plan = ENGINE.launch(
        python="/envs/x/bin/python",
        model_path="/m/Kimi-K2.5",
        served_name="kimi-k2.5",
        port=8123,
        recipe=r,
        spec=r.spec["eagle3"],
        drafter="/m/drafter",
        extra_args=["--seed", "1"],
    )
    argv = plan.argv
    assert argv[:3] == ["/envs/x/bin/vllm", "serve", "/m/Kimi-K2.5"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert "--trust-remote-code" in argv and argv[-2:] == ["--seed", "1"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "num_speculative_tokens": 5, "model": "/m/drafter"}
    assert plan.base_url == "http://127.0.0.1:8123" and plan.environment["HF_HUB_OFFLINE"] == "1"
    assert "LD_PRELOAD" not in plan.environment  # only for CPU recipes


def test_launch_cpu_baseline_and_ngram() -> None:
    r = load_recipe("cpu")
    base = ENGINE.launch(
        python="/e/bin/python",
        model_path="/m",
        served_name="smollm2",
        port=1,
        recipe=r,
        spec=None,
        drafter=None,
        extra_args=[],
    )
    assert "--speculative-config" not in base.argv and "--enforce-eager" in base.argv
    # OpenMP's threads bound to the CPUs this process may use (all of them, or its worker's share)
    assert base.environment["VLLM_CPU_OMP_THREADS_BIND"] == cpu_list_text(usable_cpu_list())
    ng = ENGINE.launch(
        python="/e/bin/python",
        model_path="/m",
        served_name="smollm2",
        port=1,
        recipe=r,
        spec=r.spec["ngram"],
        drafter=None,
        extra_args=[],
    )
    cfg = json.loads(ng.argv[ng.argv.index("--speculative-config") + 1])
    assert cfg == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def test_request_spec() -> None:
    payload = {
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 5.0,
                "draft_acceptance_rate": 1.0,
                "num_spec_steps": 6,
                "num_accepted_draft_tokens": 24,
                "num_draft_tokens": 24,
            }
        }
    }
    rs = ENGINE.request_spec(payload)
    assert rs and rs.verify_steps == 6 and rs.accepted_tokens == 24 and rs.acceptance_length == 5.0
    assert ENGINE.request_spec({"usage": {}}) is None


def test_a_dummy_target_loads_its_drafters_own_weights() -> None:
    """With --load-format dummy vLLM gives the drafter the target's load format too: its checkpoint is
    never read and it borrows the target's output head (seen on the H200: "Detected EAGLE model without
    its own lm_head"; 163,840 logits a draft token on the Kimi shape). A drafter folder with weights is
    loaded from disk; the target drafting for itself stays dummy (the same seeded weights: the oracle)."""
    dummy, real = load_recipe("hopper-sm90").serving("kimi-8l"), load_recipe("hopper-sm90")

    def launched(recipe, spec: str, drafter: str, model_path: str = "/m/kimi") -> list[str]:
        return ENGINE.launch(
            python="/e/bin/python",
            model_path=model_path,
            served_name=recipe.model.served_name,
            port=1,
            recipe=recipe,
            spec=recipe.spec[spec],
            drafter=drafter,
            extra_args=[],
        ).argv

    def spec_of(spec: str, drafter: str) -> dict:
        argv = launched(dummy, spec, drafter)
        assert argv[argv.index("--load-format") + 1] == "dummy"
        return json.loads(argv[argv.index("--speculative-config") + 1])

    assert spec_of("eagle3-random", "/c/eagle3-random-x")["draft_load_config"] == {"load_format": "auto"}
    assert "draft_load_config" not in spec_of("draft_model", "/m/kimi")
    argv = launched(real, "eagle3-random", "/c/eagle3-random-x", model_path="/m/smol")
    assert "draft_load_config" not in argv[argv.index("--speculative-config") + 1]
