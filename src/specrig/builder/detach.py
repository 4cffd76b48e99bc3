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

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from specrig.builder.progress import BuildStatus, elapsed
from specrig.core import detach as detached
from specrig.core.errors import BuildError
from specrig.core.redact import log_tail

__all__ = ["Reporter", "state_file", "start", "read", "render", "follow", "stop", "ENDED"]

ENDED = detached.ENDED
WRITE_EVERY_S = 2.0


def state_file(log_dir: Path, name: str) -> Path:
    """Where the detached build of ``name`` keeps its state."""
    return Path(log_dir) / f"{name}.detached.json"


_WHAT = "build"
_START_HINT = "start one with `specrig build NAME --detach` (same --log-dir), or give the --log-dir it used"


def read(path: Path) -> dict[str, Any]:
    """The state of the detached build at ``path``, as it stands now (a build whose process is
    gone while its state says it runs is ``died``)."""
    return detached.read(path, what=_WHAT, start_hint=_START_HINT)


def start(argv: list[str], *, path: Path, console: Path) -> dict[str, Any]:
    """Start ``specrig ARGV --state-file PATH`` detached (its own session, no parent to end it,
    output to ``console``); return its first state. Refused while one is already running."""
    return detached.start(
        argv,
        path=path,
        console=console,
        what=_WHAT,
        running_hint="follow it with --follow, or end it with --stop before starting another",
        error=BuildError,
    )


_merge = detached.merge


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
    """End a running detached build: SIGTERM to its process group (the build stops its compiler
    tree and stores nothing), SIGKILL after ``grace_s``; returns the final state (``stopped``).
    A build that already ended is left as it is."""
    return detached.stop(path, what=_WHAT, start_hint=_START_HINT, error=BuildError, grace_s=grace_s)
