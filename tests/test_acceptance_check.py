"""``bench --acceptance-check``: the interval of the acceptance gap compiled - eager and its
verdict, the options that refuse it, the plan that adds each compiled configuration's eager
twin (the GPU recipe planned without a GPU, its servers' command lines built, none started),
and the summary, report and console lines from synthetic measurements with known answers."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from specrig.core.counters import SpecCounters
from specrig.core.errors import ConfigError
from specrig.engine import get_engine
from specrig.engine.base import LaunchPlan
from specrig.lab.eager import with_eager_twins
from specrig.lab.options import BenchOptions, declare
from specrig.lab.plan import BenchPlan, ConfigPlan, Workload, _checked, _configs
from specrig.lab.results import LoadPoint, load_summary
from specrig.lab.servers import Servers
from specrig.lab.summary import summary_from_benchmark_json
from specrig.recipe.schema import Recipe, load_recipe
from specrig.report.render import notes, throughput_rows, write_report
from specrig.serve.server import Server
from specrig.specdec.gap import RateGap, rate_gap, rate_variance
from test_bench_summary import PROMPTS, _m, _recipe


def _opts(*argv: str) -> BenchOptions:
    p = argparse.ArgumentParser()
    declare(p.add_argument)
    ns = p.parse_args(list(argv))
    return BenchOptions.collect(lambda name: getattr(ns, name))


def _k1(accepted: float, drafted: float) -> SpecCounters:
    return SpecCounters(
        drafts=drafted, draft_tokens=drafted, accepted_tokens=accepted, k=1, accepted_per_position=(accepted,)
    )


# ---------------------------------------------------------------------- the interval and the verdict


def test_at_k1_the_interval_is_the_two_proportion_one() -> None:
    g = rate_gap(_k1(0.301 * 7500, 7500), _k1(0.367 * 7500, 7500))
    half = 1.959964 * math.sqrt((0.301 * 0.699 + 0.367 * 0.633) / 7500)
    assert (g.first, g.second, g.gap) == (pytest.approx(0.301), pytest.approx(0.367), pytest.approx(-0.066))
    assert (g.low, g.high) == (pytest.approx(-0.066 - half), pytest.approx(-0.066 + half))
    assert (round(100 * g.low, 1), round(100 * g.high, 1)) == (-8.1, -5.1)
    # without per-position counts at k=1 the variance is the same binomial one
    bare = SpecCounters(drafts=7500, draft_tokens=7500, accepted_tokens=0.301 * 7500, k=1)
    assert rate_variance(bare) == pytest.approx(0.301 * 0.699 / 7500)


def test_a_steps_tokens_are_not_independent_trials() -> None:
    """At k=2 the variance is taken per verification step: from the per-position counts, exactly
    (100 steps, 60 accepted the first proposal, 30 both: E[L] 0.9, E[L^2] 1.5), else its bound,
    k times the binomial's over tokens; either is wider than treating 200 tokens as independent."""
    c = SpecCounters(drafts=100, draft_tokens=200, accepted_tokens=90, k=2, accepted_per_position=(60, 30))
    p = 90 / 200
    assert rate_variance(c) == pytest.approx((1.5 - 0.9**2) / (100 * 2**2))
    bound = p * (1 - p) * 2 / 200
    assert p * (1 - p) / 200 < rate_variance(c) < bound
    for odd in ((30, 60), (60, 20), (120, 90)):  # not a step's prefix, or not the accepted total: the bound
        assert rate_variance(SpecCounters(100, 200, 90, 2, odd)) == pytest.approx(bound)
    assert rate_variance(SpecCounters(100, 200, 90, 2)) == pytest.approx(bound)
    with pytest.raises(ValueError, match="no draft tokens"):
        rate_variance(SpecCounters(0, 0, 0, 2))


@pytest.mark.parametrize(
    "gap, verdict",
    [
        (RateGap(0.30, 0.37, -0.07, -0.085, -0.055), "loses"),
        (RateGap(0.37, 0.36, 0.01, -0.01, 0.03), "within noise"),
        (RateGap(0.30, 0.32, -0.02, -0.09, 0.05), "too few"),  # a loss of 9 points fits the interval
        (RateGap(0.40, 0.30, 0.10, 0.08, 0.12), "gains"),
    ],
)
def test_the_verdict(gap: RateGap, verdict: str) -> None:
    assert gap.verdict() == verdict


# ---------------------------------------------------------------------- the options


