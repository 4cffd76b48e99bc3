"""What several commands share: the ``--recipe`` option and the one policy that
picks a recipe when none is given."""

from __future__ import annotations

import argparse
from typing import Literal

from ..errors import HostError
from ..host import Host, probe
from ..log import log
from ..recipe import Recipe, known_recipes, load_recipe

__all__ = ["add_recipe_option", "resolve_recipe", "default_recipe_name"]

Purpose = Literal["serve", "build"]


def add_recipe_option(p: argparse.ArgumentParser, *, purpose: Purpose = "serve") -> None:
    default = (
        "default: the recipe matching this host's GPUs; on a host without one, the first recipe that "
        "pins this build (a cross-build)"
        if purpose == "build"
        else "default: 'cpu' on a host without an NVIDIA GPU, else the recipe matching the GPUs"
    )
    p.add_argument("--recipe", metavar="NAME|PATH", help=f"recipe name (recipes/NAME.toml) or path; {default}")


def default_recipe_name(host: Host | None = None, *, purpose: Purpose = "serve", build: str | None = None) -> str:
    """The one default-recipe policy.

    serve (env, bench, patch, drafter): ``cpu`` without an NVIDIA GPU, else the
    recipe whose compute capability matches the GPUs.
    build: the GPU recipe that pins ``build`` and matches the GPUs; without a GPU,
    the first recipe (by name) that pins it: a cross-build, said so."""
    host = host or probe()
    ccs = {g.compute_capability for g in host.gpus}
    candidates = [load_recipe(n) for n in known_recipes()]
    if purpose == "build":
        candidates = [r for r in candidates if r.needs_gpu and (build is None or build in r.builds)]
    if not ccs:
        if purpose == "serve":
            return "cpu"
        if not candidates:
            raise HostError(f"no recipe pins a build of {build}", hint="pass --recipe NAME")
        chosen = candidates[0]
        archs = ", ".join(f"sm_{a}" for a in chosen.host.arch_list) or "its GPU arch"
        log.step(f"no NVIDIA GPU here: cross-building for recipe {chosen.name} ({archs}); --recipe picks another")
        return chosen.name
    for r in candidates:
        if r.needs_gpu and {c.rstrip("a") for c in r.host.compute_capability} & ccs:
            return r.name
    raise HostError(
        f"no recipe targets this host's GPUs (compute capability {', '.join(sorted(ccs))})",
        hint="pass --recipe NAME, or add recipes/NAME.toml for this host",
    )


def resolve_recipe(
    args: argparse.Namespace, host: Host | None = None, *, purpose: Purpose = "serve", build: str | None = None
) -> Recipe:
    """The recipe ``--recipe`` names, else the one the policy picks."""
    name = getattr(args, "recipe", None)
    return load_recipe(name or default_recipe_name(host, purpose=purpose, build=build))
