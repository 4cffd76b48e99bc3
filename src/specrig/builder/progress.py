"""Running a build command: the full log on disk, compile progress (n/N and
elapsed) on the terminal, and on failure the first compiler error.

Progress comes from ninja's status lines (``[12/73] Building CUDA object ...``),
which both scikit-build-core and torch's cpp_extension print.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specrig.builder.watchdog import Watchdog, WatchdogReport
from specrig.core.errors import BuildError, SpecrigError
from specrig.core.log import log
from specrig.core.space import Need, disk_full_said, full_disk_error

__all__ = ["run_build_command", "first_error", "elapsed", "BuildStatus", "RunResult", "NINJA_STATUS"]

NINJA_STATUS = re.compile(r"^\s*\[(\d+)/(\d+)\]\s")
# In order of preference: a compiler diagnostic (gcc/nvcc/cudafe/ptxas), a Python
# exception (setup.py, a build backend), then any line that says error.
_ERROR_PATTERNS = [
    re.compile(
        r"(:\d+(:\d+)?:\s*(fatal )?error\b|\(\d+\): error|, line \d+: error|^ptxas\S* (fatal|error)|^nvcc (fatal|error))"
    ),
    re.compile(r"^\s*[A-Za-z_.]*(Error|Exception): "),
    re.compile(r"^\s*(error|ERROR|FAILED)[:\s]"),
]


@dataclass
class BuildStatus:
    """What a running build knows about itself (a detached build's reporter writes it out)."""

    done: int = 0
    total: int = 0
    jobs_cap: int = 0
    gb_per_job_estimate: float = 0.0
    build_log: str = ""
    report: WatchdogReport = field(default_factory=WatchdogReport)


@dataclass(frozen=True)
class RunResult:
    returncode: int
    log_path: Path
    seconds: float
    done: int
    total: int
    watchdog: WatchdogReport


def first_error(lines: list[str], context: int = 3) -> str | None:
    """The first compiler error in a build log (else the first Python exception,
    else the first error line), with a few lines after it."""
    for pattern in _ERROR_PATTERNS:
        for i, line in enumerate(lines):
            if pattern.search(line):
                return "\n".join(x.rstrip() for x in lines[i : i + 1 + context])
    return None


def elapsed(seconds: float) -> str:
    m, s = divmod(int(max(seconds, 0)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def run_build_command(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log_path: Path,
    what: str,
    low_water_gib: float = 0.0,
    high_water_gib: float = 0.0,
    progress_every: float = 10.0,
    on_report: Callable[[WatchdogReport, bool], None] | None = None,
    status: BuildStatus | None = None,
    writes: tuple[Need, ...] = (),
) -> RunResult:
    """Run ``argv`` with the watchdog on; raise :class:`BuildError` on failure or interrupt.
    ``status`` (a detached build's) gets the units compiled and the watchdog's live figures;
    a build that stops on a full disk is named with ``writes`` (HostError, exit 6)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = total = 0
    last_print = 0.0
    with open(log_path, "w", buffering=1) as logf:
        logf.write("+ " + " ".join(argv) + "\n")
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        dog = Watchdog(proc.pid, low_water_gib=low_water_gib, high_water_gib=high_water_gib).start()
        if status is not None:
            status.report, status.build_log = dog.report, str(log_path)
        interrupted: BaseException | None = None
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                logf.write(line)
                m = NINJA_STATUS.match(line)
                if m:
                    done, total = int(m.group(1)), int(m.group(2))
                    if status is not None:
                        status.done, status.total = done, total
                    now = time.monotonic()
                    if now - last_print >= progress_every or done == total:
                        last_print = now
                        log.info(f"{what}: [{done}/{total}] compiled, {elapsed(now - start)} elapsed")
            proc.wait()
        except BaseException as exc:  # KeyboardInterrupt, SIGTERM turned into SystemExit
            interrupted = exc
            _end_tree(proc)
        finally:
            report = dog.stop()
    seconds = time.monotonic() - start
    if report.samples:
        log.info(
            f"{what}: watchdog: peak {report.peak_total_gb:.2f} GiB total, {report.peak_job_gb:.2f} GiB per compile job, "
            f"{report.peak_jobs} jobs at once, {report.paused_events} pauses"
        )
    if on_report is not None:  # (report, whether the build completed)
        on_report(report, interrupted is None and proc.returncode == 0)
    if interrupted is not None:
        raise BuildError(
            f"{what} was interrupted after {elapsed(seconds)}; nothing was stored", hint=f"full log: {log_path}"
        ) from interrupted
    if proc.returncode != 0:
        raise _failure(what, proc.returncode, seconds, log_path, writes)
    return RunResult(proc.returncode, log_path, seconds, done, total, report)


def _failure(what: str, rc: int, seconds: float, log_path: Path, writes: tuple[Need, ...]) -> SpecrigError:
    """The error of a build that failed: a full disk named (exit 6), else its first error (exit 7)."""
    lines = log_path.read_text(errors="replace").splitlines()
    if said := disk_full_said(lines):
        full = full_disk_error(what, said, writes)
        full.hint = f"{full.hint}; full log: {log_path}"
        return full
    err = first_error(lines)
    msg = f"{what} failed (exit {rc}) after {elapsed(seconds)}"
    if err:
        msg += f"; first error:\n{err}"
    else:
        msg += ":\n" + "\n".join(lines[-15:])
    return BuildError(msg, hint=f"full log: {log_path}")


def _end_tree(proc: subprocess.Popen) -> None:
    """End the build and every process it started: SIGTERM to the whole tree (with SIGCONT,
    for jobs the watchdog paused), then SIGKILL to whatever is left after a grace period."""
    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
            p.resume()
    _, alive = psutil.wait_procs(tree, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def install_sigterm_as_exit() -> None:
    """Turn SIGTERM into SystemExit so a killed session cleans up like Ctrl-C does."""

    def _handler(signum, frame):
        raise SystemExit(128 + signum)

    if sys.platform != "win32":
        signal.signal(signal.SIGTERM, _handler)
