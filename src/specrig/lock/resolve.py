"""Resolve one recipe environment with uv into a hash-pinned lock, and judge
the staleness of locks. The file format and its validation live in
:mod:`specrig.lockfile` (re-exported here).

Where files come from is the user's configuration (:mod:`specrig.indexes`);
the lock holds names, versions and hashes only. Packages the recipe says the
host provides (``host_provides``) are resolved like the rest, so the lock
knows their expected versions, and flagged ``provided``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomli_w
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from specrig.core import atomic
from specrig.core.errors import ConfigError, LockError
from specrig.core.log import log
from specrig.core.paths import recipes_dir
from specrig.lock.file import LOCK_SCHEMA, Lock, LockedPackage, read_lock, write_lock
from specrig.lock.indexes import Sources, index_hint, matches, missing_hint, sources_for
from specrig.recipe.schema import EnvSpec, Recipe

__all__ = [
    "LOCK_SCHEMA",
    "LockedPackage",
    "Lock",
    "inputs_digest",
    "lock_target",
    "lock_of",
    "relock_command",
    "resolve",
    "write_lock",
    "read_lock",
    "check_fresh",
    "expand_find_links",
    "uv_bin",
]

# --------------------------------------------------------------------------- resolve


def uv_bin() -> str:
    """The uv executable: ``$SPECRIG_UV``, on PATH, or the one next to this Python."""
    for cand in (os.environ.get("SPECRIG_UV"), shutil.which("uv")):
        if cand:
            return cand
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return find_uv_bin()
    except ImportError:
        raise LockError(
            "uv is not installed", hint="pip install uv==0.13.9 (specrig resolves and installs with uv)"
        ) from None


def uv_version() -> str:
    out = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[1] if out.split() else "unknown"


def expand_find_links(spec: EnvSpec) -> list[str]:
    """The env's ``find_links`` variables, expanded (unset ones and missing folders skipped)."""
    from specrig.lock.indexes import _env_links

    return _env_links(spec.find_links)


def inputs_digest(recipe: Recipe, env: str) -> str:
    """Digest of exactly what decides this environment's resolution."""
    spec = recipe.env[env]
    payload = {
        "schema": LOCK_SCHEMA,
        "python": recipe.host.python,
        "platform": recipe.host.platform,
        "exclude_newer": recipe.recipe.exclude_newer,
        "torch": recipe.torch.model_dump(),
        "requirements": spec.requirements,
        "overrides": spec.overrides,
    }
    if spec.host_provides:  # only flags packages; absent from older digests, which stay valid
        payload["host_provides"] = sorted(spec.host_provides)
    return "sha256:" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def lock_target(recipe: Recipe) -> dict[str, Any]:
    """What an environment of ``recipe`` is resolved for, as its lock's ``[target]`` records it: only
    facts among the inputs digested (the host's GPU, CUDA and driver facts shape no lock)."""
    return {
        "python": recipe.host.python,
        "platform": recipe.host.platform,
        "torch": recipe.torch.version,
        "torch_variant": recipe.torch.variant,
    }


def _package_from_pylock(entry: dict[str, Any]) -> LockedPackage:
    files: list[tuple[str, str]] = []
    for wheel in entry.get("wheels", []):
        name = wheel.get("name") or Path(str(wheel.get("url") or wheel.get("path"))).name
        files.append((name, wheel["hashes"]["sha256"]))
    # the sdist only where no wheel fits: a lock lists exactly what may be installed,
    # so an altered wheel hash cannot silently fall back to building the sdist
    if not files and (sd := entry.get("sdist")):
        name = sd.get("name") or Path(str(sd.get("url") or sd.get("path"))).name
        files.append((name, sd["hashes"]["sha256"]))
    if not files:
        raise LockError(
            f"uv resolved {entry['name']} {entry.get('version')} without any hashed file",
            hint="a lock must pin every package by hash; is it a local directory or VCS requirement?",
        )
    files.sort()
    return LockedPackage(
        name=str(canonicalize_name(entry["name"])),
        version=str(entry["version"]),
        hashes=tuple(f"sha256:{h}" for _, h in files),
        files=tuple(n for n, _ in files),
        marker=entry.get("marker", ""),
    )


