"""Build definitions (``build/NAME.toml``): what to build, from which pinned
sources, with which fixed settings. Data only; typed, and every key checked
when loaded: a bad file is a :class:`~specrig.errors.ConfigError` naming the
dotted key (``dependency.2.sha256``) and what is wrong with it.

Sections::

    [build]         name, version, backend, units, valid_archs, local_version, uses_torch
    [source]        kind = "sdist" | "archive" | "path", plus its pin (sha256, commit)
    [memory]        gb_per_compile, reserve_gib, fraction, source       (the cap model)
    [disk]          build_gib_per_arch, wheel_gib_per_arch, source      (checked before a build starts)
    [env]           fixed environment variables for the build
    [cmake]         defines, arch_define, arch_format, threads_define   (scikit-build-core)
    [[dependency]]  FetchContent dependencies: name, repository, commit, url, sha256
    [[rewrite]]     checked edits to the build copy: file, pattern, replacement, count, why, archs
    [check]         script: the wheel's check on the GPU (``specrig/builder/inenv/SCRIPT.py``)
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from specrig.builder.cap import MemoryModel
from specrig.builder.sources import Archive
from specrig.core.errors import ConfigError
from specrig.core.paths import repo_root
from specrig.core.validation import describe

__all__ = [
    "BuildDefinition",
    "BuildMeta",
    "SourceSpec",
    "Dependency",
    "Rewrite",
    "CMakeSpec",
    "load_definition",
    "definition_path",
    "known_definitions",
    "RENAMED",
]


def _sha256_or_empty(v: str) -> str:
    if v and not re.fullmatch(r"[0-9a-f]{64}", v):
        raise ValueError(f"not a sha256 (64 lowercase hex digits): {v!r}; leave it empty for an unpinned source")
    return v


Sha256OrEmpty = Annotated[str, AfterValidator(_sha256_or_empty)]


BACKEND_NAMES: Final = ("setuptools-torch", "scikit-build-core")
"""How a definition may be built (``[build].backend``): the names, declared here, where definitions
are read; ``specrig.builder.backends`` maps each to its implementation (and checks it maps exactly these)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuildMeta(_Strict):
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    backend: str
    """How it is built; one of the backends in ``specrig.builder.backends``."""
    units: int | None = Field(None, ge=1)
    """Compile units (translation units), if known: a cap never plans more jobs."""
    valid_archs: tuple[str, ...] = ()
    local_version: str = "sm{archs}.{cuda}.torch{torch}"
    uses_torch: bool = True

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {v!r}; use one of {', '.join(BACKEND_NAMES)}")
        return v


class SourceSpec(_Strict):
    kind: Literal["sdist", "archive", "path"]
    """``sdist`` (a package-index sdist), ``archive`` (a URL), ``path`` (a local folder)."""
    sha256: Sha256OrEmpty = ""
    """Empty means unpinned: ``--pin`` prints it, a build refuses it."""
    tree_sha256: Sha256OrEmpty = ""
    """Pin by content: the digest of the unpacked ``subdir`` (``specrig.builder.sources.content_digest``);
    any archive of that tree is accepted (GitHub's, or ``git archive`` of a snapshot's commit)."""
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

    @model_validator(mode="after")
    def _what_the_kind_needs(self) -> SourceSpec:
        need = {"sdist": ("distribution", "filename"), "archive": ("url",), "path": ("path",)}[self.kind]
        missing = [k for k in need if not getattr(self, k)]
        if missing:
            raise ValueError(f"kind = {self.kind!r} needs {' and '.join(missing)}")
        return self


class Dependency(_Strict):
    """A CMake FetchContent dependency, pre-fetched into the source cache."""

    name: str = Field(min_length=1)
    """The FetchContent name exactly as declared (``repo-cutlass``)."""
    repository: str = ""
    commit: str = ""
    url: str = ""
    sha256: Sha256OrEmpty = ""
    tree_sha256: Sha256OrEmpty = ""
    """Pin by content, as ``[source].tree_sha256``: of the whole unpacked tree, or of ``paths``."""
    paths: tuple[str, ...] = ()
    """The folders the build reads from it (``include``): what ``tree_sha256`` covers."""
    cmake_pin: str = ""
    """What the CMakeLists pins (GIT_TAG commit or URL_HASH sha256); cross-checked."""
    fetch: bool = True
    """False: declared upstream but unused by this build (cross-checked, not fetched)."""
    note: str = ""

    @model_validator(mode="after")
    def _fetched_needs_url(self) -> Dependency:
        if self.fetch and not self.url:
            raise ValueError("a fetched dependency needs url (or fetch = false)")
        return self

    def archive(self) -> Archive:
        return Archive.from_url(
            self.name, self.url, sha256=self.sha256, tree_sha256=self.tree_sha256, tree_paths=self.paths
        )


class Rewrite(_Strict):
    file: str
    pattern: str
    replacement: str
    count: int = Field(1, ge=0)
    """Matches expected; 0 means at least one. A mismatch stops the build (upstream changed)."""
    why: str = ""
    archs: tuple[str, ...] = ()
    """Applies only to a build whose every arch is one of these (empty: to every build): a variant
    such as sglang-kernel's ``common_ops``, built as ``sm90/`` for 9.0 and as ``sm100/`` for any other."""

    def applies_to(self, archs: tuple[str, ...]) -> bool:
        return not self.archs or set(archs) <= set(self.archs)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return v


