"""The lossless check's second half: where greedy outputs diverge, the target's own float32
logits at that position say whether it was a numerical near-tie or a real loss.

Fast tests: the verdict's rule, the one-line descriptions, the summary's JSON round trip
(old summaries without the new fields still load), and a failed computation that leaves the
measurement standing and says why. Engine tests (the real SmolLM2 folder and the cpu
recipe's vLLM environment, as the other engine tests prepare them): the target's greedy
continuation, computed here independently (incremental decoding with a KV cache), and fake
speculative outputs that leave it at chosen positions with the runner-up token or a
low-ranked one; the script must report the same logits and ranks and classify them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from specrig.lab.divergence import explain, lossless
from specrig.lab.lossless import NEAR_TIE_LOGITS, Divergence, Lossless, TargetMargin, classify
from specrig.lab.results import Latency, LoadPoint, Measurement, Pairing, RequestRecord
from specrig.model.datasets import STORY_PROMPTS
from specrig.specdec.stats import Distribution

POINT = LoadPoint(concurrency=1)


def _margin(top: tuple[float, float], base: float, spec: float, ranks: tuple[int, int]) -> TargetMargin:
    """Figures as the script reports them (ranks: the baseline's token's, the spec's)."""
    return TargetMargin(
        top=[11, 22],
        top_logits=list(top),
        margin=top[0] - top[1],
        baseline_token=11,
        spec_token=22 if ranks[1] == 2 else 44,
        baseline_logit=base,
        spec_logit=spec,
        gap=base - spec,
        baseline_rank=ranks[0],
        spec_rank=ranks[1],
        threshold=NEAR_TIE_LOGITS,
        verdict=classify(top[0], base, spec),
    )


def _div(pid: str, pos: int, target: TargetMargin | None = None, why: str | None = None) -> Divergence:
    return Divergence(
        prompt_id=pid, position=pos, unit="token", baseline="[1]", spec="[2]", target=target, unexplained=why
    )


TIE = _margin((20.0, 19.94), 20.0, 19.94, (1, 2))
LOSS = _margin((20.0, 19.5), 20.0, 14.8, (1, 37))


def test_the_verdict_is_the_worse_side_against_the_threshold() -> None:
    assert classify(20.0, 20.0, 20.0 - NEAR_TIE_LOGITS) == "near-tie"  # the boundary counts as a tie
    assert classify(20.0, 20.0, 20.0 - NEAR_TIE_LOGITS - 0.01) == "real loss"
    assert classify(20.0, 19.9, 20.0) == "near-tie"  # the baseline took the runner-up, spec the target's choice
    assert classify(20.0, 18.0, 20.0) == "real loss"  # the baseline far off: not numerics either
    assert classify(20.0, 20.0, 19.0, threshold=1.5) == "near-tie"


def test_describe_names_each_kind_of_divergence() -> None:
    assert Lossless(compared=5, identical=5).describe() == "identical 5/5"
    assert Lossless(compared=0, identical=0).describe() == "lossless check: nothing to compare"
    one_tie = Lossless(compared=5, identical=4, divergences=[_div("p3", 319, TIE)])
    assert one_tie.describe() == (
        "identical 4/5; 1 divergence, a numerical near-tie "
        "(p3 at token 319: the target's top-2 margin 0.06 logits, spec took the runner-up)"
    )
    assert one_tie.cell() == "4/5 ties"
    one_loss = Lossless(compared=5, identical=4, divergences=[_div("p2", 41, LOSS)])
    assert one_loss.describe() == (
        "identical 4/5; 1 divergence, a REAL LOSS (p2 at token 41: spec's token ranks 37, 5.20 logits below the target's choice)"
    )
    assert one_loss.cell() == "4/5 LOSS"
    flipped = _margin((20.0, 19.9), 19.9, 20.0, (2, 1))
    assert (
        "the baseline took the runner-up"
        in Lossless(compared=1, identical=0, divergences=[_div("p0", 3, flipped)]).describe()
    )
    wide = _margin((20.0, 19.7), 20.0, 19.7, (1, 2))
    mixed = Lossless(
        compared=5,
        identical=1,
        divergences=[
            _div("p0", 5, TIE),
            _div("p1", 9, LOSS),
            _div("p4", 7, wide),
            _div("p5", 2, why="the spec output ends at token 2"),
        ],
    )
    text = mixed.describe()
    assert text.startswith(
        "identical 1/5; 4 divergences: 1 REAL LOSS (p1 at token 9: spec's token ranks 37, 5.20 logits below"
    )
    assert "2 numerical near-ties" in text and "1 not classified (the spec output ends at token 2)" in text
    ties = Lossless(compared=3, identical=1, divergences=[_div("p0", 5, TIE), _div("p4", 7, wide)])
    assert ties.describe() == (
        "identical 1/3; 2 divergences, all numerical near-ties "
        "(widest: p4 at token 7: the target's top-2 margin 0.30 logits, spec took the runner-up)"
    )
    # nothing classified: the measured divergence as before, and why it is not classified
    plain = Lossless(compared=2, identical=1, divergences=[_div("p1", 6, why="the outputs were compared as text")])
    assert plain.describe() == (
        "identical 1/2; first divergence: p1 at token 6 (baseline '[1]', spec '[2]'); "
        "not classified: the outputs were compared as text"
    )
    assert plain.cell() == "1/2"


def _measurement(config: str, outputs: dict[str, list[int]], repeat: int = 0) -> Measurement:
    reqs = [
        RequestRecord(
            prompt_id=pid,
            ttft_ms=10.0,
            tpot_ms=50.0,
            e2e_ms=10.0 + 50.0 * len(ids),
            decode_tok_s=20.0,
            completion_tokens=len(ids),
            prompt_tokens=10,
            token_ids=ids,
            text="",
        )
        for pid, ids in outputs.items()
    ]
    d = Distribution.of([50.0])
    return Measurement(
        config=config,
        point=POINT,
        repeat=repeat,
        requests=reqs,
        wall_s=1.0,
        completion_tokens=sum(len(v) for v in outputs.values()),
        output_tok_s=20.0,
        decode_tok_s=Distribution.of([20.0]),
        latency=Latency(ttft_ms=d, tpot_ms=d, itl_ms=d, e2e_ms=d),
    )


def _pairing(spec: Measurement, base: Measurement) -> Pairing:
    return Pairing(
        config=spec.config,
        point=POINT,
        k=3,
        speedup=None,
        throughput_ratio=None,
        acceptance_rate=None,
        mean_acceptance_length=None,
        per_position=None,
        lossless=lossless(spec, [base]),
        diagnosis="",
    )


def test_the_figures_survive_summary_json_and_old_summaries_still_load() -> None:
    p = Pairing(
        config="eagle3",
        point=POINT,
        k=3,
        speedup=None,
        throughput_ratio=None,
        acceptance_rate=None,
        mean_acceptance_length=None,
        per_position=None,
        lossless=Lossless(compared=5, identical=3, divergences=[_div("p3", 319, TIE), _div("p2", 41, LOSS)]),
        diagnosis="",
    )
    raw = json.loads(p.model_dump_json())
    d = raw["lossless"]["divergences"][1]["target"]
    assert (d["verdict"], d["spec_rank"], d["gap"], d["threshold"]) == (
        "real loss",
        37,
        pytest.approx(5.2),
        NEAR_TIE_LOGITS,
    )
    back = Pairing.model_validate_json(json.dumps(raw))
    assert back == p and back.lossless.describe() == p.lossless.describe()  # type: ignore[union-attr]
    # a summary written before the check explained anything: no target, no reason; loads and reads as before
    old = {"prompt_id": "p2", "position": 6, "unit": "char", "baseline": "xt", "spec": "Xt"}
    legacy = Lossless.model_validate({"compared": 4, "identical": 3, "divergences": [old]})
    assert legacy.divergences[0].target is None and legacy.divergences[0].unexplained is None
    assert legacy.describe() == "identical 3/4; first divergence: p2 at char 6 (baseline 'xt', spec 'Xt')"


def test_a_failed_computation_keeps_the_measurement_and_says_why(tmp_path: Path) -> None:
    base = _measurement("baseline", {"a": [1, 2, 3, 4], "b": [5, 6, 7], "c": [1, 2]})
    spec = _measurement("ngram", {"a": [1, 2, 9, 4], "b": [5, 6, 7], "c": [1, 2, 3]})
    pairs = [_pairing(spec, base)]
    prompts = {"a": "Once upon a time", "b": "x", "c": "y"}
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")  # weights that no target loads from
    # specrig's own interpreter (no torch) and empty weights: the script fails, the check still
    # reports what it measured, and why its divergences are not classified
    out = explain(pairs, [spec], [base], prompts=prompts, python=sys.executable, model_path=str(model), work=tmp_path)
    lo = out[0].lossless
    assert lo is not None and (lo.identical, lo.compared) == (1, 3)
    a, c = lo.divergences
    assert (a.prompt_id, a.position, a.target) == ("a", 2, None)
    assert a.unexplained and a.unexplained.startswith("the target's logits could not be computed: ")
    assert "failed (exit 1)" in a.unexplained
    assert c.unexplained == "the baseline output ends at token 2"  # a side that ended has no token to explain
    assert "not classified: the target's logits could not be computed" in lo.describe()
    assert not (tmp_path / "target-margins.json").exists()  # no half-written answer left behind
    # an attached run has no environment or model folder to run the target with
    out = explain(pairs, [spec], [base], prompts=prompts, python=None, model_path=None, work=tmp_path)
    assert "attached --endpoint run" in (out[0].lossless.divergences[0].unexplained or "")  # type: ignore[union-attr]
    # a shaped model served with dummy weights: no target to ask
    out = explain(
        pairs, [spec], [base], prompts=prompts, python=sys.executable, model_path=str(tmp_path), work=tmp_path
    )
    assert "holds no weights" in (out[0].lossless.divergences[0].unexplained or "")  # type: ignore[union-attr]
    # unknown prompt text
    out = explain(pairs, [spec], [base], prompts={}, python=None, model_path=None, work=tmp_path)
    assert out[0].lossless.divergences[0].unexplained == "the text of prompt a is not known"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- the real target

INDEPENDENT = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, text, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
ids = torch.tensor([tok(text)["input_ids"]])
past, steps = None, []
with torch.inference_mode():
    for _ in range(n):
        r = model(input_ids=ids, past_key_values=past, use_cache=True)
        past = r.past_key_values
        z = r.logits[0, -1].double()
        order = torch.argsort(z, descending=True)
        low = int(order[999])
        steps.append({"top": [int(order[0]), int(order[1])], "logits": [float(z[order[0]]), float(z[order[1]])],
                      "low": low, "low_logit": float(z[low]), "low_rank": 1 + int((z > z[low]).sum())})
        ids = order[:1].view(1, 1)
print(json.dumps(steps))
"""

TOKENS = 40


@dataclass(frozen=True)
class Target:
    python: str
    model_path: str
    prompt: str
    steps: list[dict]
    """Per greedy step, computed independently: top-2 ids and logits, the 1000th token, its logit and rank."""

    @property
    def greedy(self) -> list[int]:
        return [s["top"][0] for s in self.steps]

    @property
    def margins(self) -> list[float]:
        return [s["logits"][0] - s["logits"][1] for s in self.steps]


@pytest.fixture(scope="module")
def target() -> Target:
    from specrig.env.make import make_env
    from specrig.model.folder import prepare_model
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    env = make_env(recipe, recipe.engine["vllm"].env)
    model = prepare_model(recipe, env)
    prompt = STORY_PROMPTS[0].text
    proc = subprocess.run(
        [str(env.python), "-c", INDEPENDENT, str(model.path), prompt, str(TOKENS)],
        capture_output=True,
        text=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Target(str(env.python), str(model.path), prompt, json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.engine
@pytest.mark.slow
def test_the_target_explains_runner_up_and_low_ranked_divergences(target: Target, tmp_path: Path) -> None:
    steps, greedy, margins = target.steps, target.greedy, target.margins
    # the closest call and the clearest choice of the continuation (past the first few tokens)
    close = min(range(2, TOKENS), key=lambda i: margins[i])
    clear = max(range(2, TOKENS), key=lambda i: margins[i])
    assert margins[clear] > NEAR_TIE_LOGITS  # a 135M model is sure of some tokens
    outputs = {
        "close": greedy[:close] + [steps[close]["top"][1]] + [0] * 3,  # (a) the runner-up where the target hesitates
        "clear": greedy[:clear] + [steps[clear]["top"][1]],  # (a) the runner-up where it does not
        "low": greedy[:close] + [steps[close]["low"]],  # (b) a token ranked 1000th
        "same": greedy,
    }
    base = _measurement("baseline", {k: greedy for k in outputs})
    spec = _measurement("eagle3", outputs)
    prompts = {k: target.prompt for k in outputs}
    out = explain(
        [_pairing(spec, base)],
        [spec],
        [base],
        prompts=prompts,
        python=target.python,
        model_path=target.model_path,
        work=tmp_path,
    )
    lo = out[0].lossless
    assert lo is not None and (lo.identical, lo.compared, len(lo.divergences)) == (1, 4, 3)
    by = {d.prompt_id: d for d in lo.divergences}
    assert all(d.unexplained is None and d.target is not None for d in by.values())
    for pid, pos in (("close", close), ("clear", clear), ("low", close)):
        t = by[pid].target
        assert t is not None and by[pid].position == pos
        # the script's figures against the independent computation (a KV-cached decode, float64 readout)
        assert t.top == steps[pos]["top"] and t.baseline_token == greedy[pos] and t.baseline_rank == 1
        assert t.top_logits == pytest.approx(steps[pos]["logits"], abs=2e-3)
        assert t.margin == pytest.approx(margins[pos], abs=2e-3)
        assert t.baseline_logit == pytest.approx(steps[pos]["logits"][0], abs=2e-3)
    for pid, pos in (("close", close), ("clear", clear)):
        t = by[pid].target
        assert t is not None and t.spec_rank == 2 and t.gap == pytest.approx(margins[pos], abs=2e-3)
        assert t.verdict == ("near-tie" if margins[pos] <= NEAR_TIE_LOGITS else "real loss")
    assert by["clear"].target.verdict == "real loss"  # type: ignore[union-attr]
    low = by["low"].target
    assert low is not None and low.verdict == "real loss"
    assert low.spec_token == steps[close]["low"] and low.spec_rank == steps[close]["low_rank"] == 1000
    assert low.spec_logit == pytest.approx(steps[close]["low_logit"], abs=2e-3)
    assert low.gap == pytest.approx(steps[close]["logits"][0] - steps[close]["low_logit"], abs=2e-3)
    # the figures on disk: one run of the script, the inputs beside its answer
    answer = json.loads((tmp_path / "target-margins.json").read_text())
    assert answer["dtype"] == "float32" and len(answer["contexts"]) == 2  # "close" and "low" share one context
    text = lo.describe()
    below = {"clear": margins[clear], "low": steps[close]["logits"][0] - steps[close]["low_logit"]}
    worst = max(below, key=below.__getitem__)
    assert f"REAL LOSSES (worst: {worst} at token {by[worst].position}: spec's token ranks " in text
    assert ("1 numerical near-tie" in text) == (margins[close] <= NEAR_TIE_LOGITS)
    print(f"\nclosest margin {margins[close]:.3f} at {close}, clearest {margins[clear]:.3f} at {clear}\n{text}")


@pytest.mark.engine
@pytest.mark.slow
def test_the_bench_explains_at_its_call_site_and_the_report_says_so(target: Target, tmp_path: Path) -> None:
    """The wiring: the bench's plugin builds the summary from pytest-benchmark's JSON with the
    lab's prompts, the target is asked, summary.json keeps the figures, report.md the verdict."""
    from specrig.lab.plan import BenchPlan, ConfigPlan, Workload
    from specrig.lab.plugin import SpecrigPlugin
    from specrig.lab.results import load_summary
    from specrig.lab.summary import summary_from_benchmark_json
    from specrig.recipe.schema import load_recipe
    from specrig.report.render import write_report

    steps, greedy = target.steps, target.greedy
    at = max(range(2, TOKENS), key=lambda i: target.margins[i])
    first, second = (p.id for p in STORY_PROMPTS[:2])  # the story workload's prompts; the target's is the first
    base = _measurement("baseline", {first: greedy, second: greedy})
    spec = _measurement("ngram", {first: greedy[:at] + [steps[at]["low"]], second: greedy})
    recipe = load_recipe("cpu")
    plan = BenchPlan(
        startup_timeout_s=60.0,
        recipe="cpu",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=[ConfigPlan(name="baseline"), ConfigPlan(name="ngram", spec=recipe.spec["ngram"])],
        workload=Workload(
            dataset="story", num_prompts=2, max_tokens=TOKENS, stall_timeout_s=60.0, first_token_timeout_s=60.0
        ),
        python=target.python,
        model_path=target.model_path,
    )
    plugin = SpecrigPlugin(plan, recipe, write=write_report)
    lab = plugin.open_lab()  # no server: the story prompts are made without one, the runs are given
    assert lab.prompts("")[0].text == target.prompt
    lab.measured = {(m.config, m.point.label, m.repeat): m for m in (base, spec)}
    data = {"benchmarks": [{"extra_info": {"specrig": m.model_dump(mode="json")}} for m in (base, spec)]}
    plugin.pytest_benchmark_update_json(None, [], data)  # type: ignore[arg-type]
    plugin.finish()
    lo = load_summary(tmp_path).pairings[0].lossless
    assert lo is not None and plugin.summary is not None and lo == plugin.summary.pairings[0].lossless
    (d,) = lo.divergences
    assert d.target is not None and d.target.verdict == "real loss" and d.target.spec_rank == 1000
    below = steps[at]["logits"][0] - steps[at]["low_logit"]
    line = (
        f"identical 1/2; 1 divergence, a REAL LOSS ({first} at token {at}: spec's token ranks 1000, "
        f"{below:.2f} logits below the target's choice)"
    )
    assert lo.describe() == line
    report = (tmp_path / "report.md").read_text()
    assert line in report and "1/2 LOSS" in report
    assert (tmp_path / "lossless" / "target-margins.json").is_file()
    # without the texts (a summary rebuilt later), nothing runs and the divergence stays as measured
    bare = summary_from_benchmark_json(data, plan, recipe).pairings[0].lossless
    assert bare is not None and bare.divergences[0].target is None and f"first divergence: {first}" in bare.describe()
