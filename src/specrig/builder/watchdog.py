"""The memory watchdog: samples a running build's process tree.

Every ``interval`` seconds it reads the RSS of every process under the build,
groups it by compile job (an ``nvcc`` process with its ``cicc``/``ptxas``/``gcc``
children, or a host compiler not under an nvcc) and keeps:

- the peak RSS of the whole build,
- the peak RSS of any single compile job (the measured GiB per job recorded for
  the next plan; each process's own high-water mark, VmHWM, catches peaks
  between samples),
- the peak number of compile jobs running at once (proves the cap reached ninja),
- per compiled unit (the source file on the job's command line): its wall time, from the job's
  start to the last sample that saw it, and its own peak.

It also guards memory: when available memory falls below the low-water mark
it pauses (SIGSTOP) the youngest compile jobs, always leaving one running, and
resumes them (SIGCONT) once memory is back above the high-water mark. So the
build never has more work in flight than memory allows, even if the per-job
estimate was too low.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import PurePath

import psutil

__all__ = ["Watchdog", "WatchdogReport", "JOB_ROOTS"]

JOB_ROOTS = frozenset({"nvcc"})
HOST_COMPILERS = frozenset({"cc1plus", "cc1"})
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
GiB = 2**30


@dataclass
class WatchdogReport:
    peak_total_gb: float = 0.0
    peak_job_gb: float = 0.0
    peak_jobs: int = 0
    samples: int = 0
    paused_events: int = 0
    job_commands: int = 0
    """Distinct compile jobs seen."""
    units: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per compiled source file: ``{"seconds": wall time, "peak_gb": its job's peak}``."""


@dataclass
class Watchdog:
    root_pid: int
    interval: float = 0.2
    low_water_gib: float = 0.0
    """Pause the youngest jobs when available memory drops below this (0: never)."""
    high_water_gib: float = 0.0
    report: WatchdogReport = field(default_factory=WatchdogReport)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specrig-watchdog", daemon=True)
        self._paused: list[psutil.Process] = []
        self._seen: set[tuple[int, float]] = set()
        self._unit: dict[tuple[int, float], str] = {}

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> WatchdogReport:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._resume_all()
        return self.report

    # ------------------------------------------------------------------ sampling

    def _jobs(self) -> tuple[float, dict[psutil.Process, float]]:
        """Total RSS of the build, and per compile job the larger of its summed RSS now and
        the peak RSS (VmHWM) of its largest process, which catches peaks between samples."""
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0, {}
        rss: dict[int, float] = {}
        hwm: dict[int, float] = {}
        parent: dict[int, int] = {}
        name: dict[int, str] = {}
        byp: dict[int, psutil.Process] = {}
        for p in procs:
            try:
                with p.oneshot():
                    rss[p.pid] = p.memory_info().rss / GiB
                    parent[p.pid] = p.ppid()
                    name[p.pid] = p.name()
                hwm[p.pid] = _peak_rss_gib(p.pid)
                byp[p.pid] = p
            except psutil.Error:
                continue
        total = sum(rss.values())

        def job_of(pid: int) -> int | None:
            top = None
            cur: int | None = pid
            while cur in name:
                if name[cur] in JOB_ROOTS:
                    top = cur
                cur = parent.get(cur)
            if top is None and name.get(pid) in HOST_COMPILERS:
                top = pid
            return top

        jobs: dict[int, float] = {}
        largest: dict[int, float] = {}
        for pid, r in rss.items():
            j = job_of(pid)
            if j is not None:
                jobs[j] = jobs.get(j, 0.0) + r
                largest[j] = max(largest.get(j, 0.0), hwm.get(pid, 0.0))
        return total, {byp[j]: max(gb, largest.get(j, 0.0)) for j, gb in jobs.items() if j in byp}

    def sample(self) -> None:
        total, jobs = self._jobs()
        rep = self.report
        rep.samples += 1
        rep.peak_total_gb = max(rep.peak_total_gb, total)
        running = [p for p in jobs if p not in self._paused]
        rep.peak_jobs = max(rep.peak_jobs, len(running))
        if jobs:
            rep.peak_job_gb = max(rep.peak_job_gb, max(jobs.values()))
        now = time.time()
        for p, gb in jobs.items():
            with contextlib.suppress(psutil.Error):
                key = (p.pid, p.create_time())
                if key not in self._seen:
                    self._unit[key] = _unit_name(p, rep.units)
                self._seen.add(key)
                unit = rep.units.setdefault(self._unit[key], {"seconds": 0.0, "peak_gb": 0.0})
                unit["seconds"] = round(max(unit["seconds"], now - key[1]), 1)
                unit["peak_gb"] = round(max(unit["peak_gb"], gb), 3)
        rep.job_commands = len(self._seen)
        if self.low_water_gib > 0:
            self._guard(running)

    def _guard(self, running: list[psutil.Process]) -> None:
        avail = psutil.virtual_memory().available / GiB
        self._paused = [p for p in self._paused if p.is_running()]
        if avail < self.low_water_gib and len(running) > 1:
            youngest = max(running, key=lambda p: _ctime(p))
            _signal_tree(youngest, signal.SIGSTOP)
            self._paused.append(youngest)
            self.report.paused_events += 1
        elif avail > self.high_water_gib and self._paused:
            _signal_tree(self._paused.pop(0), signal.SIGCONT)

    def _resume_all(self) -> None:
        for p in self._paused:
            _signal_tree(p, signal.SIGCONT)
        self._paused.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def _unit_name(p: psutil.Process, known: dict[str, dict[str, float]]) -> str:
    """The source file a compile job compiles (the last such argument), made unique among ``known``."""
    try:
        args = p.cmdline()
    except psutil.Error:
        args = []
    # a path with a name (gcc's own cc1plus also gets `-dumpbase-ext .cc`, which is not one)
    files = [a for a in args if a.endswith(SOURCE_SUFFIXES) and not a.startswith(("-", "."))]
    name = PurePath(files[-1]).name if files else f"pid {p.pid}"
    n, unique = 2, name
    while unique in known:
        unique, n = f"{name} #{n}", n + 1
    return unique


def _peak_rss_gib(pid: int) -> float:
    """A process's peak resident set (VmHWM) so far, from /proc (0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / GiB
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _ctime(p: psutil.Process) -> float:
    try:
        return p.create_time()
    except psutil.Error:
        return 0.0


def _signal_tree(p: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        for q in [p, *p.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                q.send_signal(sig)
