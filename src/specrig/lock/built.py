"""The built-wheel record: the wheels specrig built for one recipe environment.

A build writes it, ``env`` reads it; it sits below both in the flow
(recipe -> lock -> built record -> env), so a build never touches a lock and
an environment made from an unchanged lock is reused, with the built wheels
installed on top of it.

``recipes/RECIPE.ENV.built.toml`` sits beside the environment's lock and is
committed like it. It holds names, versions, file names, hashes and the build
facts, never a URL or a path of one machine::

    schema = 1

    [[wheel]]
    name = "flash-attn"
    version = "2.8.3+sm120.cu130.torch291"
    filename = "flash_attn-2.8.3+sm120.cu130.torch291-cp312-cp312-linux_x86_64.whl"
    sha256 = "..."          # of the wheel file
    fingerprint = "..."     # its wheelhouse entry: <wheelhouse>/<fingerprint>/<filename>
    archs = ["120"]
    cuda = "13.0.88"
    torch = "2.9.1+cu128"
    python_tag = "cp312"
    definition = "flash-attn.toml"
    source_sha256 = "..."

Also here: how a stored wheel is found in a wheelhouse and checked, which
``env`` needs and the build room's writer (``specrig.builder.wheelhouse``) shares.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specrig.core import atomic, locks
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError, HashMismatchError
from specrig.core.validation import describe
from specrig.lock.file import Lock

__all__ = [
    "RECORD_SCHEMA",
    "MANIFEST",
    "BuiltWheel",
    "BuiltRecord",
    "record_path",
    "read_record",
    "write_record",
    "add_wheel",
    "read_manifest",
    "find_wheel",
    "supersede",
]

RECORD_SCHEMA = 1
MANIFEST = "manifest.json"

OLD_BUILD_ROOM = "specrig.build."
NEW_BUILD_ROOM = "specrig.builder."
"""The build room's package, as records before and after its rename name it."""

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class BuiltWheel(BaseModel):
    """One wheel specrig built from source, stored in a wheelhouse under its fingerprint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    """With the local tag that names arch, CUDA and torch (``2.8.3+sm120.cu130.torch291``)."""
    filename: str
    sha256: Sha256
    fingerprint: Annotated[str, Field(pattern=r"^[0-9a-f]{16,64}$")]
    archs: tuple[str, ...]
    cuda: str
    """CUDA toolkit that compiled it."""
    torch: str = ""
    """torch it was built against (empty for builds without torch)."""
    python_tag: str
    definition: str
    """File name of its build definition, or the module that made it (``specrig.builder.repack``)."""
    source_sha256: str
    """sha256 of the source archive (or tree digest of a local source)."""

    @field_validator("definition", mode="before")
    @classmethod
    def _renamed_room(cls, value: object) -> object:
        """Records written before the build room was renamed name its old module (``specrig.build.repack``):
        read under the module's name now, so readers see one name and the next write records it."""
        if isinstance(value, str) and value.startswith(OLD_BUILD_ROOM):
            return NEW_BUILD_ROOM + value.removeprefix(OLD_BUILD_ROOM)
        return value

    @property
    def key(self) -> str:
        return str(canonicalize_name(self.name))


class BuiltRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal[1] = Field(RECORD_SCHEMA, alias="schema")
    wheel: tuple[BuiltWheel, ...] = ()

    def versions(self) -> dict[str, str]:
        """Canonical name -> version, as an environment reports them."""
        return {w.key: w.version for w in self.wheel}

    def with_wheel(self, new: BuiltWheel) -> BuiltRecord:
        """This record with ``new`` added, replacing a wheel of the same name."""
        kept = [w for w in self.wheel if w.key != new.key]
        return BuiltRecord(schema=RECORD_SCHEMA, wheel=tuple(sorted([*kept, new], key=lambda w: w.key)))


def supersede(lock: Lock, record: BuiltRecord) -> Lock:
    """``lock`` without the packages that a built wheel of the same name replaces
    (e.g. a vLLM wheel repacked to fit a transfer): the built wheel is installed,
    hash-checked against the record, instead of the published one."""
    names = set(record.versions())
    if not names:
        return lock
    return replace(lock, packages=tuple(p for p in lock.packages if canonicalize_name(p.name) not in names))


def record_path(lock_path: Path) -> Path:
    """``recipes/RECIPE.ENV.built.toml`` for ``recipes/RECIPE.ENV.lock``."""
    lock_path = Path(lock_path)
    return lock_path.with_name(lock_path.name.removesuffix(".lock") + ".built.toml")


def read_record(path: Path) -> BuiltRecord:
    """The record at ``path``; an empty one where there is no file."""
    path = Path(path)
    if not path.is_file():
        return BuiltRecord()
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"built-wheel record {path} is not valid TOML: {exc}", hint="fix the syntax, or restore it from git"
        ) from None
    try:
        return BuiltRecord.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            describe(f"invalid built-wheel record {path}", exc, model=BuiltRecord),
            hint="restore it from git, or rebuild the wheel (`specrig build NAME`) to write it again",
        ) from None


def write_record(path: Path, record: BuiltRecord) -> None:
    """Write ``record`` atomically (a temporary sibling, fsynced, renamed over)."""
    path = Path(path)
    doc = record.model_dump(mode="json", by_alias=True)
    text = (
        "# Wheels specrig built for this environment (`specrig build NAME`); env installs them\n"
        "# from the wheelhouse by fingerprint and sha256. Written by the build; do not edit by hand.\n"
        + tomli_w.dumps(doc)
    )
    atomic.write_bytes(path, text.encode(), mode=0o644)


def add_wheel(path: Path, wheel: BuiltWheel) -> BuiltRecord:
    """Add ``wheel`` to the record at ``path`` (replacing one of the same name); return the new record."""
    with locks.hold(path, f"recording {wheel.filename} in {Path(path).name}"):  # no update lost to another build
        record = read_record(path).with_wheel(wheel)
        write_record(path, record)
    return record


# --------------------------------------------------------------------------- the wheelhouse, read side


def read_manifest(wheelhouse: Path, fingerprint: str) -> dict[str, Any] | None:
    """``<wheelhouse>/<fingerprint>/manifest.json``, or None."""
    try:
        return json.loads((Path(wheelhouse) / fingerprint / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def find_wheel(
    wheelhouse: Path, fingerprint: str, filename: str | None = None, sha256: str | None = None
) -> Path | None:
    """The stored wheel for ``fingerprint`` (and ``filename``, if given), or None.

    Its sha256 is checked against ``sha256`` (the record's) and its manifest; a
    mismatch (a damaged or edited copy) raises :class:`HashMismatchError` rather
    than being used.
    """
    entry = Path(wheelhouse) / fingerprint
    manifest = read_manifest(Path(wheelhouse), fingerprint)
    if manifest is None:
        return None
    name = filename or manifest.get("filename")
    if not name or manifest.get("filename") != name:
        return None
    path = entry / name
    if not path.is_file():
        return None
    got = sha256_file(path)
    for expected in dict.fromkeys(x for x in (sha256, manifest.get("sha256")) if x):
        if got != expected:
            raise HashMismatchError(
                f"wheelhouse entry {path} is damaged:\n  expected sha256 {expected}\n  got      sha256 {got}",
                hint=f"delete {entry} and rebuild, or copy the entry again from the host that built it",
            )
    return path
