"""SGLang 0.5.17 on the H200, replayed from the real captures beside this file (capture/, SOURCES.md):
greedy on its speculative path is not repeatable at near-ties (one prompt through two endpoints of one
server parts after 24 tokens); and its draft-model oracle, with the gate the recipe holds each
engine to: with its batch-invariant kernels on, SGLang 0.5.17 still accepts 93.1% of the target's own
drafts, every divergence from the baseline a near-tie read from token ids; so the recipe gives SGLang
its own gate (0.90, with the reason) while vLLM keeps 0.95 (it accepted 100% there)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from replay_support import cells, page_tables
from specrig.engine.sglang import ENGINE
from specrig.lab.results import RunSummary
from specrig.lab.summary import gate_problems, thresholds
from specrig.recipe.schema import load_recipe

HERE = Path(__file__).resolve().parent
CAPTURE = HERE / "capture" / "sglang-oracle-deterministic.summary.json.gz"


@pytest.fixture(scope="module")
def run() -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress(CAPTURE.read_bytes()))


def test_the_capture_is_the_deterministic_oracle(run: RunSummary) -> None:
    assert run.engine == "sglang" and run.recipe == "hopper-sm90"
    for c in run.configs:  # baseline and oracle both with the batch-invariant kernels
        assert "--enable-deterministic-inference" in c.server_argv
    (p,) = run.pairings
    assert p.config == "draft_model" and p.k == 4
    assert 0.92 < p.acceptance_rate < 0.94
    # every position loses a little, as independent near-ties would make it (not one broken step)
    assert all(0.88 < a < 0.98 for a in p.per_position)
    ll = p.lossless
    assert ll is not None and ll.identical == 0 and len(ll.divergences) == ll.compared == 5
    for d in ll.divergences:
        assert d.unit == "token" and d.target is not None and d.target.verdict == "near-tie"
        assert d.target.margin < 0.25  # the target's own top-2 logits within a quarter logit


def test_the_engine_gate_replaces_the_general_one_for_sglang_only(run: RunSummary) -> None:
    recipe = load_recipe("hopper-sm90")
    spec = recipe.spec["draft_model"]
    assert spec.min_acceptance_rate == 0.95 and spec.engines["sglang"].min_acceptance_rate == 0.90
    cfg = next(c for c in run.configs if c.name == "draft_model")
    runs = [m for m in run.measurements if m.config == "draft_model"]
    (sgl,) = thresholds(recipe, cfg, runs, list(run.pairings), "sglang")
    assert sgl.threshold == 0.90 and sgl.passed
    assert "the sglang gate:" in sgl.describe() and "docs/sglang.md" in sgl.describe()
    # the same figures held to vLLM's gate fail, with no engine note
    (other,) = thresholds(recipe, cfg, runs, list(run.pairings), "vllm")
    assert other.threshold == 0.95 and not other.passed and other.note == ""
    # the capture itself was judged by the old general gate: it failed then, it passes re-judged now
    assert any("acceptance_rate = 0.931, threshold 0.95" in line for line in gate_problems(run))
    rejudged = run.model_copy(
        update={"configs": [c.model_copy(update={"thresholds": [sgl]}) if c is cfg else c for c in run.configs]}
    )
    assert gate_problems(rejudged) == []


def test_the_results_page_shows_the_oracle() -> None:
    """The study's table as the results page draws it: 93.1% accepted, mean length 4.72, 0.81x, none of
    the five answers identical to the baseline's, every divergence a near-tie."""
    (oracle,) = (cells(t) for t in page_tables(HERE))
    assert oracle == [
        ["baseline", "c1", "430.2", "–", "–", "–", "–"],
        ["draft_model (k=4)", "c1", "346.9", "93.1%", "4.72", "0.81x", "0/5 ties"],
    ]


def _folded(name: str):
    """A captured stream folded by specrig's client into the whole answer."""
    from specrig.serve.http import _Folder
    from specrig.serve.types import RequestResult

    res = RequestResult(prompt_id="p", ok=False)
    f = _Folder(res)
    for line in (HERE / "capture" / name).read_text().splitlines():
        if line.startswith("data: {"):
            f.fold(json.loads(line[6:]))
    f.finish(done=True)
    return res


def test_one_prompt_through_two_endpoints_parts_after_24_tokens() -> None:
    """The same greedy prompt (48 tokens, EOS ignored) on the same draft_model server, through /generate
    and through /v1/completions: 24 tokens alike, then the other of two near-tied tokens. 11 verify
    steps drafted 44 tokens, 36 accepted: a mean of 48 / 11 tokens a step."""
    generated, completed = _folded("generate.stream.txt"), _folded("completions.stream.txt")
    a, b = generated.token_ids, completed.token_ids
    assert len(a) == len(b) == generated.completion_tokens == 48
    assert a[:24] == b[:24] and a[24] != b[24]
    spec = ENGINE.request_spec(generated.final_payload)
    assert (spec.verify_steps, spec.accepted_tokens, spec.draft_tokens) == (11, 36, 44)
    assert spec.acceptance_length == pytest.approx(48 / 11)
