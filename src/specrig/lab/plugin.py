"""The bench suite's pytest plugin, as one object.

``specrig bench`` prepares the plan, then runs the suite in its own process:
``pytest.main([...], plugins=[SpecrigPlugin(plan, ...)])`` (the way
pytest-benchmark registers its own session). The plan, the errors and the
summary stay typed in memory, the recipe is loaded once, summary.json is
written once, and every server is a child of the process the user
interrupts. ``pytest bench/ --specrig-NAME ...`` by hand registers the same
plugin from ``bench/conftest.py``; it then makes the plan from its options.

Each test is one ``(repeat, configuration, load point)`` in the interleaved
order; the session-scoped ``lab`` keeps one server at a time and measures the
paired baseline on demand, so ``-k ngram`` still pairs. A failure specrig can
name is shown as specrig's message, not a traceback, and kept typed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specrig.core import atomic, interrupts
from specrig.core.errors import SpecrigError
from specrig.core.paths import subdir
from specrig.lab.measure import Lab
from specrig.lab.options import BenchOptions, declare
from specrig.lab.plan import BenchPlan, Case, prepare_plan
from specrig.lab.results import BenchFailure, RunSummary
from specrig.recipe.schema import Recipe

__all__ = ["SpecrigPlugin"]


class SpecrigPlugin:
    """pytest hooks and fixtures of the bench suite. ``plan`` given (by ``specrig bench``):
    the suite measures it and leaves writing and printing to the caller (:meth:`finish`).
    No plan (``pytest bench/`` by hand): the plan is made from the ``--specrig-*`` options
    and the plugin writes and prints the results itself."""

    def __init__(
        self,
        plan: BenchPlan | None = None,
        recipe: Recipe | None = None,
        *,
        write: Callable[[Path, RunSummary], None],
        show: Callable[[RunSummary], None] | None = None,
    ) -> None:
        """``write(results_dir, summary)`` writes summary.json, report.md and the PNGs (the report
        room's ``write_report``); ``show`` prints the table when the plugin runs on its own."""
        self.plan = plan
        self._write = write
        self._show = show
        self.recipe = recipe
        self.standalone = plan is None
        self.errors: list[BenchFailure] = []
        self.first_error: SpecrigError | None = None
        """The first specrig error a test ended with, as raised (its class and exit code)."""
        self.summary: RunSummary | None = None
        self.lab: Lab | None = None
        self._config: pytest.Config | None = None
        self._t0 = time.monotonic()
        self.interrupted = False

    # ------------------------------------------------------------------ options and plan

    def pytest_addoption(self, parser: pytest.Parser) -> None:
        g = parser.getgroup("specrig", "specrig bench (every `specrig bench` option, prefixed --specrig-)")
        g.addoption("--specrig-no-table", action="store_true", help="do not print specrig's table")
        declare(g.addoption, prefix="specrig-")

    def _plan(self) -> BenchPlan:
        if self.plan is None:
            config = self._config
            assert config is not None
            try:
                opts = BenchOptions.collect(lambda name: config.getoption(f"specrig_{name}"))
                from specrig.host.machine import probe
                from specrig.recipe.choose import choose_recipe

                self.recipe = choose_recipe(opts.recipe, set() if opts.recipe else probe().compute_capabilities)
                self.plan = prepare_plan(opts, self.recipe)
            except SpecrigError as exc:
                raise pytest.UsageError(f"specrig: {exc}") from None
        return self.plan

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        # before pytest-benchmark's own (trylast) configure: storage and JSON defaults
        self._config = config
        if self.standalone:  # `pytest bench/` by hand: SIGTERM/SIGHUP unwind like Ctrl-C (the servers stop)
            interrupts.install()
        if (
            not hasattr(config.option, "benchmark_storage")
            or config.getoption("help")
            or config.getoption("collectonly")
        ):
            return
        if config.option.benchmark_storage == "file://./.benchmarks":
            config.option.benchmark_storage = f"file://{subdir('benchmarks')}"
        if config.option.benchmark_json is None and self.plan is not None:
            # the summary is built from pytest-benchmark's JSON hook, which runs only when it saves JSON
            config.option.benchmark_json = str(Path(self.plan.results_dir) / "benchmark.json")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "case" in metafunc.fixturenames:
            plan = self._plan()
            cases = plan.cases()
            metafunc.parametrize("case", cases, ids=[c.id for c in cases])

    # ------------------------------------------------------------------ fixtures' helpers
    # (the fixtures themselves are functions in bench/conftest.py: pytest collects fixtures from
    # modules and classes, not from a plugin instance; each asks the plugin through ``of``)

    @staticmethod
    def of(config: pytest.Config) -> SpecrigPlugin:
        """The plugin registered on this pytest run."""
        found = [p for p in config.pluginmanager.get_plugins() if isinstance(p, SpecrigPlugin)]
        if not found:
            raise pytest.UsageError("specrig: the bench suite needs specrig's plugin (bench/conftest.py registers it)")
        return found[0]

    def open_lab(self) -> Lab:
        self.lab = Lab(self._plan(), self.recipe)
        return self.lab

    @staticmethod
    def paired_baseline(lab: Lab, case: Case) -> list:
        """The baseline at this case's load and repeat: measured now if no test has, or from --baseline."""
        if lab.plan.config(case.config).spec is None:
            return []
        if not lab.plan.baseline_run and any(c.name == "baseline" for c in lab.plan.configs):
            lab.measure(Case("baseline", case.point, case.repeat))
        return lab.paired_baseline(case)

    # ------------------------------------------------------------------ reporting

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        """A SpecrigError (dead engine, bad option) is reported as specrig's message, no traceback."""
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None and isinstance(call.excinfo.value, SpecrigError):
            exc = call.excinfo.value
            report.longrepr = f"specrig: error: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else "")
            self.errors.append(
                BenchFailure(test=item.name, type=type(exc).__name__, message=exc.message, hint=exc.hint)
            )
            self.first_error = self.first_error or exc

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        """Interrupted mid-round: pytest-benchmark would save (and fail on) a benchmark with no
        round yet; keep only the finished ones, so the interrupt ends cleanly."""
        self.interrupted = True  # and the summary asks no model about divergences: the user wants out
        session = getattr(self._config, "_benchmarksession", None)
        if session is not None:
            session.benchmarks = [b for b in session.benchmarks if getattr(getattr(b, "stats", None), "data", None)]

    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict) -> None:
        if self.plan is None:
            return
        machine_info["specrig"] = {
            "recipe": self.plan.recipe,
            "engine": self.plan.engine,
            "lock_digest": self.plan.lock_digest,
            "model": self.plan.model_source,
            "host": self.plan.host,
        }

    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: list, output_json: dict) -> None:
        """Build specrig's summary from this very JSON (kept in memory; :meth:`finish` writes it)."""
        if self.plan is None or self.lab is None:
            return
        from specrig.lab.summary import summary_from_benchmark_json

        output_json["specrig_plan"] = json.loads(self.plan.model_dump_json())
        target = Path(self.plan.results_dir) / "benchmark.json"
        if not target.is_file():  # by hand, pytest-benchmark saved elsewhere (or only to its storage)
            atomic.write_json(target, output_json, default=str)
        self.lab.close()  # the target's float32 forward below needs the memory the servers held
        self.summary = summary_from_benchmark_json(
            output_json,
            self.plan,
            self.lab.recipe,
            earlier=self.lab.earlier_baselines(),
            server_info=self.lab.server_info,
            errors=self.errors,
            profiles=list(self.lab.profiles.values()),
            # divergences explained by the target, offline (the prompts were made while measuring)
            prompts={p.id: p.text for p in self.lab.prompts("")}
            if self.lab.measured and not self.interrupted
            else None,
        )

    def finish(self, timings: dict[str, float] | None = None) -> RunSummary | None:
        """Write summary.json (once), report.md and the PNGs; returns the summary (None: nothing measured)."""
        if self.summary is None or self.plan is None:
            return None
        if timings:
            self.summary = self.summary.model_copy(update={"timings": timings})
        self._write(Path(self.plan.results_dir), self.summary)
        return self.summary

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.standalone:
            self.finish({"bench_s": time.monotonic() - self._t0})
            interrupts.stop_descendants()

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if self.standalone and self.summary is not None and self._show and not config.getoption("specrig_no_table"):
            self._show(self.summary)
            terminalreporter.write_line(f"specrig results: {self.plan.results_dir if self.plan else '?'}")
