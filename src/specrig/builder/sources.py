"""The source cache: archives fetched once, checked by sha256, unpacked once.

Layout (pre-fill it on a host with network, copy it to an air-gapped one)::

    <cache>/<name>/<sha256>.tar.gz     # the archive as downloaded
    <cache>/<name>/<sha256>/           # unpacked (the archive's single top folder)

An archive is pinned by the sha256 of its bytes, or by ``tree_sha256``, the digest of what it
unpacks to (:func:`content_digest`; of its ``subdir`` when one is named): then any archive of
the same tree is accepted, e.g. GitHub's download of a commit or ``git archive`` of the same
commit from a repository snapshot (``--import-source``), and the cache keys it by that digest.

Also here: reading ``FetchContent_Declare`` blocks out of CMake files, so the
dependencies a build definition declares can be checked against the
CMakeLists of the source once it is unpacked.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import BuildError, ConfigError, HashMismatchError, LockError
from specrig.lock.resolve import uv_bin

__all__ = [
    "Archive",
    "SourceCache",
    "FetchContentDecl",
    "parse_fetchcontent",
    "scan_fetchcontent",
    "fetchcontent_var",
    "index_url",
    "sdist_url",
    "content_digest",
]


@dataclass(frozen=True, kw_only=True)
class Archive:
    """One source archive: where it comes from and the sha256 it must have."""

    name: str
    url: str | None
    """Download location; None for a package-index sdist (looked up at fetch time)."""
    sha256: str
    filename: str
    distribution: str | None = None
    """For sdists: the distribution name on the package index."""
    tree_sha256: str = ""
    """Pin by content instead of bytes: :func:`content_digest` of the unpacked tree (of ``subdir``)."""
    subdir: str = ""
    tree_paths: tuple[str, ...] = ()
    """With ``tree_sha256``: the paths the pin covers (what the build reads), when not the whole tree."""

    @classmethod
    def from_url(cls, name: str, url: str, **pins: Any) -> Archive:
        """An archive downloaded from ``url`` (its file name is the URL's last part)."""
        return cls(name=name, url=url, filename=url.rsplit("/", 1)[-1], **pins)

    @property
    def key(self) -> str:
        """What the cache files it under: the archive's sha256, else its tree digest."""
        return self.sha256 or self.tree_sha256

    @property
    def digest(self) -> str:
        """The pin as the fingerprint records it."""
        return self.sha256 or (f"tree:{self.tree_sha256}" if self.tree_sha256 else "")


class SourceCache:
    def __init__(self, root: Path, *, offline: bool = False) -> None:
        self.root = Path(root)
        self.offline = offline

    def archive_path(self, a: Archive) -> Path:
        return self.root / a.name / f"{a.key}{_suffix(a.filename)}"

    def unpacked_path(self, a: Archive) -> Path:
        return self.root / a.name / a.key

    def status(self, a: Archive) -> str:
        if self.unpacked_path(a).is_dir():
            return "unpacked"
        if self.archive_path(a).is_file():
            return "archived"
        return "missing"

    def fetch(self, a: Archive) -> Path:
        """The archive in the cache, downloaded if needed; its sha256 is checked every time (a
        tree-pinned one's content when it is unpacked)."""
        if not re.fullmatch(r"[0-9a-f]{64}", a.key or ""):
            raise ConfigError(
                f"source {a.name!r} has no pinned sha256 in its build definition",
                hint="run the session once with network and --pin to print the hash, then record it",
            )
        path = self.archive_path(a)
        if not path.is_file():
            if self.offline:
                raise BuildError(
                    f"source {a.name!r} ({a.filename}) is not in the source cache {self.root} and --offline is set",
                    hint=f"fill the cache on a host with network (`specrig build ... --fetch-only --source-cache DIR`) "
                    f"and copy DIR here; expected file: {path}",
                )
            url = a.url or sdist_url(a.distribution or a.name, a.filename)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not a.sha256:  # tree-pinned: the bytes may differ, the unpacked tree may not
                tmp, _ = _stream(url, path.parent)
                atomic.replace_file(tmp, path)
                return path
            _download(url, path, a.sha256)
        if not a.sha256:
            return path
        got = sha256_file(path)
        if got != a.sha256:
            raise HashMismatchError(
                f"source archive {path} for {a.name!r}:\n  expected sha256 {a.sha256}\n  got      sha256 {got}",
                hint="delete the file and fetch again; if upstream really changed, review and re-pin the build definition",
            )
        return path

    def pin(self, a: Archive) -> str:
        """Download an unpinned archive, keep it under its sha256 and return that hash
        (for recording in the build definition after review; needs network)."""
        if self.offline:
            raise BuildError("--pin needs network, but --offline is set", hint="drop --offline on a host with network")
        d = self.root / a.name
        d.mkdir(parents=True, exist_ok=True)
        tmp, digest = _stream(a.url or sdist_url(a.distribution or a.name, a.filename), d)
        atomic.replace_file(tmp, d / f"{digest}{_suffix(a.filename)}")
        return digest

    def unpack(self, a: Archive) -> Path:
        """The unpacked source folder (the archive's single top folder), made atomically once."""
        dest = self.unpacked_path(a)
        if dest.is_dir():
            return dest
        archive = self.fetch(a)
        tmp = atomic.staging_dir(dest)
        try:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")
            entries = [p for p in tmp.iterdir()]
            top = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp
            if a.tree_sha256:
                got = content_digest(top / a.subdir if a.subdir else top, a.tree_paths)
                if got != a.tree_sha256:
                    archive.unlink(missing_ok=True)
                    raise HashMismatchError(
                        f"source archive for {a.name!r} unpacks to another tree{f' (in {a.subdir})' if a.subdir else ''}:"
                        f"\n  expected tree sha256 {a.tree_sha256}\n  got      tree sha256 {got}",
                        hint="the archive was removed; fetch or import the pinned commit's archive again",
                    )
            atomic.publish_dir(top, dest)  # another process that unpacked it first wins: same bytes
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def import_archive(self, a: Archive, file: Path) -> Path:
        """Put an archive made elsewhere (``git archive`` of the pinned commit from a repository
        snapshot) into the cache, and unpack it, which checks its pin; return the unpacked folder."""
        if not Path(file).is_file():
            raise ConfigError(
                f"--import-source {a.name}={file}: no such file", hint="give an archive (.tar.gz) of the source"
            )
        suffix = _suffix(a.filename)
        if not Path(file).name.endswith(suffix):
            raise ConfigError(
                f"--import-source {a.name}={file}: expected a {suffix} archive",
                hint=f"make it with git archive -o X{suffix}",
            )
        if a.sha256 and sha256_file(Path(file)) != a.sha256:
            raise HashMismatchError(
                f"{file} is not the pinned archive of {a.name!r} (sha256 {sha256_file(Path(file))}, pinned {a.sha256})",
                hint="this source is pinned by the archive's bytes: import the very file it names",
            )
        dest = self.archive_path(a)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.unpacked_path(a), ignore_errors=True)
        with atomic.atomic_path(dest) as tmp:
            shutil.copyfile(file, tmp)
        return self.unpack(a)


