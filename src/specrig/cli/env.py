"""``specrig env`` (``nox -s env``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_recipe_option, resolve_recipe

HELP = "make or reuse an engine environment from its lock"
DESCRIPTION = "Make (or reuse) an engine's virtual environment exactly as its lock pins it, after a host preflight."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    p.add_argument("--engine", default="vllm", help="engine whose environment to make (default: vllm)")
    p.add_argument("--env", help="environment name (default: the engine's [engine.X].env)")
    p.add_argument("--lock", type=Path, help="install this lock file (default: recipes/RECIPE.ENV.lock)")
    p.add_argument("--wheelhouse", type=Path, help="folder of wheels specrig built (default: the user cache)")
    p.add_argument("--force", action="store_true", help="reinstall even if the environment matches")
    p.add_argument("--skip-preflight", action="store_true", help="do not check the host against the recipe")


def run(args: argparse.Namespace) -> int:
    from ..env import make_env
    from ..lock import read_lock
    from ..recipe import load_recipe

    if args.lock and not args.recipe:
        lock = read_lock(args.lock)
        recipe, env_name = load_recipe(lock.recipe), lock.env
    else:
        recipe = resolve_recipe(args)
        env_name = args.env or recipe.env_for_engine(args.engine)
    env = make_env(
        recipe,
        env_name,
        lock_path=args.lock,
        wheelhouse=args.wheelhouse,
        skip_preflight=args.skip_preflight,
        force=args.force,
    )
    print(env.path)
    return 0
