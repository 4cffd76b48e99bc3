"""``specrig bench`` (``nox -s bench -- ...``): prepare everything a real
benchmark needs (environment from the lock, model, drafters), write the plan,
run the pytest-benchmark suite in ``bench/``, then summarise: summary.json, a
table, a markdown report and PNG plots in the results folder, thresholds and
regressions judged."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from ..benchrun import BenchPlan, ConfigPlan, failed_thresholds
from ..engines import ENGINE_MODULES, get_engine
from ..env import make_env
from ..errors import BenchError, ConfigError, ThresholdError
from ..host import probe
from ..log import log
from ..models import drafter_info, prepare_drafter, prepare_model
from ..paths import repo_root, subdir
from ..recipe import Recipe
from ..report import build_summary, find_previous_run, print_table, regressions, write_report
from ..server import attach, check_port_free
from .common import add_recipe_option, resolve_recipe

HELP = "run the benchmark suite against a real engine"
DESCRIPTION = (
    "Benchmark a real engine on the recipe's host: decode throughput, TTFT/TPOT, "
    "speculative-decoding acceptance from the engine's counters, paired speedup, thresholds."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    p.add_argument("--engine", default="vllm", choices=list(ENGINE_MODULES), help="engine (default: vllm)")
    p.add_argument(
        "--spec", default="none",
        help="speculative configurations from the recipe: NAME[,NAME...], 'all' or 'none' (default). "
        "Each is paired with a baseline run in the same invocation.",
    )  # fmt: skip
    p.add_argument("--max-tokens", type=int, help="output tokens per request (default: the recipe's, 512)")
    p.add_argument("--concurrency", type=int, help="requests in flight (default: the recipe's, 1)")
    p.add_argument("--warmup", type=int, help="warm-up requests before each measured run (default: the recipe's)")
    p.add_argument("--endpoint", help="attach to this running server (e.g. http://127.0.0.1:8000) instead of launching")
    p.add_argument("--port", type=int, help="port for launched servers (default: a free one)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                   help="extra server argument, passed through (repeatable; use --engine-arg=--flag)")  # fmt: skip
    p.add_argument("--startup-timeout", type=float, metavar="S",
                   help="seconds a launched server may take to become ready (default: the recipe's)")  # fmt: skip
    p.add_argument("--results", type=Path, help="results folder (default: a new one under the user cache)")
    p.add_argument("--compare", metavar="RUN_DIR|latest",
                   help="fail on a regression beyond the recipe's tolerance against an earlier run")  # fmt: skip
    p.add_argument("--no-baseline", action="store_true", help="skip the paired baseline (no speedup then)")


def select_specs(recipe: Recipe, choice: str) -> list[str]:
    if choice in ("none", ""):
        return []
    if choice == "all":
        return list(recipe.spec)
    names = [c.strip() for c in choice.split(",") if c.strip()]
    unknown = [n for n in names if n not in recipe.spec]
    if unknown:
        raise ConfigError(
            f"recipe {recipe.name!r} has no speculative configuration {', '.join(map(repr, unknown))}",
            hint=f"configurations: {', '.join(recipe.spec) or '(none)'}; or use --spec all / none",
        )
    return names


def run(args: argparse.Namespace) -> int:
    for opt in ("max_tokens", "concurrency"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            raise ConfigError(f"--{opt.replace('_', '-')} must be >= 1, got {v}")
    t_start = time.monotonic()
    host = probe()
    recipe = resolve_recipe(args, host)
    if args.engine not in recipe.engine:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [engine.{args.engine}]", hint=f"engines: {', '.join(recipe.engine)}"
        )
    specs = select_specs(recipe, args.spec)
    if args.endpoint and len(specs) > 1:
        raise ConfigError(
            "--endpoint measures one running server, so --spec must name at most one configuration",
            hint="name the configuration that server runs (it only labels the run and selects its thresholds)",
        )
    engine = get_engine(args.engine)
    if args.endpoint:  # fail fast, before anything is prepared
        args.endpoint = attach(args.endpoint, engine.health_path)
    elif args.port:
        check_port_free(args.port)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = (args.results or subdir("results") / f"{stamp}-{recipe.name}-{args.engine}").resolve()
    results.mkdir(parents=True, exist_ok=True)
    log.step(f"recipe {recipe.name}, engine {args.engine}, results in {results}")

    env = model = None
    timings: dict[str, float] = {}
    if not args.endpoint:
        t = time.monotonic()
        env = make_env(recipe, recipe.env_for_engine(args.engine), host=host)
        timings["env_s"] = time.monotonic() - t
        t = time.monotonic()
        model = prepare_model(recipe, env)
        timings["model_s"] = time.monotonic() - t

    configs: list[ConfigPlan] = []
    if not (args.endpoint and specs) and not (args.no_baseline and specs):
        configs.append(ConfigPlan("baseline", None))
    for name in specs:
        spec = recipe.spec[name]
        drafter = prepare_drafter(spec, model, env) if model is not None else None
        configs.append(ConfigPlan(name, spec.model_dump(), drafter, drafter_info(drafter)))

    plan = BenchPlan(
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        engine=args.engine,
        results_dir=str(results),
        configs=configs,
        max_tokens=args.max_tokens or recipe.bench.max_tokens,
        concurrency=args.concurrency or recipe.bench.concurrency,
        warmup_requests=recipe.bench.warmup_requests if args.warmup is None else args.warmup,
        python=str(env.python) if env else None,
        model_path=str(model.path) if model else None,
        served_name=recipe.model.served_name,
        model_source=model.source if model else (args.endpoint or ""),
        endpoint=args.endpoint,
        port=args.port,
        engine_args=list(args.engine_arg),
        startup_timeout_s=args.startup_timeout,
        lock_digest=env.lock_digest if env else None,
        host=host.as_dict(),
    )
    plan_path = results / "plan.json"
    plan.write(plan_path)

    bench_dir = repo_root() / "bench"
    cmd = [
        sys.executable, "-m", "pytest", str(bench_dir), "-p", "no:cacheprovider", "-q", "-s",
        "--rootdir", str(bench_dir), "-o", "addopts=", "-o", "testpaths=",
        f"--benchmark-json={results / 'benchmark.json'}", "--benchmark-columns=min,mean,rounds",
    ]  # fmt: skip
    t = time.monotonic()
    rc = subprocess.call(cmd, env=os.environ | {"SPECRIG_BENCH_PLAN": str(plan_path)})
    timings["bench_s"] = time.monotonic() - t
    timings["total_s"] = time.monotonic() - t_start

    summary = build_summary(results, plan, timings)
    if not summary["configs"]:
        raise BenchError(f"no configuration produced a result (pytest exit {rc})", hint=f"see {results / 'logs'}")
    write_report(results, summary)
    print_table(summary)
    log.step(f"results: {results} (summary.json, report.md, benchmark.json, *.png, logs/)")

    problems = [line for c in summary["configs"] for line in failed_thresholds(c)]
    if args.compare:
        previous = (
            find_previous_run(results, recipe.name, args.engine) if args.compare == "latest" else Path(args.compare)
        )
        if previous is None:
            log.warn("--compare latest: no earlier run of this recipe and engine to compare with")
        else:
            problems += regressions(summary, previous, recipe.bench.regression_tolerance)
    missing = {c.name for c in configs} - {c["name"] for c in summary["configs"]}
    if missing:
        problems.append(f"no result for {', '.join(sorted(missing))} (see the pytest output above and logs/)")
    if problems:
        raise ThresholdError("the run does not meet its gates:\n" + "\n".join(f"  - {p}" for p in problems),
                             hint=f"details in {results / 'report.md'}")  # fmt: skip
    if rc != 0:
        raise BenchError(
            f"the bench suite failed (pytest exit {rc})", hint=f"see the output above and {results / 'logs'}"
        )
    return 0
