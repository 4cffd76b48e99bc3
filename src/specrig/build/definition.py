"""Build definitions (``build/NAME.toml``): what to build, from which pinned
sources, with which fixed settings. Data only; every key is checked when loaded.

Sections::

    [build]         name, version, backend, units, valid_archs, local_version
    [source]        kind = "sdist" | "archive" | "path", plus its pin (sha256, commit)
    [memory]        gb_per_compile, reserve_gib, fraction, source       (the cap model)
    [env]           fixed environment variables for the build
    [cmake]         defines, arch_define, arch_format, threads_define   (scikit-build-core)
    [[dependency]]  FetchContent dependencies: name, repository, commit, url, sha256
    [[rewrite]]     checked edits to the build copy: file, pattern, replacement, count, why
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import repo_root
from .cap import MemoryModel
from .sources import Archive

__all__ = [
    "BuildDefinition",
    "SourceSpec",
    "Dependency",
    "Rewrite",
    "CMakeSpec",
    "load_definition",
    "definition_path",
    "known_definitions",
]


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    kind: str
    """``sdist`` (a package-index sdist), ``archive`` (a URL), ``path`` (a local folder)."""
    sha256: str = ""
    distribution: str = ""
    filename: str = ""
    repository: str = ""
    tag: str = ""
    commit: str = ""
    url: str = ""
    subdir: str = ""
    """Folder inside the unpacked archive that holds the project (``sgl-kernel``)."""
    path: str = ""
    """For ``kind = "path"``: folder relative to the definition file."""


@dataclass(frozen=True, kw_only=True)
class Dependency:
    """A CMake FetchContent dependency, pre-fetched into the source cache."""

    name: str
    """The FetchContent name exactly as declared (``repo-cutlass``)."""
    repository: str = ""
    commit: str = ""
    url: str = ""
    sha256: str = ""
    cmake_pin: str = ""
    """What the CMakeLists pins (GIT_TAG commit or URL_HASH sha256); cross-checked."""
    fetch: bool = True
    """False: declared upstream but unused by this build (cross-checked, not fetched)."""
    note: str = ""

    def archive(self) -> Archive:
        return Archive(name=self.name, url=self.url, sha256=self.sha256, filename=self.url.rsplit("/", 1)[-1])


@dataclass(frozen=True, kw_only=True)
class Rewrite:
    file: str
    pattern: str
    replacement: str
    count: int = 1
    """Matches expected; 0 means at least one. A mismatch stops the build (upstream changed)."""
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class CMakeSpec:
    defines: dict[str, str] = field(default_factory=dict)
    arch_define: str = "CMAKE_CUDA_ARCHITECTURES"
    arch_format: str = "{arch}-real"
    """How one arch is written; joined with ``arch_join``."""
    arch_join: str = ";"
    threads_define: str = ""
    """CMake cache variable that takes nvcc's ``--threads`` (empty: none)."""
    version_in_pyproject: bool = True
    """Stamp the local version tag into the copy's ``[project].version``."""


@dataclass(frozen=True, kw_only=True)
class BuildDefinition:
    path: Path
    name: str
    version: str
    backend: str
    units: int | None
    valid_archs: tuple[str, ...]
    local_version: str
    uses_torch: bool
    source: SourceSpec
    memory: MemoryModel
    env: dict[str, str]
    cmake: CMakeSpec
    dependencies: tuple[Dependency, ...]
    rewrites: tuple[Rewrite, ...]

    def source_archive(self) -> Archive | None:
        s = self.source
        if s.kind == "sdist":
            return Archive(name=self.name, url=None, sha256=s.sha256, filename=s.filename, distribution=s.distribution)
        if s.kind == "archive":
            return Archive(name=self.name, url=s.url, sha256=s.sha256, filename=s.url.rsplit("/", 1)[-1])
        return None

    def local_path(self) -> Path:
        return (self.path.parent / self.source.path).resolve()


def build_dir() -> Path:
    return repo_root() / "build"


def known_definitions() -> list[str]:
    return sorted(p.stem for p in build_dir().glob("*.toml"))


