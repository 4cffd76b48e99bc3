"""The pytest-benchmark suite that drives a real engine.

Run it through ``nox -s bench -- ...`` (``specrig bench``): that command makes
the environment and model, writes a plan (BenchPlan JSON) and points
``SPECRIG_BENCH_PLAN`` at it. Each configuration of the plan (baseline first,
then each speculative configuration) becomes one test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specrig.benchrun import BenchPlan


def _plan() -> BenchPlan:
    path = os.environ.get("SPECRIG_BENCH_PLAN")
    if not path:
        raise pytest.UsageError("SPECRIG_BENCH_PLAN is not set: run the suite with `nox -s bench -- ...`")
    return BenchPlan.read(Path(path))


@pytest.fixture(scope="session")
def plan() -> BenchPlan:
    return _plan()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "config_name" in metafunc.fixturenames:
        names = [c.name for c in _plan().configs]
        metafunc.parametrize("config_name", names, ids=names)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    plan = _plan()
    machine_info["specrig"] = {
        "recipe": plan.recipe,
        "engine": plan.engine,
        "lock_digest": plan.lock_digest,
        "model": plan.model_source,
        "host": plan.host,
    }
