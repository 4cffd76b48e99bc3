"""``specrig bench`` (``nox -s bench -- ...``): prepare everything a real
benchmark needs (environment from the lock, model, drafters), then run the
pytest-benchmark suite in ``bench/`` in this same process, handing it the plan
through :class:`~specrig.lab.plugin.SpecrigPlugin`; print specrig's tables and
judge the gates. summary.json, report.md and the PNGs are written once, after
the suite; regressions against stored runs are ``--benchmark-compare-fail``
expressions, judged against each side's noise (:mod:`specrig.lab.regression`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specrig.core import interrupts
from specrig.core.errors import BenchError, ThresholdError
from specrig.core.log import log
from specrig.core.paths import repo_root
from specrig.lab.options import BenchOptions, declare

HELP = "run the benchmark suite against a real engine"
DESCRIPTION = (
    "Benchmark a real engine on the recipe's host: throughput and latency distributions, load sweeps, "
    "speculative-decoding acceptance from the engine's counters, paired speedup with intervals, lossless "
    "check, thresholds. The same options work on the suite itself: pytest bench/ --specrig-NAME ..."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    declare(p.add_argument)
    p.add_argument(
        "--compare",
        metavar="latest|NUM",
        help="compare with a stored run (pytest-benchmark storage in the user cache; latest: the last that passed) "
        "and fail on a regression of the mean run time beyond the recipe's tolerance that the noise cannot "
        "explain: with --repeat N each side gets an interval, and they must separate",
    )
    p.add_argument(
        "--compare-fail",
        metavar="EXPR",
        help="pytest-benchmark expression, e.g. mean:10%% (default: the recipe's regression_tolerance on the mean)",
    )


def _pytest_args(
    results: Path, storage: Path, compare: Path | None, compare_fail: str | None, tolerance: float
) -> list[str]:
    bench_dir = repo_root() / "bench"
    args = [
        str(bench_dir / "test_decode.py"),  # the serving benchmarks (not the harness ceiling)
        "-p",
        "no:cacheprovider",
        "-q",
        "-s",
        "--tb=no",
        "--rootdir",
        str(bench_dir),
        "-o",
        "addopts=",
        "-o",
        "testpaths=",
        f"--benchmark-json={results / 'benchmark.json'}",
        f"--benchmark-storage=file://{storage}",
        "--benchmark-autosave",
        "--benchmark-columns=rounds,mean,min,max",
        "-W",
        "ignore::pytest_benchmark.logger.PytestBenchmarkWarning",
    ]
    if compare:
        args.append(f"--benchmark-compare={compare}")  # the stored file itself (lab.history.compared_run)
        args.append(f"--benchmark-compare-fail={compare_fail or f'mean:{tolerance:.0%}'}")
    return args


def run(args: argparse.Namespace) -> int:
    import pytest

    from specrig.host.machine import probe
    from specrig.lab.folder import note_incomplete
    from specrig.lab.history import compared_run, storage_folder
    from specrig.lab.plan import prepare_plan
    from specrig.lab.plugin import SpecrigPlugin
    from specrig.lab.quiet import QuietReport
    from specrig.lab.summary import gate_problems
    from specrig.recipe.choose import choose_recipe
    from specrig.report.render import print_summary, write_report

    t_start = time.monotonic()
    opts = BenchOptions.collect(lambda name: getattr(args, name, None))
    recipe = choose_recipe(opts.recipe, set() if opts.recipe else probe().compute_capabilities)
    storage = storage_folder()  # every place a run writes is checked before anything is prepared
    compare = compared_run(storage, args.compare) if args.compare else None
    plan = prepare_plan(opts, recipe)  # checks the results folder first, makes it (marked INCOMPLETE) last
    results = Path(plan.results_dir)
    plugin = SpecrigPlugin(plan, recipe, write=write_report)
    quiet = QuietReport(results / "logs")  # pytest's own report: to logs/pytest.log, not the console
    t = time.monotonic()
    rc = int(
        pytest.main(
            _pytest_args(results, storage, compare, args.compare_fail, recipe.bench.regression_tolerance),
            plugins=[plugin, quiet],
        )
    )
    quiet.close()
    pytest_log = quiet.path
    if rc == pytest.ExitCode.INTERRUPTED:
        note_incomplete(results, f"interrupted ({interrupts.received()})")
        raise KeyboardInterrupt
    bench_s = time.monotonic() - t
    summary = plugin.finish({"prepare_s": t - t_start, "bench_s": bench_s, "total_s": time.monotonic() - t_start})
    if summary is None:
        error = plugin.write_error or plugin.first_error
        if error is None:
            error = BenchError(
                f"no configuration produced a result (pytest exit {rc})"
                + "".join(f"\n  {line}" for line in quiet.failures[:5]),
                hint=f"pytest's report: {pytest_log}; the servers' logs: {results / 'logs'}",
            )
        note_incomplete(results, f"no result: {error.message.splitlines()[0]}")
        raise error
    print_summary(summary)
    if plugin.write_error is not None:  # nothing measured is lost: the summary is elsewhere, or printed here
        if plugin.rescued is None:
            print(summary.model_dump_json(indent=2))
        raise plugin.write_error
    log.step(f"results: {results} (summary.json, report.md, benchmark.json, *.png, logs/)")
    if compare is not None:
        log.step(f"compared with the stored run {compare} (pytest-benchmark's table: {pytest_log})")
        for note in plugin.comparison.notes if plugin.comparison else []:
            log.warn(note)
    if plugin.not_stored:
        log.warn(f"this run is not stored for --compare: {plugin.not_stored}")

    if plugin.first_error is not None:
        raise plugin.first_error
    problems = gate_problems(summary) + [
        f"regression against the stored run {compare}: {r}" for r in plugin.regressions
    ]
    if problems:
        raise ThresholdError(
            "the run does not meet its gates:\n" + "\n".join(f"  - {p}" for p in problems),
            hint=f"details in {results / 'report.md'}",
        )
    if rc != 0:
        raise BenchError(
            f"the bench suite failed (pytest exit {rc})" + "".join(f"\n  {line}" for line in quiet.failures[:5]),
            hint=f"pytest's report: {pytest_log}; the results: {results / 'report.md'}",
        )
    return 0
