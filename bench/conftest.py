"""The pytest-benchmark suite that drives a real engine.

By hand::

    pytest bench/ --specrig-recipe cpu --specrig-spec ngram --specrig-concurrency 1,4 \\
        --benchmark-autosave --benchmark-compare --benchmark-compare-fail=mean:25%

Every ``specrig bench`` option is here as ``--specrig-NAME``. The hooks and
fixtures are one plugin object, :class:`specrig.lab.plugin.SpecrigPlugin`:
``specrig bench`` passes it to ``pytest.main`` with its prepared plan; by hand,
this file registers one that makes the plan from the options."""

from __future__ import annotations

import pytest

from specrig.lab.plugin import SpecrigPlugin
from specrig.report.render import print_summary, write_report


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not any(isinstance(p, SpecrigPlugin) for p in pluginmanager.get_plugins()):
        pluginmanager.register(SpecrigPlugin(write=write_report, show=print_summary), "specrig")
