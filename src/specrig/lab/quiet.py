"""``specrig bench`` speaks for itself: pytest's own report (progress dots, the warnings summary,
``1 passed in 0.3s`` or ``no tests ran in 108 s``, the ``Interrupted`` banner, pytest-benchmark's
table and its messages) goes to the run's ``logs/pytest.log`` instead of the console, where
specrig prints its tables and says what happened in its own words (a failed test by its name
and exception, :attr:`QuietReport.failures`). ``pytest bench/`` by hand keeps pytest's report on
the terminal: there pytest is the interface."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from _pytest._io import TerminalWriter  # the writer pytest's reporter and pytest-benchmark's logger write through

__all__ = ["LOG_NAME", "QuietReport"]

LOG_NAME = "pytest.log"


class QuietReport:
    """A pytest plugin: from the session's start, pytest's terminal report and pytest-benchmark's
    messages go to ``folder/pytest.log``; :meth:`close` once ``pytest.main`` has returned."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOG_NAME
        self.failures: list[str] = []
        """Tests that failed otherwise than with a specrig error: ``NAME: Exception: what``."""
        self._log: IO[str] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
        reporter._tw = TerminalWriter(file=self._log)
        bench = getattr(session.config, "_benchmarksession", None)
        if bench is not None and getattr(bench, "logger", None) is not None:
            bench.logger.term = TerminalWriter(file=self._log)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        exc = call.excinfo.value if call.excinfo is not None else None
        if report.failed and exc is not None and not isinstance(exc, KeyboardInterrupt):
            from specrig.core.errors import SpecrigError

            if not isinstance(exc, SpecrigError | OSError):  # those: specrig's own message (SpecrigPlugin)
                self.failures.append(f"{item.name}: {call.excinfo.exconly().splitlines()[0]}")  # type: ignore[union-attr]

    def close(self) -> None:
        """pytest has ended: its log is complete."""
        if self._log is not None:
            self._log.close()
            self._log = None
