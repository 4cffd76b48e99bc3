"""``specrig build flash-attn|sgl-kernel|PATH.toml [options]`` (the nox sessions
``build_flash_attn`` and ``build_sgl_kernel``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from specrig.cli.common import add_recipe_option, resolve_recipe
from specrig.core.errors import ConfigError
from specrig.core.log import log

if TYPE_CHECKING:
    from specrig.builder.definition import BuildDefinition
    from specrig.builder.plan import BuildPlan
    from specrig.builder.progress import BuildStatus

HELP = "build flash-attn / sgl-kernel wheels for the recipe's GPU arch"
DESCRIPTION = (
    "Build a kernel wheel (flash-attn, sgl-kernel) for the recipe's GPU arch against its locked torch, "
    "from pinned offline-capable sources, into a fingerprinted wheelhouse recorded for the recipe."
)


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def _jobs(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        return _positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive integer, got {value!r}") from None


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, got {value!r}") from None
    if x <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB, got {value!r}")
    return x


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="flash-attn, sgl-kernel, or the path of a build definition .toml")
    add_recipe_option(p, purpose="build")
    p.add_argument(
        "--arch",
        action="append",
        metavar="ARCH",
        help="GPU arch to build for, e.g. 120 or 12.0 (repeat or comma-separate; default: the recipe's)",
    )
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        metavar="auto|N",
        help="parallel compile jobs: auto (the cap model) or N (refused if memory does not allow it)",
    )
    p.add_argument(
        "--nvcc-threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="nvcc --threads per job (default 1: with one arch more threads only cost memory)",
    )
    p.add_argument("--source-cache", type=Path, metavar="DIR", help="source cache (pre-filled on air-gapped hosts)")
    p.add_argument(
        "--wheelhouse", type=Path, metavar="DIR", help="where built wheels are stored under their fingerprint"
    )
    p.add_argument(
        "--plan", action="store_true", help="print what would run (sources, hashes, env, defines, job cap) and stop"
    )
    p.add_argument("--json", action="store_true", help="with --plan: print the plan as JSON")
    p.add_argument(
        "--python", type=Path, metavar="PATH", help="python of the build environment (default: the recipe's env)"
    )
    p.add_argument(
        "--record",
        type=Path,
        metavar="PATH",
        help="built-wheel record to list the wheel in (default: recipes/RECIPE.ENV.built.toml of the build env)",
    )
    p.add_argument("--memory-gib", type=_positive_float, metavar="GIB", help="plan for this much available memory")
    p.add_argument("--cores", type=_positive_int, metavar="N", help="plan for this many cores")
    p.add_argument("--offline", action="store_true", help="never download: every source must be in the source cache")
    p.add_argument("--fetch-only", action="store_true", help="fill the source cache (verify hashes) and stop")
    p.add_argument(
        "--import-source",
        action="append",
        default=[],
        metavar="NAME=ARCHIVE",
        help="put an archive of a pinned source into the source cache (e.g. `git archive` of the pinned commit "
        "from a repository snapshot); its pin is checked (repeatable; NAME is the source's or dependency's)",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="download sources whose sha256 the definition leaves empty and print their hashes (needs network)",
    )
    p.add_argument("--rebuild", action="store_true", help="build even if the wheelhouse has this fingerprint")
    p.add_argument("--reuse-only", action="store_true", help="refuse to build: use the wheelhouse entry or fail")
    p.add_argument("--log-dir", type=Path, metavar="DIR", help="build logs and measured memory figures")
    p.add_argument(
        "--check",
        action="store_true",
        help="then run the wheel on the GPU against a reference (the definition's [check]); with --reuse-only: "
        "check the stored wheel only",
    )
    away = p.add_mutually_exclusive_group()
    away.add_argument(
        "--detach",
        action="store_true",
        help="start the build in its own session and return (it outlives this terminal); then --status/--follow/--stop",
    )
    away.add_argument(
        "--status", action="store_true", help="print the detached build's state (units, jobs, peak per job)"
    )
    away.add_argument("--follow", action="store_true", help="print the detached build's progress until it ends")
    away.add_argument("--stop", action="store_true", help="end the detached build cleanly (SIGTERM, then SIGKILL)")
    p.add_argument("--state-file", type=Path, help=argparse.SUPPRESS)  # set by --detach for the build it starts


def run(args: argparse.Namespace) -> int:
    from specrig.builder.definition import load_definition

    args.target = _renamed(args)
    definition = load_definition(args.target)  # an unknown target is named before any recipe is picked
    if args.status or args.follow or args.stop:
        return _detached(args, definition.name)
    if args.state_file:  # the detached build itself: its state written as it goes, and its end
        from specrig.builder.detach import Reporter
        from specrig.builder.progress import BuildStatus

        status = BuildStatus()
        with Reporter(args.state_file, status) as reporter:
            wheel = _build(args, definition, status)
            reporter.wheel = str(wheel)
        return 0
    _build(args, definition, None)
    return 0


def _build(args: argparse.Namespace, definition: BuildDefinition, status: BuildStatus | None) -> Path | None:
    from specrig.builder.execute import cross_check_dependencies, execute, fetch_sources
    from specrig.builder.plan import BuildRequest, make_plan
    from specrig.builder.progress import install_sigterm_as_exit
    from specrig.builder.render import plan_as_dict, render_plan

    archs = None
    if args.arch:
        archs = tuple(a for item in args.arch for a in item.split(",") if a.strip())
    target = args.target
    recipe = resolve_recipe(args, purpose="build", build=None if target.endswith(".toml") else definition.name)
    req = BuildRequest(
        target=target,
        recipe=str(recipe.path),
        archs=archs,
        jobs=args.jobs,
        nvcc_threads=args.nvcc_threads,
        source_cache=args.source_cache,
        wheelhouse=args.wheelhouse,
        python=args.python,
        record=args.record,
        memory_gib=args.memory_gib,
        cores=args.cores,
        offline=args.offline,
        rebuild=args.rebuild,
        reuse_only=args.reuse_only,
        log_dir=args.log_dir,
        plan_only=args.plan,
    )
    if args.import_source:
        _import_sources(args, definition)
    if args.detach and (args.plan or args.pin or args.fetch_only or args.check):
        raise ConfigError(
            "--detach starts a build; --plan, --pin, --fetch-only and --check do not start one",
            hint="drop --detach; check a finished detached build with --check --reuse-only",
        )
    plan = make_plan(req)
    if args.detach:
        return _start(args, plan)
    if status is not None:
        status.jobs_cap, status.gb_per_job_estimate = plan.cap.jobs, plan.cap.gb_per_job
    if args.plan:
        if args.json:
            print(json.dumps(plan_as_dict(plan), indent=2, default=str))
        else:
            print(render_plan(plan))
        if plan.cap.jobs == 0:
            from specrig.builder.cap import not_enough_memory

            raise not_enough_memory(plan.definition.memory, plan.cap.budget, plan.cap.one_job_gib)
        return None
    if args.pin:
        from specrig.builder.sources import SourceCache

        cache = SourceCache(plan.source_cache)
        d = plan.definition
        todo = [a for a in d.archives() if not a.key]
        for archive in todo:
            print(f'{archive.name}: sha256 = "{cache.pin(archive)}"')
        log.step(
            f"{len(todo)} unpinned sources downloaded into {plan.source_cache}; review, then record the hashes in {d.path}"
        )
        return None
    if args.fetch_only:
        project, deps = fetch_sources(plan, offline=args.offline)
        log.step(
            f"source cache {plan.source_cache} holds {plan.definition.name} ({project}) and {len(deps)} dependencies, all verified"
        )
        if plan.definition.dependencies:
            cross_check_dependencies(plan.definition, project)
            log.step("FetchContent declarations match the build definition")
        return None
    install_sigterm_as_exit()
    outcome = execute(plan, req, status)
    print(outcome.wheel)
    if args.check:
        from specrig.builder.check import check_wheel

        check_wheel(plan, outcome.wheel)
    return outcome.wheel


def _renamed(args: argparse.Namespace) -> str:
    """The build the target means for the recipe named with --recipe (an old name for its new one)."""
    from specrig.builder.definition import RENAMED

    new = RENAMED.get(args.target)
    if not new or not getattr(args, "recipe", None):
        return args.target
    recipe = resolve_recipe(args, purpose="build")
    if new in recipe.builds and args.target not in recipe.builds:
        log.info(f"recipe {recipe.name} pins {new} (the new name of {args.target}): building {new}")
        return new
    return args.target


def _import_sources(args: argparse.Namespace, definition: BuildDefinition) -> None:
    """--import-source NAME=ARCHIVE: each archive into the source cache, its pin checked."""
    from specrig.builder.sources import SourceCache
    from specrig.core import paths

    archives = {a.name: a for a in definition.archives()}
    cache = SourceCache(args.source_cache or paths.subdir("sources"))
    for item in args.import_source:
        name, sep, file = item.partition("=")
        if not sep or not file:
            raise ConfigError(
                f"--import-source {item!r}: expected NAME=ARCHIVE", hint="e.g. repo-cutlass=cutlass.tar.gz"
            )
        if name not in archives:
            raise ConfigError(
                f"--import-source {name}: {definition.name} has no pinned source of that name",
                hint=f"its sources: {', '.join(archives)}",
            )
        with log.timed(f"importing {Path(file).name} as {name} (pin checked)"):
            where = cache.import_archive(archives[name], Path(file))
        log.info(f"{name}: {where}")


def _start(args: argparse.Namespace, plan: BuildPlan) -> None:
    """Start the planned build detached; say how to follow it."""
    import time

    from specrig.builder import detach

    if plan.cap.jobs == 0:
        from specrig.builder.cap import not_enough_memory

        raise not_enough_memory(plan.definition.memory, plan.cap.budget, plan.cap.one_job_gib)
    name, log_dir = plan.definition.name, plan.log_dir
    argv = ["build", *(a for a in args.argv if a != "--detach")]
    path = detach.state_file(log_dir, name)
    console = log_dir / f"{name}-detached-{time.strftime('%Y%m%d-%H%M%S')}.console.log"
    state = detach.start(argv, path=path, console=console)
    same = f" --log-dir {args.log_dir}" if args.log_dir else ""
    log.step(f"{name}: build started detached, pid {state['pid']} (state {path}, output {console})")
    t = args.target
    log.info(f"follow it: specrig build {t} --follow{same}; end it: specrig build {t} --stop{same}")
    return None


def _detached(args: argparse.Namespace, name: str) -> int:
    """--status, --follow, --stop of the detached build of ``name``."""
    from specrig.builder import detach
    from specrig.core import paths

    path = detach.state_file(args.log_dir or paths.subdir("build-logs"), name)
    if args.stop:
        state = detach.stop(path)
        print(detach.render(state, name))
        return 0
    if args.follow:
        try:
            state = detach.follow(path, name)
        except KeyboardInterrupt:
            log.info(f"stopped following; the build goes on (`specrig build {name} --stop` ends it)")
            return 130
    else:
        state = detach.read(path)
        print(detach.render(state, name))
    return detach.exit_code(state)
