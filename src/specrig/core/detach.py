"""A command that outlives its terminal: started in a session of its own (no terminal, no parent
to take it down), writing its state to one JSON file as it goes (atomically, one writer at a
time), its console output to a file beside it. Later commands read that state (a process gone
while its state says it runs is reported as died) and stop it: SIGTERM to its process group,
SIGKILL to whatever is left after a grace period, no process of the group left.

Shared by ``specrig build --detach`` (:mod:`specrig.builder.detach`) and ``specrig study run
--detach`` (:mod:`specrig.study.detached`); each names what it runs (``what``) and the hints."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock

from specrig.core import atomic
from specrig.core.errors import ConfigError, SpecrigError

__all__ = ["ENDED", "read", "alive", "start", "merge", "stop", "group_gone"]

ENDED = ("done", "failed", "stopped", "died")


def read(path: Path, *, what: str, start_hint: str) -> dict[str, Any]:
    """The state at ``path`` as it stands now (a process gone while its state says it runs: ``died``)."""
    try:
        state = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no detached {what} state at {path}", hint=start_hint) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the {what} state {path}: {exc}", hint=f"remove it and start the {what} again"
        ) from None
    if state.get("status") not in ENDED and not alive(state):
        state["status"] = "died"
        state["error"] = f"the {what} process is gone and wrote no end (killed, or the host restarted)"
    return state


def alive(state: dict[str, Any]) -> bool:
    """Whether the process a state names still runs (the same process: its start time matches)."""
    if "pid" not in state:  # being started this moment
        return time.time() - float(state.get("started", 0)) < 30
    try:
        p = psutil.Process(int(state.get("pid", 0)))
        return abs(p.create_time() - float(state.get("pid_created", 0))) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False


def start(
    argv: list[str], *, path: Path, console: Path, what: str, running_hint: str, error: type[SpecrigError]
) -> dict[str, Any]:
    """Start ``specrig ARGV --state-file PATH`` detached (its own session, no parent to end it,
    output to ``console``); return its first state. Refused while one is already running."""
    if path.exists():
        current = read(path, what=what, start_hint="")
        if current.get("status") not in ENDED:
            raise ConfigError(
                f"a detached {what} is already running (pid {current.get('pid')}), state in {path}", hint=running_hint
            )
    console.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    state = {"status": "starting", "argv": argv, "console": str(console), "started": now, "updated": now}
    with FileLock(f"{path}.lock"):  # a new run: the last one's state is replaced, not merged
        atomic.write_json(path, state)
    cmd = [sys.executable, "-m", "specrig", *argv, "--state-file", str(path)]
    rd, wr = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: start the command in a new session, say its pid, exit
        try:
            os.close(rd)
            with open(console, "ab") as out:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            os.write(wr, str(proc.pid).encode())
        finally:
            os._exit(0)
    os.close(wr)
    with os.fdopen(rd) as f:
        said = f.read()
    os.waitpid(middle, 0)
    if not said:
        raise error(f"the detached {what} could not be started", hint=f"see {console}")
    pid = int(said)
    with contextlib.suppress(psutil.Error):  # (one that ended at once is read as it left its state)
        merge(path, {"pid": pid, "pid_created": psutil.Process(pid).create_time()})
    return {**state, "pid": pid}


def merge(path: Path, fields: dict[str, Any]) -> None:
    """Update the state file atomically (keys not given are kept; one writer at a time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = {}
        state.update(fields)
        atomic.write_json(path, state)


def stop(
    path: Path,
    *,
    what: str,
    start_hint: str,
    error: type[SpecrigError],
    grace_s: float = 30.0,
    groups: Iterable[int] = (),
    note: str = "nothing was stored",
) -> dict[str, Any]:
    """End a running detached command: SIGTERM to its process group, SIGKILL after ``grace_s`` to it
    and to ``groups`` (process groups it started apart); returns the final state (``stopped``).
    One that already ended is left as it is."""
    state = read(path, what=what, start_hint=start_hint)
    if state.get("status") in ENDED:
        return state
    pgid = os.getpgid(int(state["pid"]))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)  # paused processes must run to see it
    forced = not group_gone(pgid, grace_s)
    every = [pgid, *groups]
    if forced:
        for g in every:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g, signal.SIGKILL)
    left = [g for g in every if not group_gone(g, 5.0 if forced else grace_s)]
    for g in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(g, signal.SIGKILL)
    if any(not group_gone(g, 5.0) for g in left):
        raise error(f"the {what}'s process group survived SIGKILL", hint=f"check `ps -g {pgid}` on this host")
    how = f"SIGKILL after {grace_s:.0f} s" if forced else "SIGTERM"
    merge(path, {"status": "stopped", "ended": time.time(), "error": f"stopped by --stop ({how}); {note}"})
    return read(path, what=what, start_hint=start_hint)


def group_gone(pgid: int, within_s: float) -> bool:
    """Wait up to ``within_s`` for the process group to have no live (not zombie) process left."""
    deadline = time.monotonic() + within_s
    while any(_in_group(p, pgid) for p in psutil.process_iter(["pid", "status"])):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _in_group(p: psutil.Process, pgid: int) -> bool:
    try:
        return p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.info["pid"]) == pgid
    except (psutil.Error, OSError):
        return False
