"""``specrig bundle`` (``nox -s bundle``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specrig.cli.common import add_recipe_option, resolve_recipe

HELP = "download every file a lock installs into one folder (optionally in volumes) for offline installs"
DESCRIPTION = (
    "Download every file an environment's lock installs, hash-verified, into one folder with a manifest\n"
    "(bundle.toml: names, versions, file names, sha256; no URLs), optionally split into volumes of at most\n"
    "N MB. Install it elsewhere with `nox -s env -- --wheelhouse DIR --offline`."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_option(p)
    p.add_argument("--engine", default="vllm", help="engine whose environment to bundle (default: vllm)")
    p.add_argument("--env", help="environment name (default: the engine's [engine.X].env)")
    p.add_argument("--out", type=Path, help="bundle folder (default: the user cache, bundles/RECIPE-ENV)")
    p.add_argument(
        "--split-mb",
        type=int,
        metavar="N",
        help="volumes of at most N MB (10^6 bytes) each; a larger file is split into parts",
    )
    p.add_argument("--wheelhouse", type=Path, help="where specrig's built wheels are (default: the user cache)")


def run(args: argparse.Namespace) -> int:
    from specrig.core.errors import ConfigError
    from specrig.core.paths import subdir
    from specrig.env.bundle import make_bundle

    recipe = resolve_recipe(args)
    env_name = args.env or recipe.env_for_engine(args.engine)
    if args.split_mb is not None and args.split_mb < 1:
        raise ConfigError(f"--split-mb {args.split_mb}: a volume must hold at least 1 MB", hint="--split-mb 1 or more")
    out = args.out or subdir("bundles") / f"{recipe.name}-{env_name}"
    make_bundle(recipe, env_name, out, split_mb=args.split_mb, wheelhouse=args.wheelhouse)
    print(out)
    return 0
