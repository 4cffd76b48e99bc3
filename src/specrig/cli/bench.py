"""``specrig bench`` (``nox -s bench -- ...``): prepare everything a real
benchmark needs (environment from the lock, model, drafters), write the plan,
run the pytest-benchmark suite in ``bench/`` on it, then print specrig's
tables and judge the gates. The suite writes summary.json, report.md and the
PNGs from pytest-benchmark's JSON; regressions against stored runs are
pytest-benchmark's ``--benchmark-compare-fail``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from .. import errors as errors_module
from ..errors import BenchError, SpecrigError, ThresholdError
from ..log import log
from ..paths import repo_root, subdir
from ..plan import add_options, prepare_plan
from .common import add_recipe_option, resolve_recipe

HELP = "run the benchmark suite against a real engine"
DESCRIPTION = (
    "Benchmark a real engine on the recipe's host: throughput and latency distributions, load sweeps, "
    "speculative-decoding acceptance from the engine's counters, paired speedup with intervals, lossless "
    "check, thresholds. The same options work on the suite itself: pytest bench/ --specrig-NAME ..."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    add_options(p.add_argument)
    p.add_argument(
        "--compare",
        metavar="latest|NUM",
        help="compare with a stored run (pytest-benchmark storage in the user cache) and fail on a "
        "regression of the mean time per completed request beyond the recipe's tolerance",
    )
    p.add_argument(
        "--compare-fail",
        metavar="EXPR",
        help="pytest-benchmark expression, e.g. mean:10%% (default: the recipe's regression_tolerance on the mean)",
    )


def _pytest_cmd(results: Path, args: argparse.Namespace, tolerance: float) -> list[str]:
    bench_dir = repo_root() / "bench"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
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
        f"--specrig-plan={results / 'plan.json'}",
        "--specrig-no-table",
        f"--benchmark-json={results / 'benchmark.json'}",
        f"--benchmark-storage=file://{subdir('benchmarks')}",
        "--benchmark-autosave",
        "--benchmark-columns=rounds,mean,median,stddev,max",
        "-W",
        "ignore::pytest_benchmark.logger.PytestBenchmarkWarning",
    ]
    if args.compare:
        cmd.append("--benchmark-compare" if args.compare == "latest" else f"--benchmark-compare={args.compare}")
        cmd.append(f"--benchmark-compare-fail={args.compare_fail or f'mean:{tolerance:.0%}'}")
    return cmd


def _as_error(e: dict[str, str | None]) -> SpecrigError:
    """The suite's first SpecrigError again, same class and exit code (a dead engine stays an EngineError)."""
    cls = getattr(errors_module, str(e.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, SpecrigError)):
        cls = BenchError
    return cls(f"[{e.get('test')}] {e.get('message')}", hint=e.get("hint"))


def run(args: argparse.Namespace) -> int:
    from ..recipe import load_recipe
    from ..report import print_summary
    from ..results import load_summary

    t_start = time.monotonic()
    recipe = resolve_recipe(args)
    plan = prepare_plan(args, recipe)
    results = Path(plan.results_dir)
    t = time.monotonic()
    rc = subprocess.call(_pytest_cmd(results, args, load_recipe(plan.recipe_path).bench.regression_tolerance))
    bench_s = time.monotonic() - t

    errors_file = results / "errors.json"
    errors = json.loads(errors_file.read_text()) if errors_file.is_file() else []
    if not (results / "summary.json").is_file():
        if errors:
            raise _as_error(errors[0])
        raise BenchError(f"no configuration produced a result (pytest exit {rc})", hint=f"see {results / 'logs'}")
    summary = load_summary(results)
    summary = summary.model_copy(
        update={"timings": {"prepare_s": t - t_start, "bench_s": bench_s, "total_s": time.monotonic() - t_start}}
    )
    summary.write(results / "summary.json")
    print_summary(summary)
    log.step(f"results: {results} (summary.json, report.md, benchmark.json, *.png, logs/)")

    if errors:
        raise _as_error(errors[0])
    problems = [
        f"{c.name}: {t.describe()}"
        for c in summary.configs
        for t in c.thresholds
        if not t.passed and not t.informational
    ]
    measured = {m.config for m in summary.measurements}
    missing = [c.name for c in summary.configs if c.name not in measured]
    if missing:
        problems.append(f"no result for {', '.join(missing)} (see the pytest output above and logs/)")
    if problems:
        raise ThresholdError(
            "the run does not meet its gates:\n" + "\n".join(f"  - {p}" for p in problems),
            hint=f"details in {results / 'report.md'}",
        )
    if rc != 0:
        what = "a regression against the stored run, or " if args.compare else ""
        raise BenchError(
            f"the bench suite failed (pytest exit {rc}): {what}a failed check above",
            hint=f"see the output above and {results / 'report.md'}",
        )
    return 0
