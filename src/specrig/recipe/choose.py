"""The one policy that picks a recipe when the user names none.

serve (env, bench, patch, drafter): ``cpu`` on a host without an NVIDIA GPU,
else the recipe whose compute capability matches the GPUs. build: the GPU
recipe that pins the build and matches the GPUs; without a GPU, the first
recipe (by name) that pins it: a cross-build, said so. The caller hands in the
host's compute capabilities (the host room reads them once). A recipe file that
does not load is skipped with a warning, so one broken file does not break
commands that never use it."""

from __future__ import annotations

from typing import Literal

from specrig.core.errors import ConfigError, HostError
from specrig.core.log import log
from specrig.recipe.schema import Recipe, known_recipes, load_recipe

__all__ = ["Purpose", "default_recipe_name", "choose_recipe"]

Purpose = Literal["serve", "build"]


def _loadable() -> list[Recipe]:
    out = []
    for name in known_recipes():
        try:
            out.append(load_recipe(name))
        except ConfigError as exc:
            log.warn(f"skipping recipes/{name}.toml, which does not load: {exc.message}")
    return out


def default_recipe_name(ccs: set[str], *, purpose: Purpose = "serve", build: str | None = None) -> str:
    """The recipe for a host whose GPUs have compute capabilities ``ccs`` (empty: no GPU)."""
    if not ccs and purpose == "serve":
        return "cpu"
    candidates = _loadable()
    if purpose == "build":
        candidates = [r for r in candidates if r.needs_gpu and (build is None or build in r.builds)]
    if not ccs:
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


def choose_recipe(name: str | None, ccs: set[str], *, purpose: Purpose = "serve", build: str | None = None) -> Recipe:
    """The recipe ``name`` names (a name or a path), else the one the policy picks."""
    return load_recipe(name or default_recipe_name(ccs, purpose=purpose, build=build))