def _check_torch_variant(recipe: Recipe, packages: list[LockedPackage]) -> None:
    """The resolved torch must be the recipe's version and CUDA variant."""
    by_name = {p.name: p for p in packages}
    torch = by_name.get("torch")
    if torch is None:
        return
    base, _, local = torch.version.partition("+")
    if base != recipe.torch.version:
        raise LockError(
            f"resolved torch {torch.version} but the recipe pins torch {recipe.torch.version}",
            hint="pin torch==VERSION in the env's requirements",
        )
    variant = recipe.torch.variant
    if local and local != variant:
        raise LockError(f"resolved torch {torch.version}, variant {local!r} != recipe's {variant!r}")
    if variant.startswith("cu"):
        major, minor = variant[2:-1], variant[-1]
        runtime = by_name.get(f"nvidia-cuda-runtime-cu{major}") or by_name.get("nvidia-cuda-runtime")
        if runtime is None or not runtime.version.startswith(f"{major}.{minor}"):
            found = f"{runtime.name} {runtime.version}" if runtime else "no nvidia-cuda-runtime package"
            raise LockError(
                f"torch variant {variant} expects CUDA runtime {major}.{minor}, resolved {found}",
                hint=f"pin torch==VERSION+{variant} from an index that serves that variant, or change torch.variant",
            )
    elif variant == "cpu" and any(p.name.startswith("nvidia-") for p in packages):
        raise LockError("torch variant is 'cpu' but nvidia-* CUDA packages were resolved", hint="pin torch==X+cpu")


def _preferences(path: Path, prefer: Lock) -> None:
    """Write the existing lock's choices where uv writes its output: uv reads an existing
    output file as preferences, keeping each locked version that still satisfies the
    requirements (what ``uv lock`` and pip-compile do), whatever was published since."""
    doc = {
        "lock-version": "1.0",
        "created-by": "specrig (the previous lock's versions, as preferences)",
        "packages": [
            {"name": p.name, "version": p.version, **({"marker": p.marker} if p.marker else {})}
            for p in prefer.packages
        ],
    }
    atomic.write_text(path, tomli_w.dumps(doc))


def resolve(
    recipe: Recipe,
    env: str,
    *,
    prefer: Lock | None = None,
    upgrade: bool = False,
    upgrade_packages: tuple[str, ...] = (),
) -> tuple[list[LockedPackage], str]:
    """Run ``uv pip compile`` for the recipe's platform and Python; returns packages and uv's version.

    With ``prefer`` (the environment's existing lock) every locked version that still
    satisfies the recipe is kept, except with ``upgrade`` (none kept) or for the
    ``upgrade_packages`` named (those move to the newest the cut-off allows)."""
    if env not in recipe.env:
        raise ConfigError(
            f"recipe {recipe.name!r} has no environment {env!r}", hint=f"environments: {', '.join(sorted(recipe.env))}"
        )
    spec = recipe.env[env]
    sources = sources_for(recipe, env)
    for line in sources.origins:
        log.info(f"source: {line}")
    with tempfile.TemporaryDirectory(prefix="specrig-lock-") as tmp:
        tmpd = Path(tmp)
        req = _resolution_input(tmpd, recipe, env, sources)
        out = tmpd / "pylock.toml"
        if prefer is not None and not upgrade:
            _preferences(out, prefer)
        cmd = [
            uv_bin(),
            "pip",
            "compile",
            str(req),
            "--python-version",
            recipe.host.python,
            "--python-platform",
            recipe.host.platform,
            "--generate-hashes",
            "--format",
            "pylock.toml",
            "-o",
            str(out),
            "--exclude-newer",
            recipe.recipe.exclude_newer,
            "--no-header",
            "--quiet",
            *sources.uv_args(pin_recipe_indexes=True),
        ]
        for name in upgrade_packages:
            cmd += ["--upgrade-package", name]
        # an index without upload times (PyTorch's) would be excluded by exclude_newer as a
        # whole; its packages are pinned with == by the recipe, so the cutoff is not needed
        for name in _pinned_names(recipe, env, sources):
            cmd += ["--exclude-newer-package", f"{name}=false"]
        if spec.overrides:
            ovr = tmpd / "overrides.txt"
            atomic.write_text(ovr, "\n".join(spec.overrides) + "\n")
            cmd += ["--overrides", str(ovr)]
        log.step(f"resolving {recipe.name}.{env} for Python {recipe.host.python} on {recipe.host.platform}")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"UV_NO_PROGRESS": "1"})
        if proc.returncode != 0:
            missing = missing_hint(proc.stderr, sources)
            if missing:
                raise LockError(f"{missing[0]}\nuv said:\n{proc.stderr.strip()[-2000:]}", hint=missing[1])
            hint = (
                index_hint(sources)
                or f"check the pins in [env.{env}] and your index settings (UV_INDEX_URL, PIP_FIND_LINKS, ...)"
            )
            raise LockError(f"uv could not resolve {recipe.name}.{env}:\n{proc.stderr.strip()[-3000:]}", hint=hint)
        data = tomllib.loads(out.read_text())
    packages = sorted((_package_from_pylock(p) for p in data.get("packages", [])), key=lambda p: p.name)
    for p in packages:
        if not any(f.endswith(".whl") for f in p.files):
            log.warn(f"{p.name} {p.version} has no wheel for {recipe.host.platform}: installing it builds from source")
    _check_torch_variant(recipe, packages)
    if spec.host_provides:
        packages = [replace(p, provided=True) if matches(p.name, spec.host_provides) else p for p in packages]
    return packages, uv_version()


