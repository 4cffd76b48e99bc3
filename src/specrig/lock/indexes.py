"""Where packages come from: the user's own mirror settings plus the recipe's
``[indexes.NAME]`` tables, whose URLs come from the user's configuration.

Nothing here names a host. The sources, in order:

* uv's own settings (``UV_INDEX_URL``/``UV_DEFAULT_INDEX``, ``UV_EXTRA_INDEX_URL``,
  ``UV_INDEX``, ``UV_FIND_LINKS``, uv.toml): uv reads them itself;
* pip's settings, which uv does not read, translated: ``PIP_INDEX_URL``,
  ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS`` and the ``index-url`` /
  ``find-links`` of pip's configuration files (``python -m pip config list``);
* each recipe index: its URL from the variable it names (``env``), else from
  ``UV_INDEX="NAME=URL"``. An index nobody configured is reported with a hint
  when a package it serves cannot be found.

Locks stay URL-free: these settings decide where files are fetched, the lock's
hashes decide which files are accepted.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from specrig.core.redact import redact_text
from specrig.lock.file import LockedPackage
from specrig.recipe.schema import IndexSpec, Recipe

__all__ = ["Sources", "sources_for", "pip_config", "matches", "index_hint", "missing_hint"]


def matches(name: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether a package name matches any of the names or globs (canonical names)."""
    n = canonicalize_name(name)
    return any(fnmatch.fnmatchcase(n, canonicalize_name(p) if "*" not in p else p.lower()) for p in patterns)