class CMakeSpec(_Strict):
    defines: dict[str, str] = {}
    arch_define: str = "CMAKE_CUDA_ARCHITECTURES"
    arch_format: str = "{arch}-real"
    """How one arch is written; joined with ``arch_join``."""
    arch_join: str = ";"
    threads_define: str = ""
    """CMake cache variable that takes nvcc's ``--threads`` (empty: none)."""
    version_in_pyproject: bool = True
    """Stamp the local version tag into the copy's ``[project].version``."""


CHECKS_DIR: Final = Path(__file__).parent / "inenv"


class CheckSpec(_Strict):
    """What ``specrig build NAME --check`` runs, in the build environment, with the wheel on its path."""

    script: str
    """A file of ``specrig/builder/inenv/`` (without ``.py``)."""

    @field_validator("script")
    @classmethod
    def _exists(cls, v: str) -> str:
        known = sorted(p.stem for p in CHECKS_DIR.glob("*.py"))
        if v not in known:
            raise ValueError(f"no check script {v!r}; known: {', '.join(known)}")
        return v

    @property
    def path(self) -> Path:
        return CHECKS_DIR / f"{self.script}.py"


class DiskModel(_Strict):
    """What a build writes besides the copy of its source (``[disk]``), per GPU arch it builds for:
    checked against the free space of the build folder and the wheelhouse before it starts."""

    build_gib_per_arch: float = Field(2.0, ge=0)
    """Objects, device code and the linked library in the build folder."""
    wheel_gib_per_arch: float = Field(0.25, ge=0)
    """The wheel (a flash-attn wheel for one arch is about 66 MB)."""
    source: str = ""
    """Where the figures come from."""


class BuildDefinition(_Strict):
    build: BuildMeta
    source: SourceSpec
    memory: MemoryModel
    disk: DiskModel = DiskModel()
    env: dict[str, str] = {}
    cmake: CMakeSpec = CMakeSpec()
    dependency: tuple[Dependency, ...] = ()
    rewrite: tuple[Rewrite, ...] = ()
    check: CheckSpec | None = None
    _path: Path = PrivateAttr(Path())

    @property
    def path(self) -> Path:
        """The file it was read from."""
        return self._path

    @model_validator(mode="after")
    def _unique_dependencies(self) -> BuildDefinition:
        names = [d.name for d in self.dependency]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"dependency names must be unique; declared twice: {', '.join(twice)}")
        return self

    # the [build] facts, read as the definition's own
    name = property(lambda self: self.build.name)
    version = property(lambda self: self.build.version)
    backend = property(lambda self: self.build.backend)
    units = property(lambda self: self.build.units)
    valid_archs = property(lambda self: self.build.valid_archs)
    local_version = property(lambda self: self.build.local_version)
    uses_torch = property(lambda self: self.build.uses_torch)
    dependencies = property(lambda self: self.dependency)
    rewrites = property(lambda self: self.rewrite)

    def rewrites_for(self, archs: tuple[str, ...]) -> tuple[Rewrite, ...]:
        """The checked edits a build for ``archs`` makes, in declared order."""
        return tuple(r for r in self.rewrite if r.applies_to(archs))

    @model_validator(mode="after")
    def _rewrite_archs_are_valid(self) -> BuildDefinition:
        valid = set(self.build.valid_archs)
        for i, r in enumerate(self.rewrite):
            unknown = sorted(set(r.archs) - valid) if valid else []
            if unknown:
                raise ValueError(f"rewrite.{i}.archs names {', '.join(unknown)}, not in build.valid_archs")
        return self

    def source_archive(self) -> Archive | None:
        s = self.source
        if s.kind == "sdist":
            return Archive(name=self.name, url=None, sha256=s.sha256, filename=s.filename, distribution=s.distribution)
        if s.kind == "archive":
            return Archive.from_url(self.name, s.url, sha256=s.sha256, tree_sha256=s.tree_sha256, subdir=s.subdir)
        return None

    def archives(self) -> list[Archive]:
        """Every archive the build reads: its source (unless local) and the dependencies it fetches."""
        src = self.source_archive()
        return ([src] if src else []) + [dep.archive() for dep in self.dependencies if dep.fetch]

    def local_path(self) -> Path:
        return (self.path.parent / self.source.path).resolve()


RENAMED = {"sgl-kernel": "sglang-kernel"}
"""sgl-kernel was renamed sglang-kernel at 0.4 (PyPI and build/): `build sgl-kernel` (the nox session
build_sgl_kernel) builds whichever of the two the recipe given with --recipe pins."""


def build_dir() -> Path:
    return repo_root() / "build"


def known_definitions() -> list[str]:
    return sorted(p.stem for p in build_dir().glob("*.toml"))


def definition_path(target: str) -> Path:
    p = Path(target)
    if p.suffix == ".toml":
        if not p.is_file():
            raise ConfigError(
                f"build definition {p} does not exist", hint="give flash-attn, sgl-kernel or a .toml path"
            )
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


def load_definition(target: str | Path) -> BuildDefinition:
    path = definition_path(str(target)).resolve()
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"build definition {path} is not valid TOML: {exc}", hint="fix the syntax") from None
    try:
        d = BuildDefinition.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(
            describe(f"invalid build definition {path}", exc, model=BuildDefinition),
            hint="see docs/builds.md for every key",
        ) from None
    d._path = path
    return d
