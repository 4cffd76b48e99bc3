"""A run's results folder: where it is (checked before anything is prepared or any server
starts: a folder specrig can write in, or can make, with some free space), made only once the
run is accepted, and marked ``INCOMPLETE`` from then until its summary is written. A folder
still marked did not finish (killed, interrupted, failed before any result, or its summary
could not be written): the marker says which, and ``specrig report``, ``--baseline`` and
``--compare`` go by it."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from specrig.core import atomic, interrupts
from specrig.core.errors import ConfigError

__all__ = [
    "INCOMPLETE",
    "results_folder",
    "open_results",
    "mark_incomplete",
    "note_incomplete",
    "mark_complete",
    "incomplete",
]

INCOMPLETE = "INCOMPLETE"
"""The marker file's name in a results folder that did not finish."""

_FIX = "name another folder: --results DIR (or SPECRIG_RESULTS_DIR for the default's parent)"


def results_folder(given: str | None, name: str) -> Path:
    """The results folder: ``given`` (``--results``), else ``name`` in the cache's results folder.
    Checked, not made (:func:`open_results` makes it once the run is accepted)."""
    if given:
        path = Path(given).expanduser()
    else:
        from specrig.core.paths import subdir

        try:
            path = subdir("results") / name
        except OSError as exc:
            raise atomic.os_error(exc, None, "the results folder's parent", _FIX) or ConfigError(
                f"the results folder's parent cannot be made: {exc}", hint=_FIX
            ) from None
    return atomic.check_folder(path, what="the results folder", fix=_FIX).resolve()


def open_results(results: Path) -> None:
    """Make the folder (with ``logs/``) and mark it incomplete until its summary is written; a
    signal that interrupts the run is recorded there first thing (``interrupted (SIGHUP)``),
    before anything is stopped or printed."""
    try:
        (results / "logs").mkdir(parents=True, exist_ok=True)
        mark_incomplete(results, "started, not finished: still running, or killed")
    except OSError as exc:
        raise atomic.os_error(exc, results, "the results folder", _FIX) or ConfigError(
            f"the results folder {results} cannot be made: {exc}", hint=_FIX
        ) from None
    interrupts.on_interrupt(("results", str(results)), lambda name: mark_incomplete(results, f"interrupted ({name})"))


def mark_incomplete(results: Path, why: str) -> None:
    """(Re)write the marker: why this folder holds no finished run."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    atomic.write_text(
        Path(results) / INCOMPLETE,
        f"this run did not finish: {why}\n"
        f"(pid {os.getpid()}, {when}; specrig removes this file only when a run ends with its results written)\n",
    )


def note_incomplete(results: Path, why: str) -> None:
    """:func:`mark_incomplete` where the folder exists and its disk takes it (a full disk may not:
    the folder then keeps the marker written when the run started)."""
    if Path(results).is_dir():
        with contextlib.suppress(OSError):
            mark_incomplete(results, why)


def mark_complete(results: Path) -> None:
    """The summary is written: the folder is a finished run."""
    interrupts.forget(("results", str(results)))
    (Path(results) / INCOMPLETE).unlink(missing_ok=True)


def incomplete(run_dir: Path | str) -> str | None:
    """Why ``run_dir`` did not finish (the marker's first line), or None for a finished run."""
    p = Path(run_dir) / INCOMPLETE
    if not p.exists():
        return None
    try:
        first = p.read_text().splitlines()[:1]
    except OSError:
        first = []
    return (first[0] if first else "this run did not finish").removeprefix("this run did not finish: ")
