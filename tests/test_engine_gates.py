"""An engine's own gate: a recipe's speculative configuration may hold one engine to other thresholds,
with the reason every report prints beside it (hopper-sm90's draft-model oracle: SGLang's own gate).
The declaration is checked; on a real SGLang run (the oracle of studies/2026-12-02-sglang-h200,
read from its capture) the engine's gate is the one judged, the general one for any other engine.
(Which figures that run gave and how each gate judged them: that study's replay.)"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from pydantic import ValidationError

from specrig.lab.results import RunSummary
from specrig.lab.summary import gate_problems, thresholds
from specrig.recipe.schema import SpecConfig, load_recipe

ORACLE = Path(__file__).resolve().parents[1] / "studies" / "2026-12-02-sglang-h200" / "capture"


def test_an_engine_gate_needs_a_known_engine_and_a_reason() -> None:
    base = {"method": "draft_model", "model": "@target", "num_speculative_tokens": 4, "min_acceptance_rate": 0.95}
    with pytest.raises(ValidationError, match="engines.sglng: unknown engine"):
        SpecConfig.model_validate(base | {"engines": {"sglng": {"min_acceptance_rate": 0.9, "why": "a long reason"}}})
    with pytest.raises(ValidationError, match="why"):
        SpecConfig.model_validate(base | {"engines": {"sglang": {"min_acceptance_rate": 0.9}}})
    ok = SpecConfig.model_validate(base | {"engines": {"sglang": {"min_speedup": 1.1, "why": "measured somewhere"}}})
    assert ok.gates("sglang") == (0.95, 1.1, "the sglang gate: measured somewhere")
    assert ok.gates("vllm") == (0.95, None, "")


def test_the_engines_gate_is_judged_for_that_engine_only() -> None:
    """The same measured figures judged for SGLang (its gate and its note) and for vLLM (the general
    gate, no note); a summary whose thresholds are re-judged has the gate problems of its new ones."""
    run = RunSummary.model_validate_json(
        gzip.decompress((ORACLE / "sglang-oracle-deterministic.summary.json.gz").read_bytes())
    )
    recipe = load_recipe("hopper-sm90")
    spec = recipe.spec["draft_model"]
    cfg = next(c for c in run.configs if c.name == "draft_model")
    runs = [m for m in run.measurements if m.config == "draft_model"]
    (sgl,) = thresholds(recipe, cfg, runs, list(run.pairings), "sglang")
    (other,) = thresholds(recipe, cfg, runs, list(run.pairings), "vllm")
    assert sgl.name == other.name == "acceptance_rate" and sgl.measured == other.measured is not None
    assert (sgl.threshold, sgl.note) == (spec.gates("sglang")[0], spec.gates("sglang")[2]) and sgl.note
    assert (other.threshold, other.note) == (spec.gates("vllm")[0], "")
    assert sgl.note in sgl.describe() and "docs/sglang.md" in sgl.describe()
    for gate in (sgl, other):
        rejudged = run.model_copy(
            update={"configs": [c.model_copy(update={"thresholds": [gate]}) if c is cfg else c for c in run.configs]}
        )
        assert (gate_problems(rejudged) == []) == gate.passed