def _pinned_names(recipe: Recipe, env: str, sources: Sources) -> list[str]:
    names = [str(canonicalize_name(Requirement(r).name)) for r in recipe.env[env].requirements]
    return [n for n in names if any(matches(n, i.spec.packages) for i in sources.pinned_indexes)]


def _resolution_input(tmpd: Path, recipe: Recipe, env: str, sources: Sources) -> Path:
    """requirements.in; or, when a recipe index is configured, a pyproject.toml that
    pins that index's packages to it (explicit), so no other package comes from it."""
    spec = recipe.env[env]
    pinned = sources.pinned_indexes
    if not pinned:
        req = tmpd / "requirements.in"
        atomic.write_text(req, "\n".join(spec.requirements) + "\n")
        return req
    names = [str(canonicalize_name(Requirement(r).name)) for r in spec.requirements]
    doc: dict[str, Any] = {
        "project": {"name": "specrig-resolve", "version": "0", "dependencies": list(spec.requirements)},
        "tool": {
            "uv": {
                "index": [{"name": i.name, "url": i.url, "explicit": True} for i in pinned],
                "sources": {n: {"index": i.name} for i in pinned for n in names if matches(n, i.spec.packages)},
            }
        },
    }
    path = tmpd / "pyproject.toml"
    atomic.write_text(path, tomli_w.dumps(doc))
    return path


# --------------------------------------------------------------------------- lock


def previous_lock(path: Path) -> Lock | None:
    """The lock being re-made, when there is a readable one (a broken one is resolved afresh)."""
    if not path.exists():
        return None
    try:
        return read_lock(path)
    except LockError as exc:
        log.warn(f"{path.name} cannot be read ({exc.message.splitlines()[0]}): resolving without its pins")
        return None


def lock_of(recipe: Recipe, env: str, packages: tuple[LockedPackage, ...], resolver: str) -> Lock:
    """The lock of ``env`` holding ``packages``: everything else it records comes from what shapes
    the environment in ``recipe`` (its inputs' digest, target and exclude_newer), nothing more."""
    return Lock(
        path=recipe.lock_path(env),
        recipe=recipe.name,
        env=env,
        inputs_digest=inputs_digest(recipe, env),
        target=lock_target(recipe),
        packages=tuple(packages),
        meta={"resolver": resolver, "exclude_newer": recipe.recipe.exclude_newer},
    )


def lock_recipe(
    recipe: Recipe, env: str, *, upgrade: bool = False, upgrade_packages: tuple[str, ...] = ()
) -> tuple[Lock, bool]:
    """Resolve and write ``recipes/RECIPE.ENV.lock``, keeping the pins of the lock it
    replaces unless asked to move them; returns the lock and whether the file changed."""
    path = recipe.lock_path(env)
    packages, uv_ver = resolve(
        recipe, env, prefer=previous_lock(path), upgrade=upgrade, upgrade_packages=upgrade_packages
    )
    lock = lock_of(recipe, env, tuple(packages), f"uv {uv_ver}")
    before = path.read_bytes() if path.exists() else b""
    write_lock(lock)
    return lock, path.read_bytes() != before


def relock_command(recipe: Recipe) -> str:
    """The command that re-locks ``recipe``: by its name when it is a shipped recipe, else its path."""
    shipped = recipe.path is None or recipe.path.parent.resolve() == recipes_dir().resolve()
    return f"nox -s lock -- --recipe {recipe.name if shipped else recipe.path}"


def check_fresh(lock: Lock, recipe: Recipe) -> None:
    """Refuse a lock whose inputs are not the recipe's: the recipe changed what this environment
    resolves to ([env.NAME], [torch], Python, platform, exclude_newer) since it was locked, or no
    longer has the environment. The error names the command that re-locks it."""
    relock = relock_command(recipe)
    if lock.env not in recipe.env:
        raise LockError(
            f"lock {lock.path.name} is for [env.{lock.env}], which recipe {recipe.name!r} no longer has",
            hint=f"delete {lock.path.name}, or add [env.{lock.env}] back to the recipe",
        )
    if lock.inputs_digest != inputs_digest(recipe, lock.env):
        raise LockError(
            f"lock {lock.path.name} is stale: its inputs are not those of recipe {recipe.name!r} "
            f"([env.{lock.env}], [torch], [host] python/platform or exclude_newer changed since it was locked)",
            hint=f"re-lock with `{relock}` and commit the new lock",
        )
