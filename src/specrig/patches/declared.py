"""Patch sets as part of an environment: a recipe's ``[env.NAME]`` may declare
``patches = ["vllm", ...]``, the families whose set for the pinned release the
environment needs (the story's EAGLE-3 on vLLM 0.16 needs ``vllm``).

Making or reusing the environment applies what is not applied yet and checks
the rest (:func:`ensure`); an environment specrig must not modify (a provided
interpreter) is only checked, and a declared set that is not applied there
stops the command with the fix (:func:`require`). ``patch apply`` by hand keeps
working on the same stamp."""

from __future__ import annotations

from pathlib import Path

from specrig.core.errors import PatchError
from specrig.patches import apply as ops
from specrig.patches.assess import assess
from specrig.patches.stamp import read_stamp
from specrig.patches.state import State
from specrig.patches.which_sets import choose_sets, pinned_versions
from specrig.recipe.schema import Recipe

__all__ = ["declared", "ensure", "require", "settle"]


def declared(recipe: Recipe, env_name: str, root: Path | None = None) -> list:
    """The patch sets ``[env.NAME] patches`` names, for the versions the recipe pins."""
    spec = recipe.env[env_name]
    if not spec.patches:
        return []
    return choose_sets(list(spec.patches), None, pinned_versions(spec.requirements), explicit=True, root=root)


def _states(psets: list, site: Path) -> dict[str, State]:
    stamp = read_stamp(site)
    return {p.name: assess(p, site, stamp).state for p in psets}


def ensure(recipe: Recipe, env_name: str, site: Path, root: Path | None = None) -> list[str]:
    """Apply the declared sets that are not applied in ``site`` and check the others; returns
    one line per set for the log. A set that cannot be applied raises (site-packages untouched)."""
    psets = declared(recipe, env_name, root)
    if not psets:
        return []
    states = _states(psets, site)
    todo = [p for p in psets if states[p.name] != State.APPLIED]
    lines = [f"patch set {p.name}-{p.version}: already applied" for p in psets if p not in todo]
    if todo:
        run = ops.apply(todo, site)
        lines += [f"patch set {s.family}-{s.version}: {s.action.value}" for s in run.sets]
    still = [n for n, s in _states(psets, site).items() if s != State.APPLIED]
    if still:
        raise PatchError(
            f"the environment's declared patch sets are not applied after apply: {', '.join(still)}",
            hint="`nox -s patch -- status` shows why",
        )
    return lines


def require(recipe: Recipe, env_name: str, site: Path, root: Path | None = None) -> None:
    """Refuse an environment whose declared sets are not applied (one specrig must not modify)."""
    psets = declared(recipe, env_name, root)
    if not psets:
        return
    missing = [f"{n} ({s.value})" for n, s in _states(psets, site).items() if s != State.APPLIED]
    if missing:
        raise PatchError(
            f"recipe {recipe.name!r} env {env_name!r} declares patch sets that are not applied in {site}: "
            + ", ".join(missing),
            hint=f"apply them: `nox -s patch -- apply --recipe {recipe.name} --env {env_name}` "
            "(or pass --site-packages for a provided interpreter you may change)",
        )


def settle(recipe: Recipe, env_name: str, python: Path, *, provided: bool) -> list[str]:
    """The environment's declared sets after it was made or reused: applied where specrig made the
    environment, required where it must not modify it (a provided interpreter). Lines for the log."""
    if not recipe.env[env_name].patches:
        return []
    from specrig.patches.record import purelib_of

    site = purelib_of(python)
    if provided:
        require(recipe, env_name, site)
        return []
    return ensure(recipe, env_name, site)
