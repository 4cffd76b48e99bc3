"""The watchdog on real processes: it sees compile jobs, and when memory runs
low it pauses the youngest ones (never the last) and resumes them later."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from specrig.builder.watchdog import Watchdog


def fake_compilers(tmp_path, n: int) -> subprocess.Popen:
    """A build whose jobs are processes named ``nvcc`` (a sleeping Python under that name), each
    naming its source file last on its command line, as a compiler's does."""
    nvcc = tmp_path / "nvcc"
    nvcc.symlink_to(os.path.realpath(sys.executable))
    job = "-c 'import time; time.sleep(30)' -dumpbase-ext .cu"  # a bare suffix is not a source file
    script = " ".join(f"{nvcc} {job} kernels/unit{i}.cu & sleep 0.2;" for i in range(n)) + " wait"
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def jobs_of(proc: subprocess.Popen) -> list[psutil.Process]:
    return [p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "nvcc"]


def wait_for_jobs(proc: subprocess.Popen, n: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        jobs = jobs_of(proc)
        if len(jobs) == n:
            return jobs
        time.sleep(0.05)
    raise AssertionError(f"expected {n} jobs, saw {len(jobs_of(proc))}")


def settled_states(jobs: list[psutil.Process], stopped: int, within: float = 5.0) -> dict[int, str]:
    """The jobs' states once ``stopped`` of them read stopped, or as they are after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        states = {p.pid: p.status() for p in jobs}
        if list(states.values()).count(psutil.STATUS_STOPPED) >= stopped or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


def test_counts_jobs_and_measures_them(tmp_path):
    proc = fake_compilers(tmp_path, 3)
    try:
        wait_for_jobs(proc, 3)
        dog = Watchdog(proc.pid)
        dog.sample()
        assert dog.report.peak_jobs == 3
        assert dog.report.job_commands == 3
        assert 0 < dog.report.peak_job_gb < 0.1  # a sleeping process is small
        assert dog.report.peak_total_gb >= dog.report.peak_job_gb
        # per unit: its source file, how long its job has run so far, its peak
        assert sorted(dog.report.units) == ["unit0.cu", "unit1.cu", "unit2.cu"]
        time.sleep(0.5)
        dog.sample()
        units = dog.report.units
        assert units["unit0.cu"]["seconds"] >= units["unit2.cu"]["seconds"] + 0.2  # started 0.4 s earlier
        assert units["unit2.cu"]["seconds"] >= 0.5
        assert all(0 < u["peak_gb"] < 0.1 for u in units.values())
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_pauses_the_youngest_jobs_when_memory_is_low_and_resumes_them(tmp_path):
    proc = fake_compilers(tmp_path, 3)
    try:
        jobs = wait_for_jobs(proc, 3)
        oldest = min(jobs, key=lambda p: p.create_time())
        # "low memory": the low-water mark is above what any host has
        dog = Watchdog(proc.pid, low_water_gib=10**6, high_water_gib=10**7)
        for _ in range(5):
            dog.sample()
        assert dog.report.paused_events == 2
        # SIGSTOP takes effect when the kernel next schedules the job: on a busy box a job it was
        # just sent to can still read "running" (seen in CI), so give the signals a moment to land
        states = settled_states(jobs, stopped=2)
        assert states[oldest.pid] != psutil.STATUS_STOPPED  # one job always keeps running
        assert sorted(states.values()).count(psutil.STATUS_STOPPED) == 2
        assert dog.report.peak_jobs == 3  # counted before the first pause
        # memory is back: stop() (or the high-water mark) resumes every paused job
        dog.stop()
        time.sleep(0.1)
        assert all(p.status() != psutil.STATUS_STOPPED for p in jobs)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
