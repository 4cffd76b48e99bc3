"""The one way specrig writes a file or publishes a folder: nothing half-written.

A file is written to a temporary name in the same folder, flushed to disk
(fsync), then renamed over the destination, and the folder's entry is synced:
after a crash, a kill or a full disk the destination holds either the old bytes
or the new ones, never a torn mix. A folder (a venv, a model conversion, a
drafter stage, a bundle) is staged under a temporary name and published with
one rename. Every file specrig writes goes through here; a test holds the tree
to that (tests/test_architecture.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["write_bytes", "write_text", "write_json", "atomic_path", "publish_dir", "replace_file", "staging_dir"]


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
