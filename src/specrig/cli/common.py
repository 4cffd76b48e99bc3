"""What several commands share: the ``--recipe`` option. The policy that picks
a recipe when none is given lives in :mod:`specrig.recipe.choose`."""

from __future__ import annotations

import argparse

from specrig.host.machine import Host, probe
from specrig.recipe.choose import Purpose, choose_recipe
from specrig.recipe.choose import default_recipe_name as _default_name
from specrig.recipe.schema import Recipe

__all__ = ["add_recipe_option", "resolve_recipe", "default_recipe_name"]


def add_recipe_option(p: argparse.ArgumentParser, *, purpose: Purpose = "serve") -> None:
    default = (
        "default: the recipe matching this host's GPUs; on a host without one, the first recipe that "
        "pins this build (a cross-build)"
        if purpose == "build"
        else "default: 'cpu' on a host without an NVIDIA GPU, else the recipe matching the GPUs"
    )
    p.add_argument("--recipe", metavar="NAME|PATH", help=f"recipe name (recipes/NAME.toml) or path; {default}")


def default_recipe_name(host: Host | None = None, *, purpose: Purpose = "serve", build: str | None = None) -> str:
    return _default_name((host or probe()).compute_capabilities, purpose=purpose, build=build)


def resolve_recipe(
    args: argparse.Namespace, host: Host | None = None, *, purpose: Purpose = "serve", build: str | None = None
) -> Recipe:
    """The recipe ``--recipe`` names, else the one the policy picks."""
    name = getattr(args, "recipe", None)
    return choose_recipe(name, set() if name else (host or probe()).compute_capabilities, purpose=purpose, build=build)
