"""Interrupts end everything, with a real vLLM server on the CPU: ``specrig bench``
runs the suite in its own process, so the server it launches is its child; a
SIGTERM while that server starts, or a Ctrl-C (SIGINT) while it is measured,
stops the server's whole process group (engine core included) within seconds,
and the command exits 143 / 130 saying so. Two server starts (~2-3 minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.engine, pytest.mark.slow]


class Bench:
    """``specrig bench`` in a session of its own, its output collected line by line."""

    def __init__(self, results: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specrig.cli", "bench", "--max-tokens", "64", "--results", str(results), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=os.environ | {"COLUMNS": "200", "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def wait_for(self, what, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, f"bench ended early (exit {self.proc.returncode}):\n{self.output[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting:\n{self.output[-3000:]}"
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in self.descendants():
            p.kill()


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return out


def _server(b: Bench) -> psutil.Process | None:
    for p in b.descendants():
        try:
            if "serve" in p.cmdline() and any("vllm" in a for a in p.cmdline()[:2]):
                return p
        except psutil.Error:
            pass
    return None


def test_sigterm_while_the_server_starts(tmp_path: Path) -> None:
    b = Bench(tmp_path / "r")
    try:
        b.wait_for(lambda: _server(b) is not None, timeout=600)  # environment and model made, server launched
        server = _server(b)
        assert server is not None and server.ppid() == b.proc.pid, "the server is a child of `specrig bench` itself"
        time.sleep(3)  # let it get going: its engine core and their threads
        tree = [server, *server.children(recursive=True)]
        t0 = time.monotonic()
        os.kill(b.proc.pid, signal.SIGTERM)
        rc = b.proc.wait(timeout=60)
        elapsed = time.monotonic() - t0
        b._reader.join(timeout=5)
        assert rc == 143, b.output[-3000:]
        assert elapsed < 30, f"took {elapsed:.1f} s to stop"
        assert not _alive(tree), f"left running: {_alive(tree)}"
        assert "interrupted (SIGTERM)" in b.output and "Traceback" not in b.output
        assert not (tmp_path / "r" / "summary.json").exists()  # nothing half-written: no summary at all
    finally:
        b.kill()


def test_ctrl_c_while_measuring(tmp_path: Path) -> None:
    b = Bench(tmp_path / "r", "--max-tokens", "2000")  # long enough to be interrupted mid-run
    try:
        b.wait_for(lambda: "] measuring" in b.output, timeout=900)
        time.sleep(2)
        server = _server(b)
        assert server is not None
        tree = [server, *server.children(recursive=True)]
        t0 = time.monotonic()
        os.kill(b.proc.pid, signal.SIGINT)
        rc = b.proc.wait(timeout=60)
        elapsed = time.monotonic() - t0
        b._reader.join(timeout=5)
        assert rc == 130, b.output[-3000:]
        assert elapsed < 30, f"took {elapsed:.1f} s to stop"
        assert not _alive(tree), f"left running: {_alive(tree)}"
        assert "interrupted (SIGINT)" in b.output and "Traceback" not in b.output
    finally:
        b.kill()
