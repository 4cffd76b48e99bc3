"""The pytest-benchmark suite that drives a real engine.

By hand::

    pytest bench/ --specrig-recipe cpu --specrig-spec ngram --specrig-concurrency 1,4 \\
        --benchmark-autosave --benchmark-compare --benchmark-compare-fail=mean:25%

Every ``specrig bench`` option is here as ``--specrig-NAME``. The hooks and
fixtures are one plugin object, :class:`specrig.lab.plugin.SpecrigPlugin`:
``specrig bench`` passes it to ``pytest.main`` with its prepared plan; by hand,
this file registers one that makes the plan from the options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specrig.lab.measure import Lab
from specrig.lab.plan import BenchPlan, Case
from specrig.lab.plugin import SpecrigPlugin
from specrig.report.render import print_summary, write_report


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not any(isinstance(p, SpecrigPlugin) for p in pluginmanager.get_plugins()):
        pluginmanager.register(SpecrigPlugin(write=write_report, show=print_summary), "specrig")


@pytest.fixture(scope="session")
def plan(request: pytest.FixtureRequest) -> BenchPlan:
    return SpecrigPlugin.of(request.config)._plan()


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, plan: BenchPlan) -> Iterator[Lab]:
    """One server at a time; measurements kept for pairing (the paired baseline fixture)."""
    lab = SpecrigPlugin.of(request.config).open_lab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def paired_baseline(lab: Lab, case: Case) -> list:
    return SpecrigPlugin.paired_baseline(lab, case)