@pytest.mark.parametrize(
    "argv, msg",
    [
        (("--acceptance-check",), "--spec none has none"),
        (("--acceptance-check", "--spec", "none"), "--spec none has none"),
        (("--acceptance-check", "--spec", "ngram", "--endpoint", "http://127.0.0.1:9"), "does not launch the server"),
    ],
)
def test_it_is_refused_where_it_cannot_apply(argv: tuple[str, ...], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        _opts(*argv)
    assert _opts("--spec", "ngram", "--acceptance-check").acceptance_check
    assert not _opts("--spec", "ngram").acceptance_check


# ---------------------------------------------------------------------- the plan


def _planned(recipe_name: str, *argv: str, engine: str = "vllm") -> tuple[BenchPlan, object]:
    """The plan's configurations for ``argv`` (no environment, model or GPU: nothing is made)."""
    opts = _opts("--engine", engine, *argv)
    recipe = load_recipe(recipe_name)
    checked = _checked(opts, recipe)
    plan = BenchPlan(
        startup_timeout_s=60.0,
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        engine=engine,
        results_dir="/nonexistent",
        # the drafter a model would have prepared (SGLang's EAGLE-3 launch line needs its path)
        configs=[
            c.model_copy(update={"drafter": "/drafter"}) if c.spec and c.spec.model else c
            for c in _configs(opts, checked, launching=True, env=None, model=None)
        ],
        workload=checked.workload,
        python="/env/bin/python",
        model_path="/m",
        served_name="m",
        engine_args=list(opts.engine_arg),
        acceptance_note=checked.eager[1],
    )
    return plan, recipe


def _argv(plan: BenchPlan, recipe: object, config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command line the lab's servers would start ``config`` with (the server is not started)."""
    monkeypatch.setattr(Server, "start", lambda self: self)
    servers = Servers(plan, recipe, get_engine(plan.engine), tmp_path)  # type: ignore[arg-type]
    monkeypatch.setattr(servers, "_preflight", lambda launch: None)
    return servers._launch(plan.named(config).id, 0, []).plan.argv


@pytest.mark.parametrize("engine, flag", [("vllm", "--enforce-eager"), ("sglang", "--disable-cuda-graph")])
def test_the_plan_adds_an_eager_twin_after_each_compiled_configuration(
    engine: str, flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, recipe = _planned("hopper-sm90", "--spec", "eagle3,ngram", "--k", "1,3", "--acceptance-check", engine=engine)
    names = [c.name for c in plan.configs]
    assert names == [
        *("baseline", "eagle3-k1", "eagle3-k1-eager", "eagle3-k3", "eagle3-k3-eager"),
        *("ngram-k1", "ngram-k1-eager", "ngram-k3", "ngram-k3-eager"),
    ]
    twin, compiled = plan.named("eagle3-k1-eager"), plan.named("eagle3-k1")
    # a distinct identity (what the summary pairs by), the same configuration otherwise
    assert twin.id == compiled.id.model_copy(update={"eager": True}) and twin.id != compiled.id
    assert twin.spec == compiled.spec and twin.server_args == [flag] and compiled.server_args == []
    assert plan.acceptance_note is None
    # the same prompts at the same loads: every case of the configuration has its twin's
    cases = [(c.point, c.repeat) for c in plan.cases()]
    assert cases.count((plan.workload.points[0], 0)) == len(names)
    assert flag in _argv(plan, recipe, "eagle3-k1-eager", tmp_path, monkeypatch)
    assert flag not in _argv(plan, recipe, "eagle3-k1", tmp_path, monkeypatch)
    # without the option, nothing is added
    assert [c.name for c in _planned("hopper-sm90", "--spec", "ngram", engine=engine)[0].configs] == [
        "baseline",
        "ngram",
    ]


def test_servers_already_eager_add_nothing_and_say_so_once() -> None:
    """The cpu recipe serves with --enforce-eager; so does a GPU recipe given it through --engine-arg."""
    for recipe_name, extra in (("cpu", ()), ("hopper-sm90", ("--engine-arg=--enforce-eager",))):
        plan, _ = _planned(recipe_name, "--spec", "ngram", "--acceptance-check", *extra)
        assert [c.name for c in plan.configs] == ["baseline", "ngram"]
        assert plan.acceptance_note and "already run eager (--enforce-eager" in plan.acceptance_note


# ---------------------------------------------------------------------- the summary, report and console

POINTS = [LoadPoint(concurrency=1), LoadPoint(concurrency=4)]
RATES = {  # acceptance (compiled, eager) at each load, k=1: a loss at one stream, none at four
    1: (0.301, 0.367),
    4: (0.360, 0.362),
}


def _ngram_k1_and_twins(recipe: Recipe) -> list[ConfigPlan]:
    """The baseline and ngram at k=1 (``ngram-k1``), each beside its ``--enforce-eager`` twin."""
    from specrig.lab.identity import ConfigId

    spec = recipe.spec["ngram"].model_copy(update={"num_speculative_tokens": 1})
    configs = [ConfigPlan(name="baseline"), ConfigPlan(id=ConfigId(spec="ngram", k=1, engine="vllm"), spec=spec)]
    return with_eager_twins(configs, "--enforce-eager")


def _summary_inputs(tmp_path: Path) -> tuple[dict, BenchPlan]:
    recipe = _recipe(tmp_path)
    plan = BenchPlan(
        startup_timeout_s=60.0,
        recipe="mini",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=_ngram_k1_and_twins(recipe),
        workload=Workload(
            dataset="story",
            num_prompts=4,
            max_tokens=32,
            points=POINTS,
            repeat=2,
            stall_timeout_s=60.0,
            first_token_timeout_s=60.0,
        ),
        served_name="smollm2",
        model_source="test",
        host={"cpus": 2, "gpus": []},
    )
    benches = []
    for rep in (0, 1):
        for p in POINTS:
            compiled_rate, eager_rate = RATES[p.concurrency]  # type: ignore[index]
            for config, rate, tok_s in (
                ("baseline", 0.0, 10.0),
                ("ngram-k1", compiled_rate, 12.0),
                ("ngram-k1-eager", eager_rate, 7.0),  # eager is slower: not what is recommended
            ):
                m = _m(config, p, rep, tok_s).model_copy(update={"id": plan.named(config).id})
                if config != "baseline":  # 3750 steps a run, 7500 over the two repeats
                    m = m.model_copy(update={"spec_counters": _k1(rate * 3750, 3750)})
                benches.append({"extra_info": {"specrig": m.model_dump(mode="json")}})
    return {"benchmarks": benches}, plan


def test_the_summary_reports_the_gap_per_pairing(tmp_path: Path) -> None:
    data, plan = _summary_inputs(tmp_path)
    s = summary_from_benchmark_json(data, plan, _recipe(tmp_path))
    one, four = s.acceptance_checks
    assert (one.config, one.eager_config, one.point, one.k, one.eager_args) == (
        "ngram-k1",
        "ngram-k1-eager",
        POINTS[0],
        1,
        ["--enforce-eager"],
    )
    assert (one.compiled_draft_tokens, one.eager_draft_tokens) == (7500, 7500)
    assert one.verdict == "loses" and one.gap == pytest.approx(-0.066)
    assert one.line == (
        "acceptance under the compiled path 30.1% vs eager (--enforce-eager) 36.7%: gap -6.6 points "
        "(95% CI -8.1 to -5.1): the compiled path loses acceptance"
    )
    assert four.verdict == "within noise" and four.line.endswith("within noise: the compiled path is not the cause")
    # the compiled configuration's diagnosis says what the rerun found; the twin's says what the twin is
    by = {(p.config, p.point.concurrency): p for p in s.pairings}
    assert (
        "--acceptance-check ran it eager (--enforce-eager, the same prompts): gap -6.6 points"
        in by[("ngram-k1", 1)].diagnosis
    )
    assert by[("ngram-k1-eager", 1)].diagnosis.startswith("the eager twin of ngram-k1 (--enforce-eager")
    # the twin is measured and shown, but neither gated nor recommended
    assert s.config("ngram-k1-eager").thresholds == []  # type: ignore[union-attr]
    assert all("eager" not in line for line in s.recommendations + s.crossover)
    assert any(row[0] == "ngram-k1-eager" for row in throughput_rows(s))
    # the console and report.md print one line per pairing; summary.json keeps it typed
    lines = notes(s)
    assert f"acceptance check, ngram-k1 @ concurrency 1: {one.line}" in lines
    assert f"acceptance check, ngram-k1 @ concurrency 4: {four.line}" in lines
    write_report(tmp_path, s)
    assert one.line in (tmp_path / "report.md").read_text()
    assert load_summary(tmp_path).acceptance_checks == s.acceptance_checks


def test_a_twin_that_counted_nothing_is_said_and_an_eager_server_is_noted(tmp_path: Path) -> None:
    data, plan = _summary_inputs(tmp_path)
    data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"]["specrig"]["config"] != "ngram-k1-eager"]
    s = summary_from_benchmark_json(data, plan, _recipe(tmp_path))
    assert [c.verdict for c in s.acceptance_checks] == ["unmeasured", "unmeasured"]
    assert s.acceptance_checks[0].line == "no acceptance check: ngram-k1-eager counted no draft tokens at concurrency 1"
    note = "--acceptance-check: the servers already run eager (--enforce-eager is among their arguments): ..."
    eager = plan.model_copy(update={"configs": plan.configs[:2], "acceptance_note": note})
    s = summary_from_benchmark_json(data, eager, _recipe(tmp_path))
    assert s.acceptance_checks == [] and s.acceptance_note == note and note in notes(s)


# ---------------------------------------------------------------------- the plumbing, with launched servers


class ModedEngine:
    """vLLM's adapter whose server is specrig's synthetic one (it models no engine mode): the
    server arguments it is given ride on the synthetic command line, and the speculative counters
    it reports are those of the mode the measured server was started in: 30% accepted compiled,
    37% eager (``--enforce-eager`` among its arguments), one draft token a step."""

    def __init__(self) -> None:
        self._vllm = get_engine("vllm")
        self.eager: bool | None = None
        self.launched: list[list[str]] = []

    def __getattr__(self, name: str) -> object:  # everything else: vLLM's (flags, paths, request bodies)
        return getattr(self._vllm, name)

    metrics_path = server_info_path = generation_tokens_metric = None

    def launch(self, *, port: int, extra_args: list[str], spec: object, **_: object) -> LaunchPlan:
        from specrig.serve.synthetic import Behaviour, command

        self.launched.append(list(extra_args))
        self.eager = "--enforce-eager" in extra_args
        env = {"VLLM_CPU_KVCACHE_SPACE": "0"}  # no KV cache: the CPU preflight asks for 1 GiB free
        return LaunchPlan([*command(Behaviour(), port), *extra_args], env, f"http://127.0.0.1:{port}")

    def request_spec(self, final_payload: dict) -> None:
        return None

    def spec_counters(self, *, completion_tokens: int, spec: object, **_: object) -> SpecCounters:
        accepted = round((0.37 if self.eager else 0.30) * completion_tokens)
        return SpecCounters(completion_tokens, completion_tokens, accepted, 1, (accepted,), source="moded")


def test_the_twin_is_served_eager_and_checked_on_the_same_prompts(tmp_path: Path) -> None:
    from specrig.lab.measure import Lab

    recipe = load_recipe("cpu")
    (tmp_path / "model").mkdir()
    plan = BenchPlan(
        recipe="cpu",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=_ngram_k1_and_twins(recipe),
        workload=Workload(
            dataset="story",
            num_prompts=5,
            max_tokens=400,
            warmup_requests=0,
            stall_timeout_s=60.0,
            first_token_timeout_s=60.0,
        ),
        python="/unused/python",
        model_path=str(tmp_path / "model"),
        served_name="smollm2",
        engine_args=["--run-wide"],
        startup_timeout_s=60,
    )
    lab = Lab(plan, recipe)
    engine = ModedEngine()
    lab.engine = lab.servers.engine = engine  # type: ignore[assignment]
    try:
        for case in plan.cases():
            lab.measure(case)
    finally:
        lab.close()
    assert engine.launched == [["--run-wide"], ["--run-wide"], ["--run-wide", "--enforce-eager"]]
    ms = list(lab.measured.values())
    prompts = {m.config: [r.prompt_id for r in m.requests] for m in ms}
    assert prompts["ngram-k1-eager"] == prompts["ngram-k1"] == prompts["baseline"]
    data = {"benchmarks": [{"extra_info": {"specrig": m.model_dump(mode="json")}} for m in ms]}
    s = summary_from_benchmark_json(data, plan, recipe, server_info=lab.server_info)
    assert s.config("ngram-k1-eager").server_argv[-1] == "--enforce-eager"  # type: ignore[union-attr]
    (check,) = s.acceptance_checks
    assert (check.compiled_rate, check.eager_rate, check.compiled_draft_tokens) == (0.3, 0.37, 2000)
    assert check.verdict == "loses" and "the compiled path loses acceptance" in check.line


def test_answers_that_differ_are_said_beside_the_interval(tmp_path: Path) -> None:
    """Where the eager twin wrote other answers than the compiled path, the two rates count different
    text: the check says on how many prompts, since its interval (over steps) cannot cover that."""
    data, plan = _summary_inputs(tmp_path)
    for b in data["benchmarks"]:
        m = b["extra_info"]["specrig"]
        for r in m["requests"]:
            eager_p2 = m["config"] == "ngram-k1-eager" and r["prompt_id"] == PROMPTS[1]
            r["token_ids"] = [1, 2, 9] if eager_p2 else [1, 2, 3]
    s = summary_from_benchmark_json(data, plan, _recipe(tmp_path))
    one = s.acceptance_checks[0]
    assert (one.prompts, one.same_text) == (2 * len(PROMPTS), 2 * len(PROMPTS) - 2)  # two repeats
    assert one.line.endswith(
        f"the compiled path loses acceptance; the two paths' answers differ on 2 of {2 * len(PROMPTS)} prompts, "
        "so the rates count different text: the interval counts verification steps, not prompts; confirm on "
        "many prompts (--dataset sharegpt --num-prompts 40, --repeat 3)"
    )
    paired = next(p for p in s.pairings if p.config == "ngram-k1" and p.point == one.point)
    assert "differ on 2 of" in paired.diagnosis