def content_digest(
    root: Path, paths: tuple[str, ...] = (), skip: Callable[[tuple[str, ...]], bool] = lambda parts: False
) -> str:
    """sha256 over every entry below ``root`` (below ``paths`` of it, if given; none whose path
    parts ``skip`` says to leave out), in path order: a file's relative path, whether it is
    executable and its content's sha256; a link's path and target. Archive formats and timestamps
    do not enter it, so GitHub's archive of a commit and ``git archive`` of it (or of those paths
    of it) digest the same."""
    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*"), key=lambda q: q.relative_to(root).as_posix()):
        name = p.relative_to(root).as_posix()
        if paths and not any(name == x or name.startswith(x.rstrip("/") + "/") for x in paths):
            continue
        if skip(p.relative_to(root).parts):
            continue
        rel = name.encode()
        if p.is_symlink():
            h.update(b"L\0" + rel + b"\0" + os.readlink(p).encode() + b"\n")
        elif p.is_file():
            x = b"x" if os.stat(p).st_mode & 0o111 else b"-"
            h.update(b"F\0" + rel + b"\0" + x + sha256_file(p).encode() + b"\n")
    return h.hexdigest()


def _suffix(filename: str) -> str:
    for s in (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip"):
        if filename.endswith(s):
            return s
    return Path(filename).suffix


def _stream(url: str, directory: Path) -> tuple[Path, str]:
    """Download ``url`` into a temp file in ``directory``; return it and its sha256.
    The caller renames it into place or deletes it."""
    import httpx

    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=".dl-", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, httpx.stream("GET", url, follow_redirects=True, timeout=60) as r:
            if r.status_code != 200:
                raise BuildError(
                    f"download of {url} failed: HTTP {r.status_code}",
                    hint="check the network, or pre-fill --source-cache on a host that has it",
                )
            for chunk in r.iter_bytes(1 << 20):
                h.update(chunk)
                out.write(chunk)
    except httpx.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            f"download of {url} failed: {exc}",
            hint="check the network, or pre-fill --source-cache on a host that has it",
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, h.hexdigest()


def _download(url: str, dest: Path, sha256: str) -> None:
    """Keep the download at ``dest`` only if its hash is ``sha256``."""
    tmp, got = _stream(url, dest.parent)
    try:
        if got != sha256:
            raise HashMismatchError(
                f"downloaded {url}:\n  expected sha256 {sha256}\n  got      sha256 {got}",
                hint="nothing was kept; if upstream really changed, review and re-pin the build definition",
            )
        atomic.replace_file(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- package index


def index_url() -> str:
    """The package index to fetch sdists from: ``$SPECRIG_INDEX_URL``, else the index uv
    resolves against (the one the locks come from; uv's own settings such as
    ``$UV_DEFAULT_INDEX`` and ``uv.toml`` choose it), read through uv's public CLI."""
    if os.environ.get("SPECRIG_INDEX_URL"):
        return os.environ["SPECRIG_INDEX_URL"]
    try:
        uv = uv_bin()
    except LockError:
        uv = None
    if uv:
        try:
            proc = subprocess.run(
                [uv, "pip", "compile", "-", "--emit-index-url", "--no-header", "--quiet"],
                input="",
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        for line in proc.stdout.splitlines() if proc and proc.returncode == 0 else ():
            if line.startswith("--index-url "):
                return line.split(None, 1)[1].strip()
    raise BuildError(
        "cannot tell which package index to fetch sdists from",
        hint="set SPECRIG_INDEX_URL (a PEP 503 simple index URL), or install uv",
    )


def sdist_url(distribution: str, filename: str) -> str:
    """Look ``filename`` up on the index's JSON simple API (PEP 691)."""
    import httpx

    base = index_url().rstrip("/")
    name = canonicalize_name(distribution)
    try:
        r = httpx.get(
            f"{base}/{name}/",
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
            follow_redirects=True,
            timeout=60,
        )
        r.raise_for_status()
        files = r.json()["files"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise BuildError(
            f"cannot list {distribution} on the package index {base}: {exc}",
            hint="check the network, or pre-fill --source-cache on a host that has it",
        ) from None
    for f in files:
        if f.get("filename") == filename:
            return str(httpx.URL(r.url).join(f["url"]))
    raise BuildError(
        f"{filename} is not on the package index {base}",
        hint="check the version and filename in the build definition",
    )


# --------------------------------------------------------------------------- FetchContent


@dataclass(frozen=True)
class FetchContentDecl:
    """One ``FetchContent_Declare(name ...)`` block, as written."""

    name: str
    git_repository: str | None = None
    git_tag: str | None = None
    url: str | None = None
    url_hash: str | None = None
    file: str = ""

    @property
    def pin(self) -> str | None:
        """The commit (GIT_TAG) or the sha256 (URL_HASH) the CMake file pins."""
        if self.url_hash:
            return self.url_hash.split("=", 1)[-1].lower()
        return self.git_tag


def fetchcontent_var(name: str) -> str:
    """``FETCHCONTENT_SOURCE_DIR_<NAME>``: upper-cased, hyphens kept (as CMake does)."""
    return f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"


_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([^\s()"]+)')


def _strip_comments(text: str) -> str:
    out = []
    for line in text.splitlines():
        # a '#' outside a quoted string starts a comment
        in_q = False
        cut = len(line)
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_q = not in_q
            elif ch == "#" and not in_q:
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def parse_fetchcontent(text: str, *, file: str = "") -> list[FetchContentDecl]:
    """Every ``FetchContent_Declare`` block in a CMake file's text."""
    text = _strip_comments(text)
    decls = []
    for m in re.finditer(r"\bFetchContent_Declare\s*\(", text, flags=re.IGNORECASE):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
            i += 1
        body = text[m.end() : i - 1]
        tokens = [q if q is not None and q != "" else b for q, b in _TOKEN.findall(body)]
        if not tokens:
            continue
        name, args = tokens[0], tokens[1:]
        kv: dict[str, str] = {}
        for j, tok in enumerate(args[:-1]):
            if tok in ("GIT_REPOSITORY", "GIT_TAG", "URL", "URL_HASH") and tok not in kv:
                kv[tok] = args[j + 1]
        decls.append(
            FetchContentDecl(
                name=name,
                git_repository=kv.get("GIT_REPOSITORY"),
                git_tag=kv.get("GIT_TAG"),
                url=kv.get("URL"),
                url_hash=kv.get("URL_HASH"),
                file=file,
            )
        )
    return decls


def scan_fetchcontent(source_dir: Path) -> list[FetchContentDecl]:
    """FetchContent declarations in ``CMakeLists.txt`` and ``cmake/*.cmake`` of a source tree."""
    source_dir = Path(source_dir)
    files = [source_dir / "CMakeLists.txt", *sorted((source_dir / "cmake").glob("*.cmake"))]
    decls: list[FetchContentDecl] = []
    for f in files:
        if f.is_file():
            decls += parse_fetchcontent(f.read_text(errors="replace"), file=str(f.relative_to(source_dir)))
    return decls
