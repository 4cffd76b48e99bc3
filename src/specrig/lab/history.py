"""The runs pytest-benchmark stored for later comparison (``--benchmark-autosave``, which
``specrig bench`` always passes) and the one ``--compare latest|NUM`` means.

A stored run is usable when it reads as pytest-benchmark's JSON, holds at least one
benchmark, and its results folder (``specrig_results``, when it names one) is not marked
INCOMPLETE. Every run that measured something is stored, with its verdict
(``specrig_verdict``): one that failed its gates (a threshold, a regression, a failed test)
is kept, but it is no baseline: ``latest`` is the newest usable run that passed (a run stored
before verdicts were recorded counts as passed), and each one passed over is named. ``NUM``
(or a stored file's name or path) reaches any usable run, a failed one too, said so. The
answer is the stored file's path, which pytest-benchmark's ``--benchmark-compare`` takes as
it is."""

from __future__ import annotations

import json
from pathlib import Path

from specrig.core import atomic
from specrig.core.errors import BenchError, ConfigError
from specrig.core.log import log
from specrig.core.paths import subdir
from specrig.lab.folder import incomplete

__all__ = ["storage_folder", "stored_runs", "unusable", "failed", "compared_run"]

_GLOB = "[0-9][0-9][0-9][0-9]_*.json"


def _machine_id() -> str:
    from pytest_benchmark.utils import get_machine_id

    return get_machine_id()


def storage_folder() -> Path:
    """pytest-benchmark's storage in the user cache (every run that measured something is kept
    there for --compare), checked before anything is prepared: a folder specrig can write in, with
    some free space; a cache that is a file, read-only or full is named as such."""
    fix = "point the cache at another folder: SPECRIG_CACHE_DIR=DIR"
    what = "the stored runs' folder (for --compare)"
    try:
        storage = subdir("benchmarks")
    except OSError as exc:
        raise atomic.os_error(exc, None, what, fix) or BenchError(f"{what} cannot be made: {exc}", hint=fix) from None
    return atomic.check_folder(storage, what=what, fix=fix)


def stored_runs(storage: Path) -> list[Path]:
    """This machine's stored runs, oldest first (as pytest-benchmark orders them)."""
    storage = Path(storage)
    files = [*(storage / _machine_id()).glob(_GLOB), *storage.glob(_GLOB)]
    return sorted(files, key=lambda f: (f.name, str(f.parent)))


def unusable(stored: Path) -> str | None:
    """Why ``stored`` cannot be compared with (None: it can)."""
    try:
        data = json.loads(Path(stored).read_text())
    except (OSError, ValueError) as exc:
        return f"unreadable: {exc}"
    if not isinstance(data, dict) or not data.get("benchmarks"):
        return "it measured nothing (0 benchmarks)"
    run_dir = data.get("specrig_results")
    why = incomplete(run_dir) if isinstance(run_dir, str) else None
    if why is not None:
        return f"its results folder {run_dir} is marked INCOMPLETE ({why})"
    return None


def failed(stored: Path) -> str | None:
    """Why ``stored`` is no baseline for ``latest``: the gates its run failed (None: it passed, or it
    was stored before runs recorded their verdict)."""
    try:
        verdict = json.loads(Path(stored).read_text()).get("specrig_verdict")
    except (OSError, ValueError, AttributeError):
        return None  # (unusable says so)
    if not isinstance(verdict, dict) or verdict.get("passed", True):
        return None
    problems = [(p if len(p := str(q)) <= 200 else p[:199] + "…") for q in verdict.get("problems") or []]
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return f"it failed its gates: {'; '.join(problems[:2]) or 'unnamed'}{more}"


def _number(f: Path) -> int:
    return int(f.name.split("_", 1)[0])


def compared_run(storage: Path, which: str | bool) -> Path:
    """The stored run ``--compare which`` means: ``latest`` (or True, pytest-benchmark's bare
    ``--benchmark-compare``), a run number (``3`` or ``0003``), a stored file's path, or a
    prefix of a stored file's name. Raises ConfigError naming what was passed over."""
    where = Path(storage) / _machine_id()
    hint = "every `specrig bench` run that measures something is stored there: run one without --compare first"
    if which is True or which == "latest":
        runs, skipped = stored_runs(storage), []
        for f in reversed(runs):
            why = unusable(f) or failed(f)
            if why is None:
                if skipped:
                    log.warn(f"--compare latest: passed over {'; '.join(skipped[:3])}")
                return f.resolve()
            skipped.append(f"{f.name}: {why}")
        passed = f" (passed over: {'; '.join(skipped[:5])})" if skipped else ""
        if any("failed its gates" in s for s in skipped):
            hint = "a stored run that failed its gates is reached by its number: --compare NUM"
        raise ConfigError(f"--compare latest: no stored run to compare with in {where}{passed}", hint=hint)
    text = str(which)
    if Path(text).is_file():
        found = [Path(text)]
    elif text.isdigit():
        found = [f for f in stored_runs(storage) if _number(f) == int(text)]
    else:
        found = [f for f in stored_runs(storage) if f.name.startswith(text)]
    if not found:
        raise ConfigError(
            f"--compare {text}: no such stored run in {where}", hint="--compare latest, or a stored number"
        )
    why = unusable(found[-1])
    if why is not None:
        raise ConfigError(
            f"--compare {text}: the stored run {found[-1]} cannot be compared with: {why}",
            hint="--compare latest takes the newest one that can",
        )
    why = failed(found[-1])
    if why is not None and not Path(text).is_file():  # (a path: its caller chose it, and said so)
        log.warn(f"--compare {text}: the stored run {found[-1].name} is compared with as asked, though {why}")
    return found[-1].resolve()
