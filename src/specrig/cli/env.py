"""``specrig env`` (``nox -s env``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specrig.cli.common import add_recipe_option, resolve_recipe

HELP = "make or reuse an engine environment from its lock, or check an existing interpreter against it"
DESCRIPTION = (
    "Make (or reuse) an engine's virtual environment exactly as its lock pins it, after a host preflight.\n"
    "--python PATH uses an existing interpreter instead (never modified); --check reports how it (or the\n"
    "made environment) differs from the lock; --wheelhouse DIR --offline installs from a bundle with no index."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    p.add_argument("--engine", default="vllm", help="engine whose environment to make (default: vllm)")
    p.add_argument("--env", help="environment name (default: the engine's [engine.X].env)")
    p.add_argument("--lock", type=Path, help="install this lock file (default: recipes/RECIPE.ENV.lock)")
    p.add_argument(
        "--wheelhouse",
        type=Path,
        help="folder of wheels: specrig's built wheels (default: the user cache); with --offline, a bundle "
        "(`nox -s bundle`) or any folder holding the lock's files; with --check, locked wheels to compare "
        "installed files with",
    )
    p.add_argument("--offline", action="store_true", help="install from --wheelhouse only: no index, no network")
    p.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="an existing interpreter: used as it is (or, with host_provides, as the base of the venv)",
    )
    p.add_argument("--check", action="store_true", help="only report how the interpreter differs from the lock")
    p.add_argument("--deep", action="store_true", help="with --check: re-hash every installed file against its RECORD")
    p.add_argument("--json", type=Path, metavar="FILE", help="with --check: also write the drift as JSON")
    p.add_argument("--force", action="store_true", help="reinstall even if the environment matches")
    p.add_argument("--skip-preflight", action="store_true", help="do not check the host against the recipe")


def drift_table(drift):
    from rich.table import Table

    from specrig.env.provided import DriftKind

    t = Table(title=f"{drift.python} (Python {drift.python_version}) against {drift.lock}")
    for col in ("package", "drift", "lock / recipe", "installed", "core", "detail"):
        t.add_column(col)
    for i in drift.items:
        if i.kind is DriftKind.EXTRA and len(drift.items) > 40:
            continue  # a provided interpreter may hold hundreds of extras: counted below
        t.add_row(i.name, str(i.kind), i.locked or "", i.installed or "", "yes" if i.core else "", i.detail)
    return t


def _check(args: argparse.Namespace, recipe, env_name: str) -> int:
    from specrig.core import atomic
    from specrig.core.errors import EnvError
    from specrig.core.log import log
    from specrig.core.paths import env_dir
    from specrig.env.provided import DriftKind, check_provided

    python = args.python
    spec = recipe.env[env_name]
    made = env_dir(recipe.name, env_name) / "bin" / "python"
    if python is None and spec.layered and made.exists():
        python = made  # the venv over the host's interpreter sees both
    elif python is None and not spec.python:
        if not made.exists():
            raise EnvError(
                f"no interpreter to check: --python not given, [env.{env_name}] names none and {made} is not made",
                hint="pass --python PATH, or make the environment first with `nox -s env`",
            )
        python = made
    drift = check_provided(recipe, env_name, python, deep=args.deep, lock_path=args.lock, wheelhouse=args.wheelhouse)
    if args.json:
        atomic.write_json(args.json, drift.model_dump(mode="json"))
    if drift.items:
        log.console.print(drift_table(drift))
    extra = drift.count(DriftKind.EXTRA)
    (log.step if drift.clean else log.warn)(drift.summary() + (f" ({extra} extra)" if extra else ""))
    if args.deep:
        log.info(f"{drift.checked_files} installed files re-hashed against their RECORD")
    if args.wheelhouse:
        log.info(f"{drift.wheels_compared} distributions compared file by file with their locked wheel")
    return 0 if not [i for i in drift.items if i.kind is not DriftKind.EXTRA] else 1


def run(args: argparse.Namespace) -> int:
    from specrig.core.log import log
    from specrig.env.make import make_env
    from specrig.lock.resolve import read_lock
    from specrig.patches.declared import settle
    from specrig.recipe.schema import load_recipe

    if args.lock and not args.recipe:
        lock = read_lock(args.lock)
        recipe, env_name = load_recipe(lock.recipe), lock.env
    else:
        recipe = resolve_recipe(args)
        env_name = recipe.env_named(args.env) if args.env else recipe.env_for_engine(args.engine)
    if args.check:
        return _check(args, recipe, env_name)
    if args.offline and not args.wheelhouse:
        from specrig.core.errors import ConfigError

        raise ConfigError("--offline needs --wheelhouse DIR", hint="make one with `nox -s bundle -- --recipe NAME`")
    env = make_env(
        recipe,
        env_name,
        lock_path=args.lock,
        wheelhouse=args.wheelhouse,
        skip_preflight=args.skip_preflight,
        force=args.force,
        python=args.python,
        offline=args.offline,
    )
    for line in settle(recipe, env_name, Path(env.python), provided=env.provided):
        log.step(line)
    print(env.python if env.provided else env.path)
    return 0