@functools.cache
def pip_config() -> dict[str, str]:
    """pip's configuration-file settings (``global.find-links`` ...), not its env variables."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.startswith(":env:"):
            continue
        out[key.strip()] = value.strip().strip("'\"")
    return out


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split() if v]


def _uv_named_indexes() -> dict[str, str]:
    """``UV_INDEX="name=url other=url"`` (unnamed entries are uv's own business)."""
    out = {}
    for entry in _split(os.environ.get("UV_INDEX")):
        name, sep, url = entry.partition("=")
        if sep and "://" not in name:
            out[name] = url
    return out


@dataclass(frozen=True)
class RecipeIndex:
    name: str
    spec: IndexSpec
    url: str | None
    """The configured URL or folder; None when the user has not set one."""
    origin: str = ""
    """Where ``url`` came from: its variable, ``UV_INDEX``, or the recipe's default."""


@dataclass(frozen=True)
class Sources:
    """Where to fetch files for one environment (besides what uv reads itself)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    recipe_indexes: tuple[RecipeIndex, ...] = ()
    origins: tuple[str, ...] = field(default=())
    """One line per setting used, for the log."""

    @property
    def pinned_indexes(self) -> tuple[RecipeIndex, ...]:
        """Recipe indexes with a URL, of kind ``index`` (resolution pins their packages to them)."""
        return tuple(i for i in self.recipe_indexes if i.url and i.spec.kind == "index")

    @property
    def unconfigured(self) -> tuple[RecipeIndex, ...]:
        return tuple(i for i in self.recipe_indexes if not i.url)

    def _extra(self) -> list[str]:
        return [*self.extra_index_urls, *(i.url for i in self.pinned_indexes if i.url)]

    def _links(self) -> list[str]:
        return [*self.find_links, *(i.url for i in self.recipe_indexes if i.url and i.spec.kind == "find-links")]

    def uv_args(self, *, pin_recipe_indexes: bool = False) -> list[str]:
        """Arguments for ``uv pip compile/sync``. With ``pin_recipe_indexes`` the
        recipe's indexes are left out (the caller pins them per package)."""
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        extra = self.extra_index_urls if pin_recipe_indexes else self._extra()
        for url in extra:
            args += ["--extra-index-url", url]
        for link in self._links():
            args += ["--find-links", link]
        return args

    def groups(self, names: list[str]) -> list[tuple[list[str], list[str], list[str]]]:
        """Split package names by where they come from: ``(names, uv args, pip args)`` per
        configured recipe index (that index only), then the rest (every other source).
        Installing group by group keeps each package's file from its own source, so no
        index that also mirrors other packages can serve them with other hashes."""
        out = []
        left = list(names)
        for i in self.pinned_indexes:
            mine = [n for n in left if matches(n, i.spec.packages)]
            if mine and i.url:
                out.append((mine, ["--index-url", i.url], ["--index-url", i.url]))
                left = [n for n in left if n not in mine]
        out.append((left, self.uv_args(pin_recipe_indexes=True), _drop_recipe_urls(self.pip_args(), self)))
        return out

    def pip_args(self) -> list[str]:
        """Arguments for ``pip download`` (pip reads its own PIP_* and config itself)."""
        args: list[str] = []
        if (url := os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL")) and not os.environ.get(
            "PIP_INDEX_URL"
        ):
            args += ["--index-url", url]
        for url in [*_split(os.environ.get("UV_EXTRA_INDEX_URL")), *(i.url for i in self.pinned_indexes if i.url)]:
            args += ["--extra-index-url", url]
        for link in [
            *_split(os.environ.get("UV_FIND_LINKS")),
            *(i.url for i in self.recipe_indexes if i.url and i.spec.kind == "find-links"),
        ]:
            args += ["--find-links", link]
        return args


def _drop_recipe_urls(args: list[str], sources: Sources) -> list[str]:
    """pip arguments without the recipe's pinned indexes (``--extra-index-url URL`` pairs)."""
    urls = {i.url for i in sources.pinned_indexes}
    out: list[str] = []
    for a in args:
        if a in urls and out and out[-1] == "--extra-index-url":
            out.pop()
            continue
        out.append(a)
    return out


def _env_links(spec_find_links: list[str]) -> list[str]:
    """The env's ``find_links`` variables, expanded; unset ones and missing folders skipped."""
    out = []
    for entry in spec_find_links:
        expanded = os.path.expandvars(entry)
        if expanded and "$" not in expanded and os.path.isdir(expanded):
            out.append(expanded)
    return out


def sources_for(recipe: Recipe, env: str) -> Sources:
    """The sources for one environment of a recipe, from the user's configuration."""
    origins: list[str] = []
    index_url = None
    if not (os.environ.get("UV_INDEX_URL") or os.environ.get("UV_DEFAULT_INDEX")):
        cfg = pip_config()
        for key, value in (
            ("PIP_INDEX_URL", os.environ.get("PIP_INDEX_URL")),
            ("pip config index-url", cfg.get("global.index-url") or cfg.get("install.index-url")),
        ):
            if value:
                index_url = value
                origins.append(f"index {redact_text(value)} (from {key})")
                break
    extra = _split(os.environ.get("PIP_EXTRA_INDEX_URL"))
    origins += [f"extra index {redact_text(u)} (from PIP_EXTRA_INDEX_URL)" for u in extra]
    links: list[str] = []
    cfg = pip_config()
    for key, value in (
        ("PIP_FIND_LINKS", os.environ.get("PIP_FIND_LINKS")),
        ("pip config find-links", cfg.get("global.find-links") or cfg.get("install.find-links")),
    ):
        for link in _split(value):
            if link not in links:
                links.append(link)
                origins.append(f"find-links {link} (from {key})")
    for link in _env_links(recipe.env[env].find_links):
        if link not in links:
            links.append(link)
            origins.append(f"find-links {link} (from env.{env}.find_links)")
    named = _uv_named_indexes()
    wanted = {str(canonicalize_name(Requirement(r).name)) for r in recipe.env[env].requirements}
    rindexes = []
    for name, spec in recipe.indexes.items():
        if not any(matches(w, spec.packages) for w in wanted):
            continue
        url = os.environ.get(spec.env) or named.get(name)
        origin = ""
        if url:
            origin = f"from {spec.env if os.environ.get(spec.env) else 'UV_INDEX'}"
            origins.append(f"index {name} = {redact_text(url)} ({origin})")
        elif spec.default:
            served = _pinned(recipe.env[env].requirements, spec.packages)
            folders = [*links, *_split(os.environ.get("UV_FIND_LINKS"))]
            held = [d for d in folders if served and all(_folder_has(d, n, v) for n, v in served)]
            if held:
                origins.append(
                    f"{', '.join(n for n, _ in served)} from find-links {held[0]} (not [indexes.{name}]'s default)"
                )
            else:
                url = spec.default
                origin = f"the recipe's default: {spec.about or 'upstream'}"
                origins.append(f"index {name} = {url} ({origin})")
        rindexes.append(RecipeIndex(name, spec, url, origin))
    return Sources(index_url, tuple(extra), tuple(links), tuple(rindexes), tuple(origins))


def _pinned(requirements: list[str], patterns: list[str]) -> list[tuple[str, str]]:
    """(name, version) of the ``==``-pinned requirements an index serves."""
    out = []
    for r in requirements:
        req = Requirement(r)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if pins and matches(req.name, patterns):
            out.append((str(canonicalize_name(req.name)), pins[0]))
    return out


def _folder_has(folder: str, name: str, version: str) -> bool:
    """Whether a find-links folder holds a wheel of ``name==version``."""
    if "://" in folder and not folder.startswith("file://"):
        return False  # a remote page: not looked into
    path = folder.removeprefix("file://")
    try:
        files = os.listdir(path)
    except OSError:
        return False
    stem = name.replace("-", "_")
    return any(
        f.endswith(".whl") and canonicalize_name(f.split("-")[0]) == name and f.split("-")[1] == version
        for f in files
        if f.lower().startswith(stem.lower() + "-")
    )


def missing_hint(text: str, sources: Sources, locked: Sequence[LockedPackage] = ()) -> tuple[str, str] | None:
    """When uv could not reach a source, or found no file for a package: (message naming the source or
    the package and what needed it, hint with the ways to give another source); None when the output
    says neither. ``locked``: the lock's packages being installed (their versions and wheel file names
    are then named), empty while locking."""
    return _unreachable(text, sources, locked) or _missing(text, sources, locked)


def _missing(text: str, sources: Sources, locked: Sequence[LockedPackage]) -> tuple[str, str] | None:
    m = re.search(
        r"(?:no version of|not found in the package registry[^:]*:|No matching distribution found for) ?([A-Za-z0-9_.\-]+(?:[=<>!~]=?[^\s,]+)?)",
        text,
    )
    also = re.search(  # uv wraps its lines: any run of whitespace between the words
        r"([A-Za-z0-9_.\-]+)\s+was\s+not\s+found\s+in\s+the\s+package\s+registry(?:\s+and\s+you\s+require\s+([^\s,]+))?",
        text,
    )
    if not m and not also:
        return None
    what = (m.group(1) if m else also.group(2) or also.group(1)).rstrip(".,")  # type: ignore[union-attr]
    name = re.split(r"[=<>!~]", what)[0]
    tried = "; ".join(sources.origins) or "the default index only (no mirror, find-links or recipe index configured)"
    idx = next((i for i in sources.recipe_indexes if matches(name, i.spec.packages)), None)
    mine = [p for p in locked if canonicalize_name(p.name) == canonicalize_name(name)]
    if idx:
        return f"no source has {what}; tried: {tried}", f"give {what} a source, one of: " + _ways(idx, mine or name)
    return (
        f"no source has {what}; tried: {tried}",
        "either point UV_INDEX_URL / PIP_INDEX_URL at an index that serves it (a mirror that has it), or put "
        f"{_files(mine or name)} in a folder named by PIP_FIND_LINKS / UV_FIND_LINKS",
    )


# uv's words for a source it could not reach (a refused or timed-out connection, an unknown host)
_NETWORK = re.compile(
    r"tcp connect error|connection refused|dns error|failed to lookup address|name or service not known"
    r"|timed out|network is unreachable|no route to host|client error \(connect\)|error sending request",
    re.I,
)
_FAILED_URL = re.compile(
    r"(?:Failed to fetch|error sending request for url)[:( ]+`?([a-z][a-z0-9+.-]*://[^\s`)]+)", re.I
)


def _unreachable(text: str, sources: Sources, locked: Sequence[LockedPackage]) -> tuple[str, str] | None:
    """uv could not reach a URL: the source it belongs to, the packages that needed it, the ways to give another."""
    urls = _FAILED_URL.findall(text)
    if not urls or not _NETWORK.search(text):
        return None
    url = urls[0]
    causes = [ln.strip()[len("cause:") :].strip() for ln in text.splitlines() if ln.strip().startswith("cause:")]
    why = causes[-1] if causes else "no answer"
    idx = next(
        (i for i in sources.recipe_indexes if i.url and url.startswith(i.url.rstrip("/"))),
        None,
    )
    if idx is None:
        tried = "; ".join(sources.origins) or "the default index"
        return (
            f"cannot reach {redact_text(url)} ({why})",
            f"check the network, or the setting that names that source (tried: {tried})",
        )
    mine = [p for p in locked if matches(p.name, idx.spec.packages)]
    needs = ", ".join(f"{p.name} {p.version}" for p in mine) or ", ".join(idx.spec.packages)
    return (
        f"cannot reach [indexes.{idx.name}] at {redact_text(idx.url or url)} ({idx.origin or 'configured'}): {why}; "
        f"it is the source of {needs}",
        f"give {needs} another source, one of: " + _ways(idx, mine or ", ".join(idx.spec.packages)),
    )


def _files(packages: list[LockedPackage] | str) -> str:
    """The wheel file names the lock records (``torch-2.13.0+cpu-...whl``), or "the wheel of NAME"."""
    if isinstance(packages, str):
        return f"the wheel of {packages}"
    names = [f for p in packages for f in p.files if f.endswith(".whl")]
    return " / ".join(names) if names else "the wheel of " + ", ".join(p.name for p in packages)


def _ways(idx: RecipeIndex, packages: list[LockedPackage] | str) -> str:
    """The three ways to give a recipe index's packages a source: its variable, UV_INDEX, a find-links folder."""
    about = f": {idx.spec.about}" if idx.spec.about else ""
    return (
        f'{idx.spec.env}=URL (of [indexes.{idx.name}]{about}, or a mirror of it); or UV_INDEX="{idx.name}=URL"; or a folder holding {_files(packages)} '
        "named by PIP_FIND_LINKS / UV_FIND_LINKS (or pip's find-links)"
    )


def index_hint(sources: Sources) -> str:
    """How to configure the recipe's indexes nobody configured (empty if none)."""
    parts = []
    for i in sources.unconfigured:
        what = f" ({i.spec.about})" if i.spec.about else ""
        parts.append(
            f"{', '.join(i.spec.packages)} come from [indexes.{i.name}]{what}: set "
            + _ways(i, ", ".join(i.spec.packages))
        )
    return "; ".join(parts)
