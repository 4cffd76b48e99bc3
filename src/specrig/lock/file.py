"""The lock file (``recipes/RECIPE.ENV.lock``): its typed model, validated the
way recipes are (every problem named by its dotted key), and atomic writing.

A lock records only what shapes it, so a recipe edit that does not touch its
environment leaves the file byte for byte as it was:

``[lock]``        schema, recipe, env, the digest of the inputs that decide this
                  environment (staleness: :func:`specrig.lock.resolve.check_fresh`),
                  the resolver and the ``exclude_newer`` cut-off
``[target]``      what the environment was resolved for: Python, platform, torch
                  version and variant (all among the inputs digested)
``[[package]]``   name, version, marker, the sha256 of every acceptable file, and
                  ``provided = true`` for packages the host's interpreter provides

A lock written before that rule also holds the whole recipe's digest
(``recipe_digest``, changed by any edit) and the host's GPU facts in ``[target]``;
it reads as any other, those keys ignored.

Wheels specrig builds are not in the lock: they have a record of their own
(:mod:`specrig.built`), so a build never changes a lock.

There is no URL or index host in it: a lock installs against any mirror or a
local wheelhouse.
"""

from __future__ import annotations

import contextlib
import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tomli_w
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from specrig.core import atomic
from specrig.core.errors import LockError
from specrig.core.validation import describe

__all__ = ["LOCK_SCHEMA", "LockedPackage", "Lock", "read_lock", "lock_text", "write_lock"]

LOCK_SCHEMA = 1
_SHA256 = r"^sha256:[0-9a-f]{64}$"


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    hashes: tuple[str, ...]
    """``sha256:HEX`` of every file (wheel or sdist) that may be installed."""
    files: tuple[str, ...] = ()
    """The file names those hashes belong to (for people, bundles and error messages)."""
    marker: str = ""
    provided: bool = False
    """The host's interpreter provides it (recipe ``host_provides``): not installed by specrig."""

    def requirement_line(self) -> str:
        line = f"{self.name}=={self.version}"
        if self.marker:
            line += f" ; {self.marker}"
        return line + "".join(f" --hash={h}" for h in self.hashes)

    def file_hashes(self) -> list[tuple[str, str]]:
        """(file name, hex sha256) pairs, in lock order."""
        return [(f, h.removeprefix("sha256:")) for f, h in zip(self.files, self.hashes, strict=False)]


@dataclass(frozen=True)
class Lock:
    path: Path
    recipe: str
    env: str
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

    @property
    def installed_packages(self) -> tuple[LockedPackage, ...]:
        """What specrig installs (everything but the host-provided packages)."""
        return tuple(p for p in self.packages if not p.provided)

    @property
    def provided_packages(self) -> tuple[LockedPackage, ...]:
        return tuple(p for p in self.packages if p.provided)

    def requirements_text(self) -> str:
        return "\n".join(p.requirement_line() for p in self.installed_packages) + "\n"


# --------------------------------------------------------------------------- the file's typed model


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _LockMeta(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)  # resolver, exclude_newer, ... are informational
    schema_: int = Field(alias="schema")
    recipe: str
    env: str
    inputs_digest: str = Field(pattern=_SHA256)
    recipe_digest: str | None = Field(default=None, pattern=_SHA256)
    """Written by older specrig (the whole recipe's digest, which any edit changed): read, ignored."""


class _PackageEntry(_Strict):
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    hashes: list[Annotated[str, Field(pattern=_SHA256)]] = Field(min_length=1)
    files: list[str] = []
    marker: str = ""
    provided: StrictBool = False


class _LockFile(_Strict):
    lock: _LockMeta
    target: dict[str, Any] = {}
    package: list[_PackageEntry] = []


def _format(path: Path, exc: ValidationError, doc: dict[str, Any]) -> str:
    def package_name(loc: tuple[Any, ...]) -> str:
        if len(loc) > 1 and loc[0] == "package" and isinstance(loc[1], int):
            with contextlib.suppress(KeyError, IndexError, TypeError):
                return str(doc["package"][loc[1]]["name"])
        return ""

    return describe(f"malformed lock {path}", exc, label=package_name, pattern="expected 'sha256:' + 64 hex digits")


def read_lock(path: Path) -> Lock:
    path = Path(path)
    if not path.is_file():
        raise LockError(f"lock file {path} does not exist", hint="run `nox -s lock -- --recipe NAME` first")
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LockError(f"lock {path} is not valid TOML: {exc}", hint="re-create it with `nox -s lock`") from None
    schema = doc.get("lock", {}).get("schema") if isinstance(doc.get("lock"), dict) else None
    if schema is not None and schema != LOCK_SCHEMA:
        raise LockError(
            f"lock {path} has schema {schema!r}, this specrig reads schema {LOCK_SCHEMA}",
            hint="re-create it with `nox -s lock`",
        )
    try:
        model = _LockFile.model_validate(doc)
    except ValidationError as exc:
        raise LockError(
            _format(path, exc, doc), hint="re-create it with `nox -s lock` (locks are generated, not edited)"
        ) from None
    meta = model.lock.model_dump(exclude={"schema_", "recipe", "env", "recipe_digest", "inputs_digest"})
    return Lock(
        path=path,
        recipe=model.lock.recipe,
        env=model.lock.env,
        inputs_digest=model.lock.inputs_digest,
        target=dict(model.target),
        packages=tuple(
            LockedPackage(p.name, p.version, tuple(p.hashes), tuple(p.files), p.marker, p.provided)
            for p in model.package
        ),
        meta=meta,
    )


def _package_doc(p: LockedPackage) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": p.name, "version": p.version, "hashes": list(p.hashes), "files": list(p.files)}
    if p.marker:
        doc["marker"] = p.marker
    if p.provided:
        doc["provided"] = True
    return doc


def _header(recipe: str, env: str) -> str:
    return (
        f"# specrig lock for recipe {recipe!r}, environment {env!r}.\n"
        f"# Generated by `nox -s lock -- --recipe {recipe}`; do not edit by hand.\n"
        "# Names, versions and sha256 hashes only: install against any mirror or wheelhouse.\n"
    )


def lock_text(lock: Lock) -> str:
    """The lock file's text, as :func:`write_lock` writes it (the same lock gives the same bytes)."""
    doc: dict[str, Any] = {
        "lock": {
            "schema": LOCK_SCHEMA,
            "recipe": lock.recipe,
            "env": lock.env,
            "inputs_digest": lock.inputs_digest,
            **lock.meta,
        },
        "target": lock.target,
        "package": [_package_doc(p) for p in lock.packages],
    }
    return _header(lock.recipe, lock.env) + tomli_w.dumps(doc)


def write_lock(lock: Lock) -> None:
    """Write atomically (a temporary file renamed over the old one)."""
    atomic.write_text(lock.path, lock_text(lock))
