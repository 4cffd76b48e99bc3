"""The patch-set model: what lies under ``patches/<distribution>/<version>/``.

A patch set is a folder holding

``set.toml``
    the distribution and version the set is for, the distributions that ship
    byte-identical sources for every target file (``equivalent``), and the
    wheel RECORD hash of every file the set touches (``[base]``);
``series``
    the patch file names in the order they apply (``#`` starts a comment);
``NNNN-name.patch``
    one concern each: a DEP-3-style header (``Field: value`` lines, continuation
    lines indented) followed by a unified diff whose paths are relative to
    site-packages (``a/vllm/...`` / ``b/vllm/...``, strip level 1).

Header fields: ``Subject`` (one line), ``Description`` (why), ``Origin``
(where the fix's idea comes from), ``Bug`` / ``Forwarded`` (links),
``Applied-Upstream`` (``<distribution> <version>`` of the first release that
contains the change, or ``no``), ``Author``, ``Last-Update``.
Subject, Description, Origin and Applied-Upstream are required.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import ConfigError
from ..paths import repo_root

__all__ = [
    "REQUIRED_FIELDS",
    "Patch",
    "PatchSet",
    "available_versions",
    "load_patch_set",
    "parse_patch",
    "patches_root",
]

REQUIRED_FIELDS = ("Subject", "Description", "Origin", "Applied-Upstream")
_FIELD = re.compile(r"^([A-Z][A-Za-z-]*):\s?(.*)$")
_TARGET = re.compile(r"^\+\+\+ b/(\S+)")


@dataclass(frozen=True, kw_only=True)
class Patch:
    """One ``*.patch`` file of a series."""

    name: str
    path: Path
    fields: dict[str, str]
    """Header fields (continuation lines joined with newlines)."""
    diff: str
    """The unified diff (everything from the first ``--- a/`` line on)."""
    targets: tuple[str, ...]
    """Files the diff changes, relative to site-packages."""

    @property
    def subject(self) -> str:
        return self.fields["Subject"]

    @property
    def applied_upstream(self) -> tuple[str, Version] | None:
        """``(distribution, version)`` of the first release containing the change."""
        value = self.fields.get("Applied-Upstream", "no").strip()
        if value.lower().startswith("no"):
            return None
        parts = value.split()
        try:
            return parts[0].rstrip(","), Version(parts[1].rstrip(","))
        except (IndexError, InvalidVersion) as exc:
            raise ConfigError(
                f"{self.path}: Applied-Upstream must be '<distribution> <version> [links]' or 'no', got {value!r}",
                hint="e.g. 'Applied-Upstream: vllm 0.18.0, https://github.com/vllm-project/vllm/pull/NNN'",
            ) from exc

    def unnecessary_for(self, distribution: str, version: str) -> bool:
        """True when ``distribution==version`` already contains this change upstream."""
        upstream = self.applied_upstream
        if upstream is None:
            return False
        dist, first = upstream
        same = _norm(dist) == _norm(distribution) or _norm(distribution).startswith(_norm(dist) + "-")
        try:
            return same and Version(version).release >= first.release
        except InvalidVersion:
            return False


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
        seen: dict[str, None] = {}
        for patch in self.patches:
            for target in patch.targets:
                seen.setdefault(target, None)
        return tuple(seen)

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


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def parse_patch(path: Path) -> Patch:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    fields: dict[str, str] = {}
    current: str | None = None
    diff_start = None
    for i, line in enumerate(lines):
        if line.startswith(("--- a/", "diff ")):
            diff_start = i
            break
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
    if diff_start is None:
        raise ConfigError(f"{path}: no unified diff found (expected a '--- a/...' line)")
    missing = [f for f in REQUIRED_FIELDS if f not in fields]
    if missing:
        raise ConfigError(
            f"{path}: header lacks {', '.join(missing)}",
            hint="every patch states why (Description), where it comes from (Origin) and its upstream status (Applied-Upstream)",
        )
    diff = "".join(lines[diff_start:])
    targets = tuple(dict.fromkeys(m.group(1) for line in diff.splitlines() if (m := _TARGET.match(line))))
    if not targets:
        raise ConfigError(f"{path}: the diff changes no file")
    return Patch(name=path.name, path=path, fields=fields, diff=diff, targets=targets)


def load_patch_set(name: str, version: str, root: Path | None = None) -> PatchSet:
    """Load ``patches/<name>/<version>/``; a missing set names the versions that exist."""
    folder = (root or patches_root()) / name / version
    if not (folder / "series").is_file():
        have = available_versions(name, root)
        raise ConfigError(
            f"no patch set for {name} {version} (looked in {folder})",
            hint=f"patch sets exist for {name} {', '.join(have)}" if have else f"no patch sets exist for {name}",
        )
    meta_path = folder / "set.toml"
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
        info = meta["set"]
        distribution, set_version = info["distribution"], info["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{meta_path}: unreadable or missing [set] distribution/version ({exc})") from exc
    if set_version != version:
        raise ConfigError(f"{meta_path}: set.version {set_version!r} does not match its folder {version!r}")
    patches = []
    for raw in (folder / "series").read_text(encoding="utf-8").splitlines():
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        if not (folder / entry).is_file():
            raise ConfigError(f"{folder / 'series'}: lists {entry!r}, which does not exist")
        patches.append(parse_patch(folder / entry))
    if not patches:
        raise ConfigError(f"{folder / 'series'} lists no patches")
    base = dict(meta.get("base", {}))
    pset = PatchSet(
        name=name,
        distribution=distribution,
        version=version,
        equivalent=tuple(info.get("equivalent", ())),
        base=base,
        path=folder,
        patches=tuple(patches),
    )
    unpinned = [t for t in pset.targets if t not in base]
    if unpinned:
        raise ConfigError(
            f"{meta_path}: [base] has no RECORD hash for {', '.join(unpinned)}",
            hint="copy the line for each target file from the released wheel's RECORD",
        )
    return pset
