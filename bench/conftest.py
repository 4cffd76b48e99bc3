"""The pytest-benchmark suite that drives a real engine.

By hand::

    pytest bench/ --specrig-recipe cpu --specrig-spec ngram --specrig-concurrency 1,4 \\
        --benchmark-autosave --benchmark-compare --benchmark-compare-fail=mean:25%

(``specrig bench`` / ``nox -s bench -- ...`` prepares a plan and passes
``--specrig-plan FILE``.) Every ``specrig bench`` option is here as
``--specrig-NAME``. Each test is one ``(repeat, configuration, load point)``,
in the interleaved order; the session-scoped ``lab`` keeps one server at a time
and measures the paired baseline on demand, so ``-k ngram`` still pairs.

One pytest-benchmark round = one completed request (see specrig.measure).
Benchmarks are stored under specrig's cache (``--benchmark-storage`` overrides),
so ``--benchmark-compare``/``--benchmark-compare-fail`` work across runs; the
summary (summary.json, report.md, PNGs) is built from pytest-benchmark's JSON.
A failure specrig can name is shown as specrig's message, not a traceback."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specrig.errors import SpecrigError
from specrig.measure import Lab
from specrig.paths import subdir
from specrig.plan import OPTIONS, BenchPlan, Case, add_options, prepare_plan
from specrig.recipe import load_recipe

_PLAN = pytest.StashKey[BenchPlan]()
_LAB = pytest.StashKey[Lab]()
_SUMMARY = pytest.StashKey[Any]()
_ERRORS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specrig", "specrig bench (every `specrig bench` option, prefixed --specrig-)")
    g.addoption("--specrig-plan", metavar="FILE", help="a plan written by `specrig bench` (plan.json)")
    g.addoption("--specrig-recipe", metavar="NAME|PATH", help="recipe (default: the host's, as `specrig bench`)")
    g.addoption("--specrig-no-table", action="store_true", help="do not print specrig's table (the CLI prints it)")
    add_options(g.addoption, prefix="specrig-")


def _options(config: pytest.Config) -> argparse.Namespace:
    ns = argparse.Namespace()
    for name, _ in OPTIONS:
        attr = name.replace("-", "_")
        setattr(ns, attr, config.getoption(f"specrig_{attr}"))
    return ns


def _plan(config: pytest.Config) -> BenchPlan:
    if _PLAN in config.stash:
        return config.stash[_PLAN]
    path = config.getoption("specrig_plan")
    try:
        if path:
            plan = BenchPlan.read(Path(path))
        else:
            from specrig.cli.common import default_recipe_name

            recipe = load_recipe(config.getoption("specrig_recipe") or default_recipe_name())
            plan = prepare_plan(_options(config), recipe)
    except SpecrigError as exc:
        raise pytest.UsageError(f"specrig: {exc}") from None
    config.stash[_PLAN] = plan
    return plan


def pytest_configure(config: pytest.Config) -> None:
    # runs before pytest-benchmark's own (trylast) configure: storage and JSON defaults
    config.stash[_ERRORS] = []
    if not hasattr(config.option, "benchmark_storage") or config.getoption("help") or config.getoption("collectonly"):
        return
    if config.option.benchmark_storage == "file://./.benchmarks":
        config.option.benchmark_storage = f"file://{subdir('benchmarks')}"
    if config.option.benchmark_json is None:
        # the summary is built from this JSON; with a plan file it goes straight into its results
        # folder, else (the plan is made at collection, only if test_decode is collected) it is
        # copied there when written
        plan_file = config.getoption("specrig_plan")
        where = Path(_plan(config).results_dir) if plan_file else subdir("results")
        config.option.benchmark_json = str(where / ("benchmark.json" if plan_file else "latest-benchmark.json"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = _plan(metafunc.config).cases()
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def plan(request: pytest.FixtureRequest) -> BenchPlan:
    return _plan(request.config)


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, plan: BenchPlan) -> Iterator[Lab]:
    """One server at a time; measurements kept for pairing (the paired baseline fixture)."""
    lab = Lab(plan)
    request.config.stash[_LAB] = lab
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def paired_baseline(lab: Lab, case: Case) -> list:
    """The baseline at this case's load and repeat: measured now if no test has, or from --baseline."""
    if lab.plan.config(case.config).spec is None:
        return []
    if not lab.plan.baseline_run and any(c.name == "baseline" for c in lab.plan.configs):
        lab.measure(Case("baseline", case.point, case.repeat))
    return lab.paired_baseline(case)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A SpecrigError (dead engine, bad option) is reported as specrig's message, no traceback."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and isinstance(call.excinfo.value, SpecrigError):
        exc = call.excinfo.value
        report.longrepr = f"specrig: error: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else "")
        item.config.stash[_ERRORS].append(
            {"test": item.name, "type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
        )


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    if _PLAN not in config.stash:
        return
    plan = config.stash[_PLAN]
    machine_info["specrig"] = {
        "recipe": plan.recipe,
        "engine": plan.engine,
        "lock_digest": plan.lock_digest,
        "model": plan.model_source,
        "host": plan.host,
    }


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """Build specrig's summary from this very JSON: summary.json, report.md, PNGs."""
    if _PLAN not in config.stash or _LAB not in config.stash:
        return
    from specrig.report import write_report
    from specrig.sweep import summary_from_benchmark_json

    plan, lab = config.stash[_PLAN], config.stash[_LAB]
    output_json["specrig_plan"] = json.loads(plan.model_dump_json())
    summary = summary_from_benchmark_json(
        output_json,
        plan,
        lab.recipe,
        earlier=lab.earlier_baselines(),
        server_info=lab.server_info,
        errors=config.stash[_ERRORS],
    )
    results = Path(plan.results_dir)
    if not (results / "benchmark.json").is_file():
        (results / "benchmark.json").write_text(json.dumps(output_json, indent=2, default=str))
    write_report(results, summary)
    config.stash[_SUMMARY] = summary


def pytest_sessionfinish(session: pytest.Session) -> None:
    errors = session.config.stash.get(_ERRORS, [])
    if errors and _PLAN in session.config.stash:
        (Path(session.config.stash[_PLAN].results_dir) / "errors.json").write_text(json.dumps(errors, indent=2))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _SUMMARY in config.stash and not config.getoption("specrig_no_table"):
        from specrig.report import print_summary

        print_summary(config.stash[_SUMMARY])
        terminalreporter.write_line(f"specrig results: {config.stash[_PLAN].results_dir}")
