"""Fetching the files a lock installs into a folder, hash-checked, for bundles and kits: ``pip download
--no-deps --require-hashes`` for the recipe's platform and Python (pip is pinned with specrig; uv has no
download command), from the same sources as ``lock``, one run per source.

Before anything is fetched, :func:`sizes` says how much a download brings: a lock records names,
versions and sha256, not sizes, so the sizes are those the index reports (``uv pip compile``
reads them; a find-links folder's files are measured), a file already in the folder counts as it
is, and a file whose size nothing reports is counted at :data:`UNKNOWN_FILE`: an estimate, said
as one. pip keeps every file it fetched in its temporary folder until it ends, and copies them into
the folder after: both are in :func:`download_needs`. A full disk during the download ends as
specrig's message naming those folders (exit 6), and the file pip was copying when the disk
filled (cut short) is removed."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import EnvError, HashMismatchError
from specrig.core.log import log
from specrig.core.space import Need, disk_full_said, free_bytes, full_disk_error, naming_full_disk, size_text
from specrig.lock.file import Lock, LockedPackage
from specrig.lock.indexes import index_hint, sources_for
from specrig.lock.resolve import uv_bin
from specrig.recipe.schema import Recipe

__all__ = [
    "CACHE_FIX",
    "UNKNOWN_FILE",
    "Sizes",
    "combined",
    "download",
    "download_needs",
    "on_disk",
    "pip_target",
    "sizes",
]

UNKNOWN_FILE = 64 * 2**20
"""What a file is counted at when no index reports its size (an estimate, on the large side)."""
CACHE_FIX = "free some space there, or point the cache at another folder: SPECRIG_CACHE_DIR=DIR"
TMP_FIX = "free some space there, or give pip another temporary folder: TMPDIR=DIR"
_BLOCK = 4096


def on_disk(n: int) -> int:
    """``n`` bytes as a file takes them on disk (whole blocks)."""
    return -(-n // _BLOCK) * _BLOCK


@dataclass(frozen=True)
class Sizes:
    """What downloading a lock's files into a folder brings: ``files`` (the file each installed package
    brings, by name: its bytes), ``fetch`` (the bytes of the ``fetched`` files not in the folder yet, in
    whole blocks) and ``guessed`` (how many of those no source reported a size for: counted at UNKNOWN_FILE)."""

    files: dict[str, int]
    fetch: int
    fetched: int
    guessed: int

    @property
    def estimate(self) -> str:
        """How the figure was come by, for the user (``the bundle, estimated from ...``)."""
        if self.guessed:
            return f"estimated, counting {self.guessed} file(s) of unknown size at {size_text(UNKNOWN_FILE)} each"
        return "estimated from the sizes the index reports" if self.fetched else "estimated from the files downloaded"


def pip_target(recipe: Recipe) -> list[str]:
    """pip download's target for the recipe's platform (``x86_64-manylinux_2_36`` -> ``manylinux_2_36_x86_64``)."""
    arch, _, plat = recipe.host.platform.partition("-")
    py = recipe.host.python.replace(".", "")
    args = ["--python-version", recipe.host.python, "--implementation", "cp"]
    args += ["--abi", f"cp{py}", "--abi", "abi3", "--abi", "none"]
    if not plat:
        return args
    # pip matches platform tags exactly: a manylinux_2_39 host also runs every older
    # manylinux tag (and the legacy aliases), so name them all.
    tags = [plat]
    if m := re.fullmatch(r"manylinux_2_(\d+)", plat):
        tags = [f"manylinux_2_{n}" for n in range(int(m.group(1)), 4, -1)]
        tags += ["manylinux2014"] * (int(m.group(1)) >= 17) + ["manylinux2010"] * (int(m.group(1)) >= 12)
        tags += ["manylinux1"]
    return args + [a for t in [*tags, "linux"] for a in ("--platform", f"{t}_{arch}")]


def sizes(recipe: Recipe, lock: Lock, dest: Path) -> Sizes:
    """What downloading ``lock``'s files into ``dest`` brings (:class:`Sizes`), before anything is fetched."""
    present = {p.name: p.stat().st_size for p in dest.iterdir() if p.is_file()} if dest.is_dir() else {}
    missing = [p for p in lock.installed_packages if not any(f in present for f in p.files)]
    reported = _index_sizes(recipe, lock.env, missing) if missing else {}
    files: dict[str, int] = {}
    fetch = guessed = 0
    for p in lock.installed_packages:
        have = next((f for f in p.files if f in present), None)
        if have is not None:
            files[have] = present[have]
            continue
        shas = [h.removeprefix("sha256:") for h in p.hashes]
        named = dict(zip(shas, p.files, strict=False))  # a model package's pin has a hash, no file name
        known = [(reported[sha], named.get(sha, f"{p.name}-{p.version}")) for sha in shas if sha in reported]
        size, name = max(known) if known else (UNKNOWN_FILE, p.files[0] if p.files else f"{p.name}-{p.version}")
        guessed += not known
        files[name] = size
        fetch += on_disk(size)
    return Sizes(files, fetch, len(missing), guessed)


