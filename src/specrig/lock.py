"""Resolve one recipe environment with uv into a hash-pinned lock, and read,
verify and judge the staleness of locks.

A lock (``recipes/RECIPE.ENV.lock``) is TOML:

``[lock]``        schema, recipe, env, the recipe's digest and the digest of the
                  inputs that decide this environment (staleness), the uv version
``[target]``      the non-Python facts: Python, platform, GPU count and compute
                  capability, CUDA, driver minimum, torch version and CUDA variant
``[[package]]``   name, version, marker, the sha256 of every acceptable file

There is no URL or index host in it: a lock installs against any mirror or a
local wheelhouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from packaging.utils import canonicalize_name

from .errors import ConfigError, LockError
from .log import log
from .recipe import EnvSpec, Recipe

__all__ = [
    "LOCK_SCHEMA",
    "LockedPackage",
    "Lock",
    "inputs_digest",
    "resolve",
    "write_lock",
    "read_lock",
    "check_fresh",
    "expand_find_links",
    "uv_bin",
]

LOCK_SCHEMA = 1


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    hashes: tuple[str, ...]
    """``sha256:HEX`` of every file (wheel or sdist) that may be installed."""
    files: tuple[str, ...] = ()
    """The file names those hashes belong to (for people and error messages)."""
    marker: str = ""

    def requirement_line(self) -> str:
        line = f"{self.name}=={self.version}"
        if self.marker:
            line += f" ; {self.marker}"
        return line + "".join(f" --hash={h}" for h in self.hashes)


@dataclass(frozen=True)
class Lock:
    path: Path
    recipe: str
    env: str
    recipe_digest: str
    inputs_digest: str
    target: dict[str, Any]
    packages: tuple[LockedPackage, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Hash of the lock file itself (names the environment made from it)."""
        return "sha256:" + hashlib.sha256(self.path.read_bytes()).hexdigest()

    def versions(self) -> dict[str, str]:
        return {canonicalize_name(p.name): p.version for p in self.packages}

    def requirements_text(self) -> str:
        return "\n".join(p.requirement_line() for p in self.packages) + "\n"


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
        raise LockError("uv is not installed", hint="pip install uv==0.13.9 (specrig resolves and installs with uv)") from None


def uv_version() -> str:
    out = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[1] if out.split() else "unknown"


def expand_find_links(spec: EnvSpec) -> list[str]:
    """The env's local wheel folders, ``$VAR`` expanded, missing ones skipped."""
    out = []
    for entry in spec.find_links:
        expanded = os.path.expandvars(entry)
        if "$" in expanded or not expanded:
            continue
        if Path(expanded).is_dir():
            out.append(expanded)
    return out


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
    return "sha256:" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _target(recipe: Recipe) -> dict[str, Any]:
    h = recipe.host
    target: dict[str, Any] = {
        "python": h.python,
        "platform": h.platform,
        "os": h.os,
        "gpu_count": h.gpu_count,
        "torch": recipe.torch.version,
        "torch_variant": recipe.torch.variant,
    }
    if h.gpu_count:
        target |= {
            "gpu_name": h.gpu_name,
            "compute_capability": h.compute_capability,
            "cuda": h.cuda,
            "driver_min": h.driver_min,
        }
    return target


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
                hint="pin torch==VERSION+{variant} from an index that serves that variant, or change torch.variant",
            )
    elif variant == "cpu" and any(p.name.startswith("nvidia-") for p in packages):
        raise LockError("torch variant is 'cpu' but nvidia-* CUDA packages were resolved", hint="pin torch==X+cpu")


def resolve(recipe: Recipe, env: str) -> tuple[list[LockedPackage], str]:
    """Run ``uv pip compile`` for the recipe's platform and Python; returns packages and uv's version."""
    if env not in recipe.env:
        raise ConfigError(
            f"recipe {recipe.name!r} has no environment {env!r}", hint=f"environments: {', '.join(sorted(recipe.env))}"
        )
    spec = recipe.env[env]
    with tempfile.TemporaryDirectory(prefix="specrig-lock-") as tmp:
        tmpd = Path(tmp)
        req = tmpd / "requirements.in"
        req.write_text("\n".join(spec.requirements) + "\n")
        out = tmpd / "pylock.toml"
        cmd = [
            uv_bin(), "pip", "compile", str(req),
            "--python-version", recipe.host.python,
            "--python-platform", recipe.host.platform,
            "--generate-hashes", "--format", "pylock.toml", "-o", str(out),
            "--exclude-newer", recipe.recipe.exclude_newer,
            "--no-header", "--quiet",
        ]  # fmt: skip
        if spec.overrides:
            ovr = tmpd / "overrides.txt"
            ovr.write_text("\n".join(spec.overrides) + "\n")
            cmd += ["--overrides", str(ovr)]
        for d in expand_find_links(spec):
            cmd += ["--find-links", d]
        log.step(f"resolving {recipe.name}.{env} for Python {recipe.host.python} on {recipe.host.platform}")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"UV_NO_PROGRESS": "1"})
        if proc.returncode != 0:
            raise LockError(
                f"uv could not resolve {recipe.name}.{env}:\n{proc.stderr.strip()[-3000:]}",
                hint="check the pins in [env." + env + "] (and find_links for local wheels)",
            )
        data = tomllib.loads(out.read_text())
    packages = sorted((_package_from_pylock(p) for p in data.get("packages", [])), key=lambda p: p.name)
    for p in packages:
        if not any(f.endswith(".whl") for f in p.files):
            log.warn(f"{p.name} {p.version} has no wheel for {recipe.host.platform}: installing it builds from source")
    _check_torch_variant(recipe, packages)
    return packages, uv_version()


