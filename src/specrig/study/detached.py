"""A study that outlives its terminal: ``specrig study run FILE --detach`` starts the same run in a
session of its own (:mod:`specrig.core.detach`); its state is ``detached.json`` in the study
folder, its console output ``study-TIME.console.log`` beside it, each step's progress in
``state.json``. ``status`` prints both, ``follow`` prints each step's start and end until the
study ends, ``stop`` ends it: SIGTERM to the study's process group (the running step's command
gets one SIGTERM from the study and stops its servers), SIGKILL to what is left after the grace
period, the step's own process group included."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from specrig.core import detach
from specrig.core.errors import ConfigError, StudyError
from specrig.study.record import PLAN_FILE, STATE, StudyState

__all__ = ["STATE_FILE", "PLAN_FILE", "find", "start", "reporting", "status", "follow", "stop", "render", "exit_code"]

STATE_FILE = "detached.json"
STOP_GRACE_S = 90.0
"""The study's grace after SIGTERM: longer than a step's own (study.run.STOP_GRACE_S)."""
_WHAT = "study"
_START_HINT = "start one with `specrig study run FILE --detach`"


def find(study: str) -> Path:
    """A study folder given by path, or by name in the studies folder of the user cache."""
    from specrig.study.plan import study_folder

    path = Path(study).expanduser()
    if (path / "study.toml").is_file():
        return path.absolute()
    if "/" not in study and (named := study_folder(study)).joinpath("study.toml").is_file():
        return named
    raise ConfigError(
        f"{study} is no study folder (no study.toml in it) and no study's name",
        hint="give the folder `specrig study run` wrote (--out DIR), or the study's name",
    )


def start(argv: list[str], folder: Path, console: Path) -> dict[str, Any]:
    return detach.start(
        argv,
        path=folder / STATE_FILE,
        console=console,
        what=_WHAT,
        running_hint=f"follow it with `specrig study follow {folder}`, or stop it with `specrig study stop {folder}`",
        error=StudyError,
    )


@contextlib.contextmanager
def reporting(path: Path) -> Iterator[None]:
    """Inside the detached run: running, then done, or failed with the error."""
    me = psutil.Process()
    detach.merge(path, {"status": "running", "pid": me.pid, "pid_created": me.create_time(), "updated": time.time()})
    try:
        yield
    except BaseException as exc:
        error = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        detach.merge(path, {"status": "failed", "ended": time.time(), "error": error})
        raise
    detach.merge(path, {"status": "done", "ended": time.time()})


def _steps(folder: Path) -> tuple[list[dict[str, str]], StudyState | None]:
    try:
        plan = json.loads((folder / PLAN_FILE).read_text())["steps"]
    except (OSError, ValueError, KeyError):
        plan = []
    state = None
    with contextlib.suppress(OSError, ValueError):
        state = StudyState.model_validate_json((folder / STATE).read_bytes())
    return plan, state


def status(folder: Path) -> dict[str, Any]:
    """The detached run's state (a study run in a terminal, or never run detached: from its steps)."""
    _, state = _steps(folder)
    if (folder / STATE_FILE).is_file():
        detached = detach.read(folder / STATE_FILE, what=_WHAT, start_hint=_START_HINT)
        since = (folder / STATE).stat().st_mtime if (folder / STATE).is_file() else 0.0
        if detached.get("status") not in detach.ENDED or since <= float(detached.get("ended") or since):
            return detached  # (a study run in a terminal after the detached one ended: its steps tell)
    steps = state.steps.values() if state else []
    if any(r.status == "running" for r in steps):
        return {"status": "running?", "error": "run in a terminal (not detached): its steps are below"}
    bad = [r for r in steps if r.status != "done"]
    return {"status": "failed" if bad else "done" if steps else "not run"}


def _line(i: int, total: int, name: str, rec: Any) -> str:
    if rec is None:
        return f"  [{i}/{total}] {name}: not run"
    took = ""
    if rec.started and rec.ended:
        took = f" in {rec.ended - rec.started:.0f} s"
    elif rec.started and rec.status == "running":
        took = f", since {time.strftime('%H:%M:%S', time.localtime(rec.started))}"
    return f"  [{i}/{total}] {name}: {rec.status}{took}" + (f" ({rec.note})" if rec.note else "")


def render(folder: Path, state: dict[str, Any]) -> str:
    """The study's state and one line per step."""
    plan, steps = _steps(folder)
    head = f"study {steps.study if steps else folder.name} ({folder}): {state.get('status')}"
    if state.get("pid"):
        head += f" (pid {state['pid']})"
    lines = [head]
    records = steps.steps if steps else {}
    names = [s["name"] for s in plan] or list(records)
    lines += [_line(i, len(names), n, records.get(n)) for i, n in enumerate(names, 1)]
    if state.get("error"):
        lines.append("  error: " + str(state["error"]).replace("\n", "\n    "))
    if state.get("console"):
        lines.append(f"  output: {state['console']}")
    lines.append(f"  each step's output: {folder / 'logs'}/NAME.log")
    return "\n".join(lines)


def exit_code(state: dict[str, Any]) -> int:
    """12 (a study that failed) for one that failed, died or was stopped; 0 while it runs or once done."""
    return StudyError.exit_code if state.get("status") in ("failed", "died", "stopped") else 0


def follow(folder: Path, *, interval: float = 2.0, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Print each step's change until the detached study ends; return its final state."""
    shown: dict[str, str] = {}
    while True:
        state = status(folder)
        plan, steps = _steps(folder)
        records = steps.steps if steps else {}
        for i, s in enumerate(plan, 1):
            rec = records.get(s["name"])
            if rec is not None and shown.get(s["name"]) != f"{rec.status}{rec.started}":
                shown[s["name"]] = f"{rec.status}{rec.started}"
                out(_line(i, len(plan), s["name"], rec))
        if state.get("status") not in ("starting", "running"):
            return state
        time.sleep(interval)


def stop(folder: Path) -> dict[str, Any]:
    """Stop the detached study and every process it started; its steps' state says which did not finish."""
    _, steps = _steps(folder)
    groups = [r.pid for r in (steps.steps.values() if steps else []) if r.status == "running" and r.pid]
    return detach.stop(
        folder / STATE_FILE,
        what=_WHAT,
        start_hint=_START_HINT,
        error=StudyError,
        grace_s=STOP_GRACE_S,
        groups=[g for g in groups if _is_group(g)],
        note="the step that was running runs again on the next `specrig study run`",
    )


def _is_group(pid: int) -> bool:
    import os

    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False
