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
name is shown as specrig's message, not a traceback, and kept typed.

pytest-benchmark stores a run for later comparison only when it measured something and was
not interrupted, with its verdict (``specrig_verdict``: passed, or the gates it failed);
``--benchmark-compare`` (``latest`` or a number) means a stored run that can be compared with,
``latest`` the last one that passed (:mod:`specrig.lab.history`). ``--benchmark-compare-fail`` is
judged by specrig against each side's noise (:mod:`specrig.lab.regression`), not by
pytest-benchmark's figure-against-figure check; a regression is kept typed
(:attr:`SpecrigPlugin.regressions`), not raised as a traceback. A summary that cannot be
written where it belongs (a full disk) is written to a temporary folder instead, and named."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specrig.core import atomic, interrupts
from specrig.core.errors import BenchError, SpecrigError
from specrig.core.paths import subdir
from specrig.lab.folder import mark_complete, note_incomplete
from specrig.lab.measure import Lab
from specrig.lab.options import BenchOptions, declare
from specrig.lab.plan import BenchPlan, Case, prepare_plan
from specrig.lab.regression import Comparison, run_verdict
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
        self.regressions: list[str] = []
        """``--benchmark-compare-fail`` regressions (``NAME: what regressed, and how the noise was judged``)."""
        self.comparison: Comparison | None = None
        """``--benchmark-compare`` against a stored file: the run and the checks specrig judges."""
        self.not_stored: str | None = None
        """Why this run was not stored for later comparison (None: stored, or no storing asked)."""
        self.write_error: SpecrigError | None = None
        """Results that could not be written where they belong (what was kept, and where, is in its message)."""
        self.rescued: Path | None = None
        """Where the summary went instead (None with a write_error: nowhere, it must be printed)."""
        self._session: pytest.Session | None = None
        self.gates_failed: list[str] = []
        """By hand: the recipe's gates this run does not meet (they fail the session, as the CLI exits 11)."""

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
        storage = str(config.option.benchmark_storage)
        if config.option.benchmark_compare and storage.startswith("file://"):
            # a stored run that can be compared with (pytest-benchmark's own "latest" may be one that measured nothing)
            from specrig.lab.history import compared_run

            try:
                compare = compared_run(Path(storage.removeprefix("file://")), config.option.benchmark_compare)
            except SpecrigError as exc:
                raise pytest.UsageError(f"specrig: {exc}") from None
            config.option.benchmark_compare = str(compare)
            # judged against each side's noise once this run's JSON is known (pytest-benchmark never sees the checks)
            self.comparison = Comparison(compare, list(config.option.benchmark_compare_fail or []))
            config.option.benchmark_compare_fail = None
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
        baseline = lab.plan.baseline
        if not lab.plan.baseline_run and baseline is not None:
            lab.measure(Case(baseline.id, case.point, case.repeat))
        return lab.paired_baseline(case)

    # ------------------------------------------------------------------ reporting

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        """A SpecrigError (dead engine, bad option) is reported as specrig's message, no traceback."""
        outcome = yield
        report = outcome.get_result()
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, OSError):  # a full disk, a read-only filesystem ... while measuring: named
            exc = atomic.os_error(exc, None, "writing the results", "name another --results")
        if isinstance(exc, SpecrigError):
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
        machine_info["specrig"] = {  # plain data: pytest-benchmark compares it as JSON
            "recipe": self.plan.recipe,
            "engine": self.plan.engine,
            "lock_digest": self.plan.lock_digest,
            "model": self.plan.model_source,
            "host": self.plan.host.model_dump(mode="json"),
        }

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_benchmark_compare_machine_info(
        self, config: pytest.Config, benchmarksession: Any, machine_info: dict, compared_benchmark: dict
    ) -> Iterator[None]:
        """pytest-benchmark's own check fails (ValueError) when the storage is not below the working
        directory (the user cache, from a checkout); then the difference is said here instead."""
        outcome = yield
        if isinstance(outcome.exception, ValueError):
            outcome.force_result([])
            from specrig.core.log import log

            now = json.loads(json.dumps(machine_info, default=str))  # as stored: tuples are lists there
            saved = compared_benchmark.get("machine_info") or {}
            differ = []
            for key in sorted(set(now) | set(saved)):
                a, b = now.get(key), saved.get(key)
                if a == b:
                    continue
                if isinstance(a, dict) and isinstance(b, dict):
                    differ += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                else:
                    differ.append(key)
            log.warn(f"the stored run was measured on another machine or setup: {', '.join(differ)} differ")

    @staticmethod
    def _measured(bench: Any) -> bool:
        """A benchmark that timed a round without error and received tokens."""
        if not bench or getattr(bench, "has_error", True):
            return False
        info = (getattr(bench, "extra_info", None) or {}).get("specrig") or {}
        return bool(info.get("completion_tokens"))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._session = session

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Iterator[None]:
        """Around pytest-benchmark's saving: a run that measured nothing, or was interrupted, is not
        stored for later comparison; a save that fails on a full disk is named, not a traceback."""
        bench = getattr(session.config, "_benchmarksession", None)
        if bench is not None and self.lab is not None and not bench.json and self.plan is not None:
            # by hand the plan is made after configure: the summary is built from the JSON pytest-benchmark saves
            bench.json = Path(self.plan.results_dir) / "benchmark.json"
        if bench is not None and self.lab is not None and (bench.save or bench.autosave):  # (the decode suite ran)
            why = None
            if self.interrupted:
                why = "it was interrupted"
            elif not any(self._measured(b) for b in bench.benchmarks):
                why = "it measured nothing"
            if why is not None:
                bench.save = bench.autosave = None
                self.not_stored = why
        outcome = yield
        exc = outcome.exception
        if isinstance(exc, OSError) and atomic.os_error(exc, None, "", "") is not None:
            self._failed_write(exc, "saving pytest-benchmark's JSON")
            outcome.force_result(None)
            torn = Path(bench.json) if bench is not None and bench.json else None
            if torn is not None and torn.is_file():  # pytest-benchmark writes it in place: a torn file is no result
                try:
                    json.loads(torn.read_text())
                except ValueError:
                    torn.unlink(missing_ok=True)

    def _judge_gates(self) -> None:
        """By hand, the gates are judged as ``specrig bench`` judges them (lab.summary's one
        judgement), once, where the summary is built: a gate not met fails the session (pytest
        returns the session's exit status after its finish hooks)."""
        if not self.standalone or self.summary is None or self.interrupted or self._session is None:
            return
        from specrig.lab.summary import gate_problems

        self.gates_failed = gate_problems(self.summary, missing=False)
        if self.gates_failed and self._session.exitstatus == pytest.ExitCode.OK:
            self._session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> Iterator[None]:
        """pytest-benchmark raises its regressions (a traceback); keep them typed and fail the session."""
        outcome = yield
        from pytest_benchmark.session import PerformanceRegression

        if isinstance(outcome.exception, PerformanceRegression):
            session = config._benchmarksession  # type: ignore[attr-defined]
            self.regressions = [f"{name} - {what}" for name, what in session.performance_regressions]
            outcome.force_result(None)
            if self._session is not None:
                self._session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not self.standalone:  # specrig bench says these itself (the regressions as its error, exit 11)
            return
        if self.summary is not None and self._show and not config.getoption("specrig_no_table"):
            self._show(self.summary)
            terminalreporter.write_line(f"specrig results: {self.plan.results_dir if self.plan else '?'}")
        for line in self.comparison.notes if self.comparison else []:
            terminalreporter.write_line(f"specrig: compared with the stored run: {line}")
        for line in self.regressions:
            terminalreporter.write_line(f"specrig: regression against the stored run: {line}")
        for line in self.gates_failed:
            terminalreporter.write_line(f"specrig: gate not met: {line}")
        if self.not_stored:
            terminalreporter.write_line(f"specrig: this run is not stored for comparison: {self.not_stored}")

    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: list, output_json: dict) -> None:
        """Build specrig's summary from this very JSON (kept in memory; :meth:`finish` writes it)."""
        if self.plan is None or self.lab is None:
            return
        output_json["specrig_plan"] = json.loads(self.plan.model_dump_json())
        output_json["specrig_results"] = self.plan.results_dir  # a stored run names its folder (INCOMPLETE or not)
        first = self.summary is None  # called again for the storage's copy: the summary is built once
        if first:
            self._summarise(output_json)
            if self.comparison is not None and self.comparison.checks:
                self.comparison.judge(output_json.get("benchmarks") or [])
                self.regressions = self.comparison.regressions
                if self.regressions and self._session is not None:  # (the CLI exits 11 on them)
                    self._session.exitstatus = pytest.ExitCode.TESTS_FAILED
        output_json["specrig_verdict"] = self._verdict()  # a stored run that failed is never `--compare latest`
        target = Path(self.plan.results_dir) / "benchmark.json"
        if first and not target.is_file():  # by hand, pytest-benchmark saved elsewhere (or only to its storage)
            try:
                atomic.write_json(target, output_json, default=str)
            except OSError as exc:
                self._failed_write(exc, "writing benchmark.json")

    def _verdict(self) -> dict[str, Any]:
        """Whether this run passed (:func:`specrig.lab.regression.run_verdict`)."""
        from specrig.lab.summary import gate_problems

        return run_verdict(
            gate_problems(self.summary, missing=not self.standalone) if self.summary else ["no summary"],
            self.comparison,
            self.errors,
            self._session.testsfailed if self._session is not None else 0,
        )

    def _summarise(self, output_json: dict) -> None:
        """Build specrig's summary from pytest-benchmark's JSON, once (every server stopped first)."""
        from specrig.lab.summary import summary_from_benchmark_json

        assert self.lab is not None and self.plan is not None
        self.lab.close()  # the target's float32 forward below needs the memory the servers held
        lab = self.lab

        def summary(prompts: dict[str, str] | None) -> RunSummary:
            return summary_from_benchmark_json(
                output_json,
                self.plan,  # type: ignore[arg-type]
                lab.recipe,
                earlier=lab.earlier_baselines(),
                server_info=lab.server_info,
                errors=self.errors,
                profiles=lab.profiles,
                prompts=prompts,
            )

        # divergences explained by the target, offline (the prompts were made while measuring)
        prompts = {p.id: p.text for p in lab.prompts("")} if lab.measured and not self.interrupted else None
        try:
            self.summary = summary(prompts)
        except OSError as exc:  # explaining writes in lossless/: on a full disk, the figures without it
            if prompts is None:
                raise
            self._failed_write(exc, "explaining the divergences (lossless/)")
            self.summary = summary(None)
        self._judge_gates()

    def _failed_write(self, exc: OSError, what: str) -> None:
        """Keep the first results write that failed, named (the run goes on to keep what it measured)."""
        fix = "name another --results"
        named = atomic.os_error(exc, None, what, fix) or BenchError(f"{what} failed: {exc}", hint=fix)
        self.write_error = self.write_error or named

    def finish(self, timings: dict[str, float] | None = None) -> RunSummary | None:
        """Write summary.json (once), report.md and the PNGs, and mark the folder complete; returns the
        summary (None: nothing measured). Where the results cannot be written (a full disk, a read-only
        filesystem), nothing measured is lost: the summary goes to a temporary folder (``rescued``), or
        nowhere when that fails too, and ``write_error`` says so."""
        if self.summary is None or self.plan is None:
            return None
        if timings:
            self.summary = self.summary.model_copy(update={"timings": timings})
        results = Path(self.plan.results_dir)
        try:
            self._write(results, self.summary)
        except OSError as exc:
            self.write_error = self._kept(results, exc)
            return self.summary
        if self.interrupted:
            note_incomplete(results, f"interrupted ({interrupts.received()}): summary.json holds only finished tests")
        elif not self.summary.measurements:
            note_incomplete(results, "it measured nothing; summary.json records why")
        elif self.write_error is not None:
            note_incomplete(
                results, f"part of its results could not be written: {self.write_error.message.splitlines()[0]}"
            )
        else:
            mark_complete(results)
        return self.summary

    def _kept(self, results: Path, exc: OSError) -> SpecrigError:
        """The error for results that could not be written, saying where the summary is kept."""
        assert self.summary is not None
        fix = "name another --results (the measured figures are kept as said above)"
        named = atomic.os_error(exc, results, "writing the results", fix) or BenchError(
            f"writing the results in {results} failed: {exc}", hint=fix
        )
        written = results / "summary.json"
        try:
            whole = written.is_file() and type(self.summary).model_validate_json(written.read_text()) == self.summary
        except (OSError, ValueError):
            whole = False
        if whole:
            kept = f"summary.json is written there ({written}), report.md or the plots are not"
        else:
            try:
                spare = Path(tempfile.mkdtemp(prefix="specrig-unsaved-"))
                self.summary.write(spare / "summary.json")
                self.rescued = spare / "summary.json"
                kept = f"nothing measured is lost: the summary is written to {self.rescued} instead"
            except OSError as again:
                kept = f"nor in a temporary folder ({again.strerror}): the summary is printed as JSON below"
        note_incomplete(results, f"its results could not be written ({exc.strerror or exc})")
        named.message += f"\n{kept}"
        return named

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.standalone:
            if self.finish({"bench_s": time.monotonic() - self._t0}) is None and self.plan is not None:
                why = f"interrupted ({interrupts.received()})" if self.interrupted else "no test produced a result"
                note_incomplete(Path(self.plan.results_dir), why)
            interrupts.stop_descendants()
            if self.write_error is not None:  # by hand: said on the terminal, with the summary when kept nowhere
                tr = config.pluginmanager.get_plugin("terminalreporter")
                if tr is not None:
                    tr.write_line(f"specrig: error: {self.write_error}")
                    if self.rescued is None and self.summary is not None:
                        tr.write_line(self.summary.model_dump_json(indent=2))