# --------------------------------------------------------------------------- write / read


def _lock_doc(lock: Lock) -> dict[str, Any]:
    return {
        "lock": {
            "schema": LOCK_SCHEMA,
            "recipe": lock.recipe,
            "env": lock.env,
            "recipe_digest": lock.recipe_digest,
            "inputs_digest": lock.inputs_digest,
            **lock.meta,
        },
        "target": lock.target,
        "package": [
            {k: v for k, v in asdict(p).items() if v not in ("", ())} | {"hashes": list(p.hashes), "files": list(p.files)}
            for p in lock.packages
        ],
    }


def _header(recipe: str, env: str) -> str:
    return (
        f"# specrig lock for recipe {recipe!r}, environment {env!r}.\n"
        f"# Generated by `nox -s lock -- --recipe {recipe}`; do not edit by hand.\n"
        "# Names, versions and sha256 hashes only: install against any mirror or wheelhouse.\n"
    )


def write_lock(lock: Lock) -> None:
    doc = _lock_doc(lock)
    text = _header(lock.recipe, lock.env) + tomli_w.dumps(doc)
    tmp = lock.path.with_name(lock.path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(lock.path)


def lock_recipe(recipe: Recipe, env: str) -> tuple[Lock, bool]:
    """Resolve and write ``recipes/RECIPE.ENV.lock``; returns the lock and whether the file changed."""
    packages, uv_ver = resolve(recipe, env)
    path = recipe.lock_path(env)
    lock = Lock(
        path=path,
        recipe=recipe.name,
        env=env,
        recipe_digest=recipe.digest,
        inputs_digest=inputs_digest(recipe, env),
        target=_target(recipe),
        packages=tuple(packages),
        meta={"resolver": f"uv {uv_ver}", "exclude_newer": recipe.recipe.exclude_newer},
    )
    before = path.read_bytes() if path.exists() else b""
    write_lock(lock)
    return lock, path.read_bytes() != before


_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")


def read_lock(path: Path) -> Lock:
    path = Path(path)
    if not path.is_file():
        raise LockError(f"lock file {path} does not exist", hint="run `nox -s lock -- --recipe NAME` first")
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LockError(f"lock {path} is not valid TOML: {exc}", hint="re-create it with `nox -s lock`") from None
    try:
        meta = dict(doc["lock"])
        if meta.get("schema") != LOCK_SCHEMA:
            raise LockError(
                f"lock {path} has schema {meta.get('schema')!r}, this specrig reads schema {LOCK_SCHEMA}",
                hint="re-create it with `nox -s lock`",
            )
        packages = []
        for i, p in enumerate(doc.get("package", [])):
            hashes = tuple(p["hashes"])
            bad = [h for h in hashes if not _HASH_RE.fullmatch(h)]
            if not hashes or bad:
                raise LockError(
                    f"lock {path}: package[{i}] ({p.get('name')}) has a malformed or missing hash {bad[:1]}",
                    hint="hashes are 'sha256:' + 64 hex digits; re-create the lock with `nox -s lock`",
                )
            packages.append(
                LockedPackage(
                    name=p["name"], version=p["version"], hashes=hashes,
                    files=tuple(p.get("files", ())), marker=p.get("marker", ""),
                )
            )  # fmt: skip
        return Lock(
            path=path,
            recipe=meta.pop("recipe"),
            env=meta.pop("env"),
            recipe_digest=meta.pop("recipe_digest"),
            inputs_digest=meta.pop("inputs_digest"),
            target=dict(doc.get("target", {})),
            packages=tuple(packages),
            meta={k: v for k, v in meta.items() if k != "schema"},
        )
    except (KeyError, TypeError) as exc:
        raise LockError(f"lock {path} is malformed: missing or wrong field {exc}", hint="re-create it with `nox -s lock`") from None


def check_fresh(lock: Lock, recipe: Recipe) -> None:
    """Raise when the recipe changed what this environment resolves to since it was locked."""
    if lock.inputs_digest != inputs_digest(recipe, lock.env):
        raise LockError(
            f"lock {lock.path.name} is stale: recipe {recipe.name!r} changed [env.{lock.env}], [torch] or [host] "
            "python/platform since it was locked",
            hint=f"re-lock with `nox -s lock -- --recipe {recipe.name}` and commit the new lock",
        )