def _index_sizes(recipe: Recipe, env: str, packages: list[LockedPackage]) -> dict[str, int]:
    """sha256 -> bytes of the files the sources list for ``packages`` (``uv pip compile --no-deps`` of
    their pins reads the sizes an index reports; a file in a find-links folder is measured). A file no
    source sizes is left out, and so is every file of a source uv cannot ask (or of every source, when
    the temporary folder has no room for uv's answer: the check then names that folder)."""
    out: dict[str, int] = {}
    sources = sources_for(recipe, env)
    try:
        with tempfile.TemporaryDirectory(prefix="specrig-sizes-") as tmp:
            for n, (names, uv_args, _) in enumerate(sources.groups([p.name for p in packages])):
                if names:
                    pins = "".join(f"{p.name}=={p.version}\n" for p in packages if p.name in names)
                    out |= _compile_sizes(recipe, atomic.write_text(Path(tmp) / f"req-{n}.txt", pins), uv_args)
    except OSError as exc:
        log.info(f"the sizes of {len(packages)} files are unknown ({exc})")
    return out


def _compile_sizes(recipe: Recipe, req: Path, uv_args: list[str]) -> dict[str, int]:
    """sha256 -> bytes of the files ``uv pip compile --no-deps`` lists for the pins in ``req``."""
    pylock = req.with_name(f"pylock.{req.stem}.toml")
    cmd = [uv_bin(), "pip", "compile", str(req), "--no-deps", "--python-version", recipe.host.python]
    cmd += ["--python-platform", recipe.host.platform, "--format", "pylock.toml", "-o", str(pylock)]
    cmd += ["--no-header", "--quiet", *uv_args]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=os.environ | {"UV_NO_PROGRESS": "1"}, timeout=300
        )
        failed = f"exit {proc.returncode}" if proc.returncode != 0 or not pylock.is_file() else ""
    except subprocess.TimeoutExpired:
        failed = "no answer in 300 s"
    if failed:
        log.info(f"the sizes of the files the index lists are unknown (uv pip compile: {failed}): estimated")
        return {}
    out: dict[str, int] = {}
    for entry in tomllib.loads(pylock.read_text()).get("packages", []):
        for f in [*entry.get("wheels", []), *([entry["sdist"]] if "sdist" in entry else [])]:
            if (sha := f.get("hashes", {}).get("sha256")) and (size := f.get("size") or _local_size(f)):
                out[sha] = int(size)
    return out


def _local_size(entry: dict) -> int | None:
    """The size of a pylock file entry that is a local file (a find-links folder's), measured."""
    where = str(entry.get("path") or entry.get("url") or "")
    if where.startswith("file://"):
        where = where.removeprefix("file://")
    elif "://" in where:
        return None
    try:
        return os.stat(where).st_size if where else None
    except OSError:
        return None


def combined(fetched: list[Sizes]) -> Sizes:
    """Several downloads' :class:`Sizes` as one."""
    files = {name: n for s in fetched for name, n in s.files.items()}
    return Sizes(files, sum(s.fetch for s in fetched), sum(s.fetched for s in fetched), sum(s.guessed for s in fetched))


