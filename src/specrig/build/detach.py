"""A build that outlives its terminal.

A real kernel build runs for tens of minutes; on a remote GPU host that is longer
than one shell command, ssh session or job step lasts. ``specrig build NAME
--detach`` starts the same build in a session of its own (no terminal, no
parent to take it down) and returns. The build writes its state as it goes
(units compiled, the watchdog's figures: jobs at once, peak GiB per job, pauses)
to one JSON file in the build's log folder, atomically, every few seconds, and its
console output beside it. Later commands read that file:

- ``--status`` prints it once (a build whose process is gone while its state still
  says running is reported as died, with its log tail),
- ``--follow`` prints progress until the build ends,
- ``--stop`` ends it cleanly: SIGTERM to its process group (the build stops its
  compiler tree and stores nothing), SIGKILL to whatever is left after a grace
  period, and no process of the group survives.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock

from specrig.build.progress import BuildStatus, elapsed
from specrig.core import atomic
from specrig.core.errors import BuildError, ConfigError
from specrig.core.redact import log_tail

__all__ = ["Reporter", "state_file", "start", "read", "render", "follow", "stop", "ENDED"]

ENDED = ("done", "failed", "stopped", "died")
WRITE_EVERY_S = 2.0


def state_file(log_dir: Path, name: str) -> Path:
    """Where the detached build of ``name`` keeps its state."""
    return Path(log_dir) / f"{name}.detached.json"


def read(path: Path) -> dict[str, Any]:
    """The state of the detached build at ``path``, as it stands now (a build whose process is
    gone while its state says it runs is ``died``)."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"no detached build state at {path}",
            hint="start one with `specrig build NAME --detach` (same --log-dir), or give the --log-dir it used",
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the build state {path}: {exc}", hint="remove it and start the build again"
        ) from None
    if state.get("status") not in ENDED and not _alive(state):
        state["status"] = "died"
        state["error"] = "the build process is gone and wrote no end (killed, or the host restarted)"
    return state


def _alive(state: dict[str, Any]) -> bool:
    if "pid" not in state:  # being started this moment
        return time.time() - float(state.get("started", 0)) < 30
    try:
        p = psutil.Process(int(state.get("pid", 0)))
        return abs(p.create_time() - float(state.get("pid_created", 0))) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False


def start(argv: list[str], *, path: Path, console: Path) -> dict[str, Any]:
    """Start ``specrig ARGV --state-file PATH`` detached (its own session, no parent to end it,
    output to ``console``); return its first state. Refused while one is already running."""
    if path.exists():
        current = read(path)
        if current.get("status") not in ENDED:
            raise ConfigError(
                f"a detached build is already running (pid {current.get('pid')}), state in {path}",
                hint="follow it with --follow, or end it with --stop before starting another",
            )
    console.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    state = {"status": "starting", "argv": argv, "console": str(console), "started": now, "updated": now}
    with FileLock(f"{path}.lock"):  # a new build: the last one's state is replaced, not merged
        atomic.write_json(path, state)
    cmd = [sys.executable, "-m", "specrig", *argv, "--state-file", str(path)]
    rd, wr = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: start the build in a new session, say its pid, exit
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
        raise BuildError("the detached build could not be started", hint=f"see {console}")
    pid = int(said)
    with contextlib.suppress(psutil.Error):  # (a build that ended at once is read as it left its state)
        _merge(path, {"pid": pid, "pid_created": psutil.Process(pid).create_time()})
    return {**state, "pid": pid}


def _merge(path: Path, fields: dict[str, Any]) -> None:
    """Update the state file atomically (keys not given are kept; one writer at a time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = {}
        state.update(fields)
        atomic.write_json(path, state)


class Reporter:
    """Inside the detached build: writes ``status`` to the state file every few seconds,
    and the end (done with the wheel, or failed with the error) once."""

    def __init__(self, path: Path, status: BuildStatus) -> None:
        self.path, self.status = path, status
        self.wheel = ""
        self._me = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specrig-build-state", daemon=True)

    def __enter__(self) -> Reporter:
        self.write()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """The end, written once after the last periodic write: done with the wheel, or failed
        with the error (an interrupt included: a build stopped by --stop stores nothing)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if exc is None:
            self.write(status="done", ended=time.time(), wheel=self.wheel)
        else:
            self.write(status="failed", ended=time.time(), error=str(exc) or type(exc).__name__)

    def _loop(self) -> None:
        while not self._stop.wait(WRITE_EVERY_S):
            self.write()

    def write(self, **extra: Any) -> None:
        s = self.status
        _merge(
            self.path,
            {
                "status": "running",
                "pid": self._me.pid,
                "pid_created": self._me.create_time(),
                "updated": time.time(),
                "done": s.done,
                "total": s.total,
                "jobs_cap": s.jobs_cap,
                "gb_per_job_estimate": s.gb_per_job_estimate,
                "build_log": s.build_log,
                "watchdog": asdict(s.report),
                **extra,
            },
        )


