"""pytest in studies/: a study that recorded a GPU run keeps its raw capture beside its README
(``capture/``) and its replay, ``test_replay.py``, the check that re-derives the recorded figures
from the capture with today's code. The default command collects them (pyproject.toml's
``testpaths``: tests, then studies).

The replays import their own helpers from studies/replay_support.py (pytest puts this folder on
``sys.path`` as it imports this file) and the ones they share with the contract tests from tests/
(put on ``sys.path`` here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.hookimpl(tryfirst=True)
def pytest_collectstart(collector: pytest.Collector) -> None:
    """Every replay is named ``test_replay``, and pytest's default import mode imports a test file by
    its name on ``sys.path``: the replay imported before is forgotten first, as pytest does itself
    for conftest.py files, so each study's file is imported from its own folder."""
    if isinstance(collector, pytest.Module) and collector.path.name == "test_replay.py":
        sys.modules.pop("test_replay", None)