def definition_path(target: str) -> Path:
    p = Path(target)
    if p.suffix == ".toml":
        if not p.is_file():
            raise ConfigError(f"build definition {p} does not exist", hint="give flash-attn, sgl-kernel or a .toml path")
        return p
    candidate = build_dir() / f"{target}.toml"
    if not candidate.is_file():
        names = known_definitions()
        close = difflib.get_close_matches(target, names, n=1)
        hint = f"known builds: {', '.join(names)}"
        if close:
            hint = f"did you mean {close[0]!r}? " + hint
        raise ConfigError(f"unknown build {target!r}", hint=hint)
    return candidate


def _take(cls: type, data: dict[str, Any], where: str, path: Path) -> Any:
    allowed = {f.name for f in fields(cls)}
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"did you mean {where}.{close[0]}?" if close else f"allowed: {', '.join(sorted(allowed))}"
            raise ConfigError(f"build definition {path}: unknown key {where}.{key}", hint=hint)
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"build definition {path}: [{where}] {exc}", hint="see docs/builds.md") from None


_BUILD_KEYS = {"name", "version", "backend", "units", "valid_archs", "local_version", "uses_torch"}
_TOP_KEYS = {"build", "source", "memory", "env", "cmake", "dependency", "rewrite"}
BACKENDS = ("setuptools-torch", "scikit-build-core")


def load_definition(target: str | Path) -> BuildDefinition:
    path = definition_path(str(target)).resolve()
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"build definition {path} is not valid TOML: {exc}", hint="fix the syntax") from None
    for key in doc:
        if key not in _TOP_KEYS:
            raise ConfigError(f"build definition {path}: unknown table [{key}]", hint=f"allowed: {', '.join(sorted(_TOP_KEYS))}")
    b = doc.get("build", {})
    for key in b:
        if key not in _BUILD_KEYS:
            close = difflib.get_close_matches(key, sorted(_BUILD_KEYS), n=1)
            raise ConfigError(
                f"build definition {path}: unknown key build.{key}",
                hint=f"did you mean build.{close[0]}?" if close else f"allowed: {', '.join(sorted(_BUILD_KEYS))}",
            )
    for req in ("name", "version", "backend"):
        if req not in b:
            raise ConfigError(f"build definition {path}: build.{req} is required", hint="see docs/builds.md")
    if b["backend"] not in BACKENDS:
        raise ConfigError(
            f"build definition {path}: build.backend = {b['backend']!r} is not known", hint=f"use one of {', '.join(BACKENDS)}"
        )
    source = _take(SourceSpec, doc.get("source", {}), "source", path)
    if source.kind not in ("sdist", "archive", "path"):
        raise ConfigError(f"build definition {path}: source.kind = {source.kind!r}", hint="use sdist, archive or path")
    if source.kind != "path" and not re.fullmatch(r"[0-9a-f]{64}|", source.sha256):
        raise ConfigError(f"build definition {path}: source.sha256 is not 64 hex digits", hint="copy the full sha256")
    if "memory" not in doc:
        raise ConfigError(f"build definition {path}: [memory] is required (gb_per_compile)", hint="see docs/builds.md")
    deps = tuple(_take(Dependency, d, "dependency", path) for d in doc.get("dependency", []))
    names = [d.name for d in deps]
    if len(set(names)) != len(names):
        raise ConfigError(f"build definition {path}: a dependency is declared twice", hint="names must be unique")
    return BuildDefinition(
        path=path,
        name=b["name"],
        version=b["version"],
        backend=b["backend"],
        units=b.get("units"),
        valid_archs=tuple(b.get("valid_archs", ())),
        local_version=b.get("local_version", "sm{archs}.{cuda}.torch{torch}"),
        uses_torch=bool(b.get("uses_torch", True)),
        source=source,
        memory=_take(MemoryModel, doc["memory"], "memory", path),
        env={k: str(v) for k, v in doc.get("env", {}).items()},
        cmake=_take(CMakeSpec, doc.get("cmake", {}), "cmake", path),
        dependencies=deps,
        rewrites=tuple(_take(Rewrite, r, "rewrite", path) for r in doc.get("rewrite", [])),
    )