def render(state: dict[str, Any], name: str) -> str:
    """A few readable lines: status, units, the watchdog's figures, where the logs are."""
    now = time.time()
    end = state.get("ended") or (now if state.get("status") not in ENDED else state.get("updated", now))
    lines = [
        f"{name}: {state.get('status')} (pid {state.get('pid')}, started "
        f"{time.strftime('%H:%M:%S', time.localtime(state.get('started', now)))}, {elapsed(end - state.get('started', now))})"
    ]
    if state.get("total"):
        lines.append(f"  units: {state['done']}/{state['total']} compiled")
    dog = state.get("watchdog") or {}
    if dog.get("samples"):
        est = state.get("gb_per_job_estimate") or 0
        lines.append(
            f"  jobs: {dog['peak_jobs']} at once (cap {state.get('jobs_cap')}), peak {dog['peak_job_gb']:.2f} GiB per job "
            f"(estimate {est:.2f}), {dog['peak_total_gb']:.2f} GiB in all, {dog['paused_events']} pauses"
        )
    if state.get("wheel"):
        lines.append(f"  wheel: {state['wheel']}")
    if state.get("error"):
        lines.append("  error: " + str(state["error"]).replace("\n", "\n    "))
    lines.append(f"  log: {state.get('build_log') or state.get('console')}")
    if state.get("status") in ("failed", "died"):
        for key in ("build_log", "console"):  # the compiler's own output first, where there is one
            if state.get(key):
                lines.append(f"  last lines of {state[key]}:")
                lines += [f"    {x}" for x in log_tail(Path(state[key]), 12).splitlines()]
                break
    return "\n".join(lines)


def exit_code(state: dict[str, Any]) -> int:
    """7 (a build that failed) for one that failed, died or was stopped; 0 while it runs or once done."""
    return 7 if state.get("status") in ("failed", "died", "stopped") else 0


def follow(path: Path, name: str, *, interval: float = 5.0, quiet_s: float = 60.0, out=print) -> dict[str, Any]:
    """Print the build's progress (on every change, and at least every ``quiet_s``) until it ends."""
    last, last_at = None, 0.0
    while True:
        state = read(path)
        key = (state.get("status"), state.get("done"), (state.get("watchdog") or {}).get("peak_jobs"))
        if state.get("status") in ENDED:
            out(render(state, name))
            return state
        if key != last or time.monotonic() - last_at >= quiet_s:
            out(
                render(state, name).splitlines()[0]
                + (f", {state['done']}/{state['total']}" if state.get("total") else "")
            )
            last, last_at = key, time.monotonic()
        time.sleep(interval)


def stop(path: Path, *, grace_s: float = 30.0) -> dict[str, Any]:
    """End a running detached build: SIGTERM to its process group, SIGKILL after ``grace_s``;
    returns the final state (``stopped``). A build that already ended is left as it is."""
    state = read(path)
    if state.get("status") in ENDED:
        return state
    pid = int(state["pid"])
    pgid = os.getpgid(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)  # compile jobs the watchdog paused must run to see it
    forced = not _group_gone(pgid, grace_s)
    if forced:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        if not _group_gone(pgid, 5.0):
            raise BuildError(
                f"the build's process group {pgid} survived SIGKILL", hint=f"check `ps -g {pgid}` on this host"
            )
    how = f"SIGKILL after {grace_s:.0f} s" if forced else "SIGTERM"
    _merge(path, {"status": "stopped", "ended": time.time(), "error": f"stopped by --stop ({how}); nothing was stored"})
    return read(path)


def _group_gone(pgid: int, within_s: float) -> bool:
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
