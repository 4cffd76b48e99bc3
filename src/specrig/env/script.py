"""Run a standalone script (a room's ``inenv/`` file) with an engine environment's Python,
any room's: the interpreter is named by its path, so a room that knows only the bench's
plan (``plan.python``) runs one as well as one that holds an :class:`~specrig.env.make.Env`.
Hugging Face stays offline; ``progress DONE TOTAL [NOTE]`` lines drive a rich progress bar;
a failure raises :class:`~specrig.core.errors.EnvError` with the tail of the output and
the command to rerun by hand, and a failure on a full disk specrig's own message (exit 6: the
folders the script writes and the space they need, :mod:`specrig.core.space`), never the
script's traceback: from a ``Traceback`` line on, its output is held back from the console.
:func:`run_uv` runs uv for an environment the same way: its unreachable sources, hash mismatches
and a full disk named."""

from __future__ import annotations

import os
import subprocess
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from specrig.core.errors import EnvError, HashMismatchError
from specrig.core.log import log
from specrig.core.space import Need, disk_full_said, full_disk_error
from specrig.lock.file import LockedPackage
from specrig.lock.indexes import Sources, missing_hint
from specrig.lock.resolve import uv_bin

__all__ = ["run_script", "run_uv"]


def run_script(
    python: Path | str,
    script: Path | str,
    *args: str,
    what: str,
    threads: int | None = None,
    writes: Iterable[Need] = (),
) -> list[str]:
    """Run ``python script args...``; returns its output lines that are not progress (each logged too,
    up to a traceback). ``writes``: the folders it writes and how much, named if a disk fills."""
    cmd = [str(python), str(script), *args]
    environ = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' weight-loading bars: noise in a log
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    }
    if threads:
        environ |= {"OMP_NUM_THREADS": str(threads)}
    tail: deque[str] = deque(maxlen=40)
    lines: list[str] = []
    held: list[str] = []  # from a traceback on: said only if the script still succeeds
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
    except OSError as exc:
        raise EnvError(f"{what}: cannot run {python} ({exc.strerror or exc})", hint="check the environment") from None
    assert proc.stdout is not None
    with log.progress() as bar:
        task = bar.add_task(what, total=None, note="")
        try:
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                if line.startswith("progress "):
                    parts = line.split()
                    bar.update(task, completed=int(parts[1]), total=int(parts[2]), note=" ".join(parts[3:]))
                elif line:
                    lines.append(line)
                    if held or line.startswith("Traceback (most recent call last)"):
                        held.append(line)
                    else:
                        log.info(line)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        text = "\n".join(x for x in tail if not x.startswith("progress "))
        if said := disk_full_said(text):
            raise full_disk_error(what, said, writes)
        raise EnvError(f"{what} failed (exit {rc}):\n{text}", hint=f"rerun by hand: {' '.join(cmd)}")
    for line in held:
        log.info(line)
    return lines


def run_uv(
    args: list[str],
    *,
    what: str,
    sources: Sources | None = None,
    locked: tuple[LockedPackage, ...] = (),
    writes: tuple[Need, ...] = (),
) -> None:
    """Run uv showing its progress; on failure raise with the tail of its output. With ``sources``, a
    source uv could not reach or a package no source has is named, with the locked packages (``locked``)
    that needed it and the ways to give another source. A full disk is named with ``writes`` (exit 6)."""
    cmd = [uv_bin(), *args]
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        tail.append(line.rstrip())
        log.info(line.rstrip())
    rc = proc.wait()
    if rc != 0:
        text = "\n".join(tail)
        if said := disk_full_said(text):
            raise full_disk_error(what, said, writes)
        lowered = text.lower()
        if "hash mismatch" in lowered or ("hashes" in lowered and "match" in lowered):
            raise HashMismatchError(
                f"{what}: a downloaded file's sha256 is not the one the lock records; nothing was installed from it:\n{text}",
                hint="if the lock was edited, restore it from git; if a mirror serves different bytes, fix the mirror; "
                "if the release changed upstream, re-lock with `nox -s lock`",
            )
        missing = missing_hint(text, sources, locked) if sources is not None else None
        if missing:
            raise EnvError(f"{what}: {missing[0]}", hint=missing[1])
        raise EnvError(f"{what} failed (uv exit {rc}):\n{text}", hint="see the uv output above")