def download_needs(fetched: list[tuple[Path, Sizes]], what: str) -> list[Need]:
    """What the downloads of ``fetched`` (each a folder and what it gets) write: the files into their
    folders, and pip's temporary copies (TMPDIR holds each run's files until that pip ends, so the
    largest run counts there)."""
    how = combined([s for _, s in fetched]).estimate
    needs = [Need(dest, s.fetch, f"{what}, {how}", CACHE_FIX) for dest, s in fetched]
    tmp = max((s.fetch for _, s in fetched), default=0)
    return [*needs, Need(Path(tempfile.gettempdir()), tmp, "pip's temporary copies of the downloads", TMP_FIX)]


def download(recipe: Recipe, lock: Lock, dest: Path, *, writes: tuple[Need, ...] = ()) -> None:
    """Fetch every file ``lock`` installs into ``dest`` (one pip run per source). ``writes``: the folders
    this fills and how much (:func:`download_needs`), named if a disk fills (exit 6); what pip left cut
    short in ``dest`` is removed then, and on any other failure."""
    sources = sources_for(recipe, lock.env)
    log.step(f"downloading {len(lock.installed_packages)} files of {lock.path.name} (pip download, hash-checked)")
    what = f"downloading the files of {lock.path.name}"
    # a recipe index serves only its own packages: one download per source
    for n, (names, _, pip_args) in enumerate(sources.groups([p.name for p in lock.installed_packages]), 1):
        if not names:
            continue
        lines = "".join(p.requirement_line() + "\n" for p in lock.installed_packages if p.name in names)
        with naming_full_disk(what, writes):
            req = atomic.write_text(dest / f"specrig-bundle-requirements-{n}.txt", lines)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--progress-bar", "off"]
        cmd += ["-d", str(dest), "-r", str(req), *pip_target(recipe), *pip_args]
        before = _listing(dest)
        try:
            rc, text = _run_pip(cmd)
        finally:
            req.unlink(missing_ok=True)
        if rc == 0:
            continue
        _remove_cut_short(dest, before, lock)
        if said := disk_full_said(text):
            raise full_disk_error(what, said, _short(writes))
        if "hash" in text.lower() and "match" in text.lower():
            raise HashMismatchError(f"a downloaded file does not have the sha256 the lock records:\n{text}")
        raise EnvError(
            f"pip download failed (exit {rc}):\n{text}",
            hint=index_hint(sources) or "check your index settings (PIP_INDEX_URL, UV_INDEX_URL, PIP_FIND_LINKS)",
        )


def _short(writes: tuple[Need, ...]) -> list[Need]:
    """Of the folders a download fills, those whose disk now has less free than they need (the one
    that filled, not the temporary folder with room to spare); all of them when none is."""
    short = []
    for need in writes:
        with contextlib.suppress(OSError):
            if free_bytes(need.folder) < max(need.bytes, 1):
                short.append(need)
    return short or list(writes)


def _run_pip(cmd: list[str]) -> tuple[int, str]:
    """Run pip, logging what it saves; (its exit code, the tail of its output)."""
    tail: deque[str] = deque(maxlen=30)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail.append(line.rstrip())
            if line.startswith(("Saved", "Collecting", "File was already")):
                log.info(line.rstrip())
        return proc.wait(), "\n".join(tail)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Each file in ``folder``: (size, mtime in ns)."""
    out = {}
    for p in folder.iterdir():
        st = p.stat()
        if p.is_file():
            out[p.name] = (st.st_size, st.st_mtime_ns)
    return out


def _remove_cut_short(dest: Path, before: dict[str, tuple[int, int]], lock: Lock) -> None:
    """After a failed pip run: remove each file it wrote into ``dest`` (new or changed) that has none of
    the sha256 the lock records (the copy a full disk cut short; pip saves a file only once verified)."""
    want = {h.removeprefix("sha256:") for p in lock.installed_packages for h in p.hashes}
    for name, stat in _listing(dest).items():
        if before.get(name) != stat and sha256_file(dest / name) not in want:
            (dest / name).unlink(missing_ok=True)
            log.info(f"removed {dest / name}: cut short when the download stopped")
