"""``specrig patch check|apply|status|revert`` (``nox -s patch -- ...``).

Which site-packages: ``--site-packages PATH``, else the environment
``--env`` of ``--recipe`` made by ``nox -s env``.
Which set: with a recipe, the version the recipe's env pins for each family
(``vllm==0.16.0`` -> ``patches/vllm/0.16.0``), and the installed version must
equal it; with ``--site-packages`` alone, the installed version picks the set.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..errors import ConfigError
from ..log import log
from ..patches import apply as ops
from ..patches.model import PatchSet, available_versions, load_patch_set
from ..patches.record import purelib_of
from .common import add_recipe_option, resolve_recipe

HELP = "check/apply/status/revert patch sets on an environment"
DESCRIPTION = (
    "Versioned patch sets for vLLM and speculators, applied to an engine environment "
    "all-or-nothing, verified against the wheels' RECORD hashes."
)
FAMILIES = ("vllm", "speculators")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "check": "verify version and RECORD hashes and that every patch applies; change nothing",
        "apply": "apply the patch sets (all or none) and register the guard plugin",
        "status": "show what is applied and which patches upstream has made unnecessary",
        "revert": "restore every patched file to its RECORD bytes and remove the guard plugin",
    }
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text)
        add_recipe_option(p)
        p.add_argument("--env", default="vllm", help="environment name in the recipe (default: vllm)")
        p.add_argument("--site-packages", type=Path, help="patch this site-packages folder instead of the recipe env")
        p.add_argument(
            "--set", dest="family", choices=(*FAMILIES, "all"), default="all", help="which patch sets (default: all)"
        )
        p.add_argument("--patches-dir", type=Path, help=argparse.SUPPRESS)


def _pinned_versions(recipe, env_name: str) -> dict[str, str]:
    if env_name not in recipe.env:
        raise ConfigError(f"recipe {recipe.name!r} has no env {env_name!r}", hint=f"envs: {', '.join(recipe.env)}")
    pins = {}
    for line in recipe.env[env_name].requirements:
        if m := re.match(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;,]+)", line):
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _site_packages(args: argparse.Namespace) -> Path:
    if args.site_packages:
        site = args.site_packages.expanduser().resolve()
        if not site.is_dir():
            raise ConfigError(f"--site-packages {site} is not a folder")
        return site
    from ..env import env_dir

    return purelib_of(env_dir(args.recipe_obj, args.env) / "bin" / "python")


def _select(args: argparse.Namespace, site: Path, *, strict: bool) -> list[tuple[str, PatchSet | None]]:
    """(family, set) pairs to act on; ``strict`` turns 'not installed' into an error for explicit --set."""
    root = args.patches_dir
    families = FAMILIES if args.family == "all" else (args.family,)
    pins = {} if args.site_packages else _pinned_versions(args.recipe_obj, args.env)
    chosen: list[tuple[str, PatchSet | None]] = []
    for family in families:
        dist = ops.installed_family(site, family, root)
        names = ops.family_distributions(family, root)
        pin = next((pins[n] for n in names if n in pins), None)
        if dist is None:
            if strict and (args.family != "all" or pin):
                raise ConfigError(
                    f"{family} is not installed in {site}",
                    hint="make the environment first (nox -s env) or pass --site-packages PATH",
                )
            log.info(f"{family}: not installed in {site}; skipped")
            continue
        version = pin or dist.version
        if version not in available_versions(family, root):
            if strict:
                load_patch_set(family, version, root)  # raises with the versions that exist
            chosen.append((family, None))
            continue
        chosen.append((family, load_patch_set(family, version, root)))
    return chosen


def run(args: argparse.Namespace) -> int:
    args.recipe_obj = None if args.site_packages else resolve_recipe(args)
    site = _site_packages(args)
    if args.command == "status":
        for family, pset in _select(args, site, strict=False):
            for line in ops.status(family, site, pset, args.patches_dir).lines:
                print(line)
        return 0
    if args.command == "revert":
        families = list(FAMILIES) if args.family == "all" else [args.family]
        result = ops.revert(families, site)
    else:
        psets = [p for _, p in _select(args, site, strict=True) if p is not None]
        if not psets:
            raise ConfigError(f"nothing to {args.command}: no patch set matches what is installed in {site}")
        result = ops.check(psets, site) if args.command == "check" else ops.apply(psets, site)
    for line in result.lines:
        print(line)
    return 0
