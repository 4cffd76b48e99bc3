"""Interrupts from a terminal that goes, and through the front door.

A real ``specrig bench`` (``--endpoint`` attached to the synthetic SSE server, a few seconds, no
engine) runs on a pseudo-terminal that is its controlling terminal; closing the terminal's master
side is what closing a terminal window does: the kernel hangs the terminal up (every write to it
fails with EIO) and sends SIGHUP.

* specrig alone: it exits 129, its results folder says ``interrupted (SIGHUP)``, and nothing of
  its session is left running;
* behind the front door (the noxfile's :func:`specrig.core.frontdoor.passing_signals` around a
  wait, as nox's ``session.run(..., interrupt_timeout=None)`` does it): a SIGHUP (the terminal
  closes), a SIGTERM or SIGINT to the front door alone, or a Ctrl-C typed at the terminal
  reaches specrig once, and the front door ends, by that signal, only once specrig has ended."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from specrig.lab.folder import incomplete
from specrig.serve.synthetic import Behaviour, serve_in_process

ROOT = Path(__file__).resolve().parents[1]

# a front door doing what nox does with the noxfile's _specrig: passing_signals() around
# nox's popen (communicate; on KeyboardInterrupt, communicate again: interrupt_timeout=None)
FRONT_DOOR = """
import subprocess, sys
from pathlib import Path
from specrig.core.frontdoor import passing_signals
with passing_signals():
    proc = subprocess.Popen(sys.argv[2:])
    Path(sys.argv[1]).write_text(str(proc.pid))
    try:
        proc.communicate()
    except KeyboardInterrupt:
        proc.communicate()
        raise
"""


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with serve_in_process(Behaviour(token_delay_s=0.05)) as server:  # 400 tokens a request: long enough
        yield server.base_url


class Terminal:
    """``argv`` as the leader of a new session whose controlling terminal is a new pty."""

    def __init__(self, argv: list[str], env: dict[str, str], *, controlling: bool = True) -> None:
        self.master, slave = os.openpty()

        def own_terminal() -> None:
            os.setsid()
            if controlling:  # else its output goes to the pty, but it has no terminal (as under CI)
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal, env=env)
        os.close(slave)
        self.output = b""

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output:
            assert self.proc.poll() is None, f"ended early ({self.proc.returncode}):\n{self.output.decode()[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} yet:\n{self.output.decode()[-3000:]}"
            if select.select([self.master], [], [], 0.5)[0]:
                self.output += os.read(self.master, 65536)

    def wait_end(self, timeout: float = 120) -> int:
        """The exit code, reading what it still says; past ``timeout`` fail with its last words and
        what of its session is still running (and in which state)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                live = [
                    f"{p.pid} {p.name()} {p.status()} {' '.join(p.cmdline())[:120]}" for p in session_of(self.proc.pid)
                ]
                raise AssertionError(
                    f"not ended after {timeout} s; still running: {live}\n{self.output.decode()[-3000:]}"
                )
            if self.master >= 0 and select.select([self.master], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):  # a closed terminal's master reads EIO
                    self.output += os.read(self.master, 65536)
            else:
                time.sleep(0.2)
        return self.proc.returncode

    def close(self) -> None:
        """The terminal goes (its window is closed)."""
        os.close(self.master)
        self.master = -1

    def end(self) -> None:
        if self.master >= 0:
            os.close(self.master)
        for p in session_of(self.proc.pid):
            p.kill()


def session_of(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid`` (zombies are not running)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (OSError, psutil.Error):
            pass
    return found


def bench_argv(endpoint: str, results: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "specrig", "bench", "--recipe", "cpu", "--endpoint", endpoint),
        *("--memory-bandwidth", "10", "--max-tokens", "400", "--warmup", "0", "--results", str(results)),
    ]


def env_for(tmp_path: Path) -> dict[str, str]:
    return os.environ | {
        "SPECRIG_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT / "src"),
        "COLUMNS": "200",
        "PYTHONUNBUFFERED": "1",
    }


def test_a_terminal_that_goes_is_recorded_and_nothing_is_left(tmp_path: Path, endpoint: str) -> None:
    run = tmp_path / "run"
    t = Terminal(bench_argv(endpoint, run), env_for(tmp_path))
    try:
        t.wait_for("] measuring")
        t.close()
        rc = t.wait_end()
        assert rc == 128 + signal.SIGHUP, t.output.decode()[-3000:]
        assert incomplete(run) == "interrupted (SIGHUP)"
        assert not (run / "summary.json").exists()
        assert session_of(t.proc.pid) == []
    finally:
        t.end()


WAYS = {
    "the terminal closes": signal.SIGHUP,  # the kernel's SIGHUP goes to the session's leader: the front door
    "SIGTERM to the front door": signal.SIGTERM,
    "Ctrl-C at the terminal": signal.SIGINT,  # to the foreground process group: both
    "SIGINT to the front door, no terminal": signal.SIGINT,  # as a CI runner cancelling a job
}


@pytest.mark.parametrize("how", list(WAYS))
def test_the_front_door_ends_after_specrig(tmp_path: Path, endpoint: str, how: str) -> None:
    run, pid_file = tmp_path / "run", tmp_path / "specrig.pid"
    front = tmp_path / "front_door.py"
    front.write_text(FRONT_DOOR)
    argv = [sys.executable, str(front), str(pid_file), *bench_argv(endpoint, run)]
    t = Terminal(argv, env_for(tmp_path), controlling="no terminal" not in how)
    try:
        t.wait_for("] measuring")
        specrig = psutil.Process(int(pid_file.read_text()))
        sig = WAYS[how]
        if how == "the terminal closes":
            t.close()
        elif how == "Ctrl-C at the terminal":
            os.write(t.master, b"\x03")
        else:
            os.kill(t.proc.pid, sig)
        rc = t.wait_end()
        assert rc == -sig, t.output.decode()[-3000:]  # the front door ends by the signal, as it would have
        said = t.output.decode(errors="replace")[-3000:]
        assert not specrig.is_running(), f"the front door returned while specrig was still running:\n{said}"
        assert incomplete(run) == f"interrupted ({sig.name})", said
        assert session_of(t.proc.pid) == [], said
    finally:
        t.end()
