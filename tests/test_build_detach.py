"""A build that outlives its terminal: ``specrig build ... --detach`` on the real CUDA
fixture (real nvcc, real ninja), followed, stopped and killed from other commands,
each a separate ``python -m specrig`` process as a user's later shell would run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from process_support import group_alive
from test_build_fixture import DEFINITION, args, make_dirs

pytestmark = [pytest.mark.nvcc, pytest.mark.network]


def specrig(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specrig", "build", *argv], capture_output=True, text=True, timeout=300
    )


def state_of(d: dict[str, Path]) -> dict:
    return json.loads((d["logs"] / "specrig-cuda-ext.detached.json").read_text())


def wait_for(d: dict[str, Path], ok, what: str, timeout: float = 120.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            state = state_of(d)
        except (OSError, ValueError):
            state = {}
        if ok(state):
            return state
        time.sleep(0.2)
    raise AssertionError(f"{what}: not seen in {timeout} s; state {state}")


def test_a_detached_build_returns_at_once_finishes_alone_and_is_followed(build_python, tmp_path):
    d = make_dirs(tmp_path)
    started = specrig(*args(build_python, d, "--jobs", "1"), "--detach")
    assert started.returncode == 0, started.stderr
    assert "build started detached" in started.stderr and "--follow" in started.stderr
    first = state_of(d)
    # the build is nobody's child: the command that started it has already exited
    assert psutil.Process(first["pid"]).ppid() != os.getpid()
    assert os.getsid(first["pid"]) == first["pid"]  # a session of its own: no terminal to lose

    followed = specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--follow")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "done" in followed.stdout and "7/7 compiled" in followed.stdout

    state = state_of(d)
    assert state["status"] == "done" and state["done"] == state["total"] == 7
    assert state["jobs_cap"] == 1 and state["watchdog"]["peak_jobs"] == 1
    assert state["watchdog"]["peak_job_gb"] > 0 and state["watchdog"]["samples"] > 0
    wheel = Path(state["wheel"])
    assert wheel.is_file() and wheel.parent.parent == d["wheelhouse"]
    assert d["record"].is_file()  # listed in the built-wheel record, as an attached build is
    assert "[7/7]" in Path(state["build_log"]).read_text()

    status = specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--status")
    assert status.returncode == 0 and "done" in status.stdout and wheel.name in status.stdout


def test_stop_ends_the_whole_build_and_stores_nothing_and_a_second_start_is_refused(build_python, tmp_path):
    d = make_dirs(tmp_path)
    assert specrig(*args(build_python, d, "--jobs", "1"), "--detach").returncode == 0
    # wait until a compiler runs (the watchdog has seen a compile job)
    state = wait_for(
        d, lambda s: s.get("status") == "running" and s.get("watchdog", {}).get("job_commands"), "a compile job"
    )
    pgid = os.getpgid(state["pid"])

    again = specrig(*args(build_python, d, "--jobs", "1"), "--detach")
    assert again.returncode == 2 and "already running" in again.stderr and "--stop" in again.stderr

    stopped = specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    assert group_alive(pgid) == []  # nvcc, ninja, cmake, the build: nothing of it is left
    assert state_of(d)["status"] == "stopped"
    assert not list(d["wheelhouse"].glob("*/*.whl")) and not d["record"].exists()
    status = specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--status")
    assert status.returncode == 7 and "nothing was stored" in status.stdout


def test_a_killed_build_reads_as_died_with_its_log_tail(build_python, tmp_path):
    d = make_dirs(tmp_path)
    assert specrig(*args(build_python, d, "--jobs", "1"), "--detach").returncode == 0
    state = wait_for(d, lambda s: s.get("status") == "running" and s.get("done", 0) >= 1, "a unit compiled")
    os.killpg(os.getpgid(state["pid"]), signal.SIGKILL)  # the OOM killer, a host going away
    wait_for(d, lambda s: not psutil.pid_exists(s["pid"]) or psutil.Process(s["pid"]).status() == "zombie", "the end")
    status = specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--status")
    assert status.returncode == 7
    assert "died" in status.stdout and "wrote no end" in status.stdout
    assert f"last lines of {state_of(d)['build_log']}" in status.stdout and "nvcc" in status.stdout
    # a died build does not block the next one
    assert specrig(*args(build_python, d, "--jobs", "1"), "--detach").returncode == 0
    assert specrig(str(DEFINITION), "--log-dir", str(d["logs"]), "--follow").returncode == 0


def test_status_without_a_detached_build_and_detach_with_plan_are_refused(tmp_path):
    status = specrig(str(DEFINITION), "--log-dir", str(tmp_path), "--status")
    assert status.returncode == 2 and "no detached build state" in status.stderr and "--detach" in status.stderr
    assert "Traceback" not in status.stderr
    plan = specrig(str(DEFINITION), "--log-dir", str(tmp_path), "--plan", "--detach")
    assert plan.returncode == 2 and "drop --detach" in plan.stderr
    both = specrig(str(DEFINITION), "--status", "--stop")
    assert both.returncode == 2 and "not allowed with" in both.stderr
