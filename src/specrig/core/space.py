"""Disk space: what a stage will write, checked before it starts, and a full disk met by a
program specrig runs (a converter, a trainer, uv, a compiler) named like one met by specrig.

A stage says what it writes as :class:`Need` s (a folder, the bytes it will put there, its
name for the user, and where else it could go). :func:`check_space` sums the needs that share
a filesystem and refuses, naming every folder, its estimate and what is free, before anything is
written (exit 6, as every disk error). A child that fails on a full disk prints its own words
(Python's ``OSError: [Errno 28] No space left on device``, uv's ``(os error 28)``, a compiler's
``No space left on device``) somewhere in its output: :func:`disk_full_said` finds that line, and
:func:`full_disk_error` turns it into specrig's message, naming the folder and the space it needs,
never the child's traceback. :func:`naming_full_disk` does the same for specrig's own writes (a copy
into a bundle's volume): the folder it was writing, not the file it was reading."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specrig.core.errors import HostError

__all__ = [
    "Need",
    "check_space",
    "disk_full_said",
    "full_disk_error",
    "naming_full_disk",
    "free_bytes",
    "size_text",
]


def size_text(n: float) -> str:
    """Bytes as people read them: ``200 kB``, ``283 MB``, ``12.4 GB`` (powers of 1024)."""
    for unit in ("bytes", "kB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@dataclass(frozen=True)
class Need:
    """``bytes`` that ``what`` will write in ``folder`` (made when it is missing); ``fix``: the way
    out when it does not fit (free space there, or where else it can go: ``SPECRIG_MODELS_DIR=DIR``)."""

    folder: Path
    bytes: int
    what: str
    fix: str = "free some space there"


def _existing(folder: Path) -> Path:
    """The folder, or its nearest part that exists (what a folder not yet made will be on)."""
    found = Path(folder).expanduser().absolute()
    while not found.exists() and found != found.parent:
        found = found.parent
    return found


def free_bytes(folder: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the disk that holds (or will hold) ``folder``."""
    st = os.statvfs(_existing(Path(folder)))
    return st.f_bavail * st.f_frsize


def check_space(needs: Iterable[Need]) -> list[str]:
    """Refuse (HostError, exit 6) before anything is written when the needs sharing a disk add up
    to more than it has free; returns a line per disk for the log (``disk: 283 MB needed of 12.4 GB
    free at /mnt``). Needs of 0 bytes are left out."""
    disks: dict[int, list[Need]] = {}
    for need in needs:
        if need.bytes > 0:
            disks.setdefault(os.stat(_existing(need.folder)).st_dev, []).append(need)
    info, short = [], []
    for group in disks.values():
        total, free = sum(n.bytes for n in group), free_bytes(group[0].folder)
        where = group[0].folder if len(group) == 1 else os.path.commonpath([str(n.folder) for n in group])
        info.append(f"disk: {size_text(total)} needed of {size_text(free)} free at {where}")
        if total > free:
            short.append((group, total, free))
    if not short:
        return info
    lines, fixes = [], []
    for group, total, free in short:
        for n in group:
            lines.append(f"  - {n.what}: about {size_text(n.bytes)} in {n.folder}")
            fixes.append(n.fix)
        together = f" together, {size_text(total)}" if len(group) > 1 else ""
        lines.append(f"    {size_text(free)} free on that disk{together}")
    raise HostError(
        "not enough free disk space for what this command writes:\n" + "\n".join(lines),
        hint="; ".join(dict.fromkeys(fixes)),
    )


# what programs print when a write fails on a full disk (or a full quota): errno 28 / 122
_FULL = re.compile(
    r"no space left on device|disk quota exceeded|\[errno (?:28|122)\]|os error (?:28|122)\b|\benospc\b|\bedquot\b",
    re.IGNORECASE,
)


def disk_full_said(output: str | Iterable[str]) -> str | None:
    """The last line of a program's output that says a disk was full (None: it says no such thing)."""
    lines = output.splitlines() if isinstance(output, str) else list(output)
    return next((ln.strip() for ln in reversed(lines) if _FULL.search(ln)), None)


def full_disk_error(what: str, said: str, needs: Iterable[Need] = ()) -> HostError:
    """specrig's error for ``what`` (a converter, a trainer, an install) that stopped on a full
    disk, having said ``said``: the folders it writes, the space each needs and what is free now."""
    needs = list(needs)
    said = said if len(said) <= 300 else said[:297] + "..."
    if not needs:
        return HostError(
            f"{what} stopped: a disk it writes to is full ({said})", hint="free some space, then run it again"
        )
    where = []
    for n in needs:
        try:
            free = f", {size_text(free_bytes(n.folder))} free there now"
        except OSError:
            free = ""
        size = f": about {size_text(n.bytes)}" if n.bytes > 0 else ""
        where.append(f"{n.folder} ({n.what}{size}{free})")
    return HostError(
        f"{what} stopped: no space left on the disk holding {' and '.join(where)}; it said: {said}",
        hint="; ".join(dict.fromkeys(n.fix for n in needs)) + "; then run it again",
    )


@contextlib.contextmanager
def naming_full_disk(what: str, needs: Iterable[Need] = ()) -> Iterator[None]:
    """Within the block, a write of specrig's own that meets a full disk (ENOSPC, EDQUOT) ends as
    :func:`full_disk_error` naming ``needs``' folders (exit 6): a copy's OSError names the file read
    as well as the one written, and only the folder being filled tells the user where to make room."""
    needs = list(needs)
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise full_disk_error(what, str(exc), needs) from None
