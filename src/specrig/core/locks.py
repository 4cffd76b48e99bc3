"""One lock per shared thing (an environment, a model conversion, a packaged file, a
drafter stage, a bundle, a build), so two specrig processes never make the same thing
at once: the second waits, says whom it waits for, and then finds the first one's result.

The locks are files under the user cache (``<cache>/locks``), held with :mod:`filelock`
(``flock``: the kernel drops a dead holder's lock). Beside each lock the holder writes its
pid and what it is doing, so the waiter can name it. Within one thread a lock is reentrant."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from specrig.core import atomic
from specrig.core.log import log
from specrig.core.paths import subdir

__all__ = ["clear_leftovers", "hold", "lock_path"]

# how long a waiter gives a fresh holder to write its pid before it names it "unknown"
_PID_GRACE_S = 2.0


def lock_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The lock file for a shared thing: a name (``"env-foo"``) or the path of what is made,
    which gets a readable stem and the digest of its absolute path (two folders of one name
    in different places get different locks)."""
    if isinstance(name_or_path, os.PathLike) or "/" in str(name_or_path):
        path = Path(name_or_path).expanduser().absolute()
        stem = f"{path.name}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    else:
        stem = str(name_or_path)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "lock"
    return subdir("locks") / f"{stem[:160]}.lock"


def _holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".holder")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder_pid(lock: Path) -> int | None:
    """The pid the holder wrote beside the lock, if that process is alive."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(_holder_file(lock).read_text().split()[0])
        if _alive(pid):
            return pid
    return None


def _wait(lock: FileLock, path: Path, what: str) -> None:
    """Block until ``lock`` is ours, first saying (once) whom this process waits for. A holder
    that has just taken the lock may not have named itself yet: it gets a short grace."""
    deadline = time.monotonic() + _PID_GRACE_S
    while (pid := _holder_pid(path)) is None and time.monotonic() < deadline:
        try:
            lock.acquire(timeout=0.05)
            return
        except Timeout:
            continue
    log.step(f"waiting for specrig pid {pid if pid is not None else '(unknown)'}, which is {what}")
    lock.acquire()


@contextlib.contextmanager
def hold(name_or_path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Hold the lock of ``name_or_path`` for the block. ``what`` says what the holder is doing
    ("making the environment tiny-cpu", ...): a second process logs
    ``waiting for specrig pid N, which is <what>`` once, then blocks until the lock is free."""
    path = lock_path(name_or_path)
    # one instance per path in this process: a nested hold in the same thread re-enters it, another thread waits
    lock = FileLock(path, is_singleton=True)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        _wait(lock, path, what)
    try:
        if lock.lock_counter == 1:
            atomic.write_text(_holder_file(path), f"{os.getpid()} {what}\n")
        yield
    finally:
        if lock.lock_counter == 1:  # the last hold: nobody is named once it is released
            with contextlib.suppress(OSError):
                _holder_file(path).unlink()
        lock.release()


def clear_leftovers(final: str | os.PathLike[str]) -> None:
    """Remove what killed makers of ``final`` left beside it: their staging folders
    (``.NAME.*.partial``, :func:`specrig.core.atomic.staging_dir`) and swapped-out old
    folders (``.NAME.old-PID``). Call it only while holding ``final``'s lock: then no
    other specrig process is making ``final``, so nothing there is in use."""
    final = Path(final)
    name = glob.escape(final.name)
    for pattern in (f".{name}.*.partial", f".{name}.old-*"):
        for stale in final.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)
