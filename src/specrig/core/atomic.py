"""The one way specrig writes a file or publishes a folder: nothing half-written.

A file is written to a temporary name in the same folder, flushed to disk
(fsync), then renamed over the destination, and the folder's entry is synced:
after a crash, a kill or a full disk the destination holds either the old bytes
or the new ones, never a torn mix. A folder (a venv, a model conversion, a
drafter stage, a bundle) is staged under a temporary name and published with
one rename. Every file specrig writes goes through here; a test holds the tree
to that (tests/test_architecture.py).

Before a run writes anywhere, :func:`check_folder` says whether it can (a folder,
or one that can be made, writable, with some free space), creating nothing; an
OS error met later is named by :func:`os_error` (full disk, read-only
filesystem, no permission, a file where a folder should be), never shown as a
traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specrig.core.errors import ConfigError, HostError, SpecrigError
from specrig.core.space import size_text

__all__ = [
    "write_bytes",
    "write_text",
    "write_json",
    "atomic_path",
    "publish_dir",
    "replace_file",
    "staging_dir",
    "check_folder",
    "os_error",
    "MIN_FREE_BYTES",
]

MIN_FREE_BYTES = 16 * 2**20
"""What a folder about to hold a run's results must have free (logs, summary.json, plots)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened for sync
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path | str, *, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (uv, zipfile);
    renamed over ``path`` when the block ends without an exception, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())  # what open() would give the file, not mkstemp's private 0600
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:  # a write to an open file names no file: name the destination (see os_error)
        if exc.filename is None:
            exc.filename = str(path)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(path: Path | str, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (temp in the same folder, fsync, rename)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
    return path


def write_text(path: Path | str, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_json(path: Path | str, obj: Any, *, indent: int = 2, **dump: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=indent, **dump) + "\n")


def replace_file(src: Path | str, dest: Path | str) -> Path:
    """Move a finished file (same filesystem) over ``dest`` in one rename."""
    dest = Path(dest)
    with open(src, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(src, dest)
    _fsync_dir(dest.parent)
    return dest


def staging_dir(final: Path | str) -> Path:
    """A new, empty folder beside ``final`` to stage it in (unique: two processes never share one)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    os.chmod(staging, 0o777 & ~_umask())  # a published folder reads like one made by mkdir
    return staging


def publish_dir(staging: Path | str, final: Path | str, *, replace: bool = False) -> Path:
    """Publish a fully staged folder as ``final`` with one rename.

    With ``replace``, an existing ``final`` is moved aside first and removed after
    the swap (so a reader sees the old folder or the new one). Without it, an
    existing ``final`` (another process finished first) wins and the staging
    folder is removed: the result is the same content, made once."""
    staging, final = Path(staging), Path(final)
    if final.exists() and not replace:
        shutil.rmtree(staging, ignore_errors=True)
        return final
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(staging, final)
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


_REMEDY = {
    "full": "free some space on that disk",
    "read-only": "that filesystem is mounted read-only: remount it read-write",
    "permission": "give your user write permission there",
}


def _hint(cause: str, fix: str) -> str:
    """The way out of ``cause`` first, then ``fix`` (the caller's alternative: another folder)."""
    return f"{_REMEDY[cause]}, or {fix}" if cause in _REMEDY else fix


def _file_above(path: Path) -> Path | None:
    """The file standing where ``path`` or one of its parents should be a folder (None: no such file)."""
    for part in [path, *path.parents]:
        if part.exists() or part.is_symlink():
            return None if part.is_dir() else part
    return None


def _not_a_folder(what: str, where: Path, fix: str, strerror: str | None = None) -> ConfigError:
    file = _file_above(where)
    if file is not None:
        inside = "" if file == where else f" ({file} is a file)"
        return ConfigError(f"{what}: {where} is not a folder{inside}", hint=f"move {file} away, or {fix}")
    return ConfigError(f"{what}: {where} is not a folder specrig can write in ({strerror})", hint=fix)


def os_error(exc: OSError, path: Path | str | None, what: str, fix: str) -> SpecrigError | None:
    """The specrig error for an OS error specrig can name (None: one it cannot): ``what`` is what
    was being written (e.g. "the results folder"), ``fix`` the alternative the hint ends with
    (e.g. "name another folder: --out DIR"); the hint starts with the way out of the cause named.
    A full disk or a read-only filesystem is the host's (exit 6); a file where a folder should be,
    or no permission, is the path given (exit 2)."""
    where = path if path is not None else (exc.filename or "?")
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return HostError(f"{what}: no space left on the disk holding {where} ({exc.strerror})", hint=_hint("full", fix))
    if code == errno.EROFS:
        return HostError(f"{what}: {where} is on a read-only filesystem", hint=_hint("read-only", fix))
    if code in (errno.EACCES, errno.EPERM):
        return ConfigError(f"{what}: permission denied on {where}", hint=_hint("permission", fix))
    if code == errno.EISDIR:
        return ConfigError(f"{what}: {where} is a folder where specrig writes a file", hint=f"move it away, or {fix}")
    if code in (errno.ENOTDIR, errno.EEXIST):
        return _not_a_folder(what, Path(where), fix, exc.strerror)
    return None


def check_folder(folder: Path | str, *, what: str, fix: str, min_free: int = MIN_FREE_BYTES) -> Path:
    """Check, creating nothing, that ``folder`` is a folder specrig can write in, or one it can
    make: its nearest existing part is a folder, writable, not on a read-only filesystem, with at
    least ``min_free`` bytes free. Returns the folder (absolute); raises the named error, its hint
    the way out of that cause, then ``fix`` (the alternative: another folder)."""
    folder = Path(folder).expanduser().absolute()
    found = folder
    while not found.exists() and not found.is_symlink() and found != found.parent:
        found = found.parent  # (a path below a file does not exist either: found is then the file)
    if not found.is_dir():
        raise _not_a_folder(what, folder, fix)
    try:
        st = os.statvfs(found)
    except OSError as exc:
        raise os_error(exc, found, what, fix) or ConfigError(f"{what}: cannot read {found}: {exc}", hint=fix) from None
    if st.f_flag & os.ST_RDONLY:
        raise HostError(f"{what}: {found} is on a read-only filesystem", hint=_hint("read-only", fix))
    if not os.access(found, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: no permission to write in {found}", hint=_hint("permission", fix))
    free = st.f_bavail * st.f_frsize
    if free < min_free:
        raise HostError(
            f"{what}: only {size_text(free)} free on the disk holding {found} (a run needs at least {size_text(min_free)})",
            hint=_hint("full", fix),
        )
    return folder
