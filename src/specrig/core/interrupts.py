"""Interrupts end everything: SIGINT, SIGTERM and SIGHUP all unwind the command
like Ctrl-C does (``KeyboardInterrupt``), so every ``finally`` runs (servers
stopped, staging folders removed); whatever specrig started and is still alive
after that is stopped by :func:`stop_descendants`. A second signal while
unwinding forces it: every descendant gets SIGKILL and the process exits."""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

import psutil

__all__ = ["Interrupted", "install", "stop_descendants", "exit_code", "received"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal asked specrig to stop (``signum``: which)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_state = {"count": 0}


def _handler(signum: int, frame: FrameType | None) -> None:
    _state["count"] += 1
    _state["signum"] = signum
    if _state["count"] > 1:  # the second interrupt: no more unwinding
        stop_descendants(grace_s=0.0)
        os._exit(128 + signum)
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to :class:`Interrupted` (main thread only)."""
    _state["count"] = 0
    _state["signum"] = 0
    for s in _SIGNALS:
        signal.signal(s, _handler)


def exit_code(exc: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    if isinstance(exc, Interrupted):
        return 128 + exc.signum
    return 128 + (_state.get("signum") or signal.SIGINT)


def received() -> str:
    """The name of the signal that interrupted this process ("SIGINT" when none was seen)."""
    return signal.Signals(_state.get("signum") or signal.SIGINT).name


def stop_descendants(grace_s: float = 5.0) -> list[str]:
    """SIGTERM every process this one started (at any depth, their process groups
    included), SIGKILL what is left after ``grace_s``; returns ``"pid name"`` of each
    one that was still running."""
    me = psutil.Process()
    try:
        procs = me.children(recursive=True)
    except psutil.Error:
        return []
    groups = set()
    for p in procs:
        try:
            pgid = os.getpgid(p.pid)
        except OSError:
            continue
        if pgid != os.getpgid(0):
            groups.add(pgid)
    for pgid in groups:  # a server in its own session: its whole group
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGTERM)
    names = []
    for p in procs:
        try:
            names.append(f"{p.pid} {p.name()}")
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    if alive:
        psutil.wait_procs(alive, timeout=2)
    return names
