"""Interrupts end everything: SIGINT, SIGTERM and SIGHUP all unwind the command
like Ctrl-C does (``KeyboardInterrupt``), so every ``finally`` runs (servers
stopped, staging folders removed); whatever specrig started and is still alive
after that is stopped by :func:`stop_descendants`.

First thing when a signal arrives, before anything is unwound or printed, the
hooks registered with :func:`on_interrupt` run (a results folder records which
signal ended its run, so the record holds even if the process is killed while
it cleans up), and a terminal that has gone (SIGHUP on a closed terminal) is
replaced by /dev/null, so that no write to it ends the cleanup early.

A second Ctrl-C (SIGINT) while unwinding forces it: every descendant gets SIGKILL
and the process exits. A SIGTERM or SIGHUP that comes again is the same request
again (a closing terminal sends SIGHUP more than once; a front door that passes a
signal on may reach a process the signal reached already): the cleanup goes on."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import termios
from collections.abc import Callable
from types import FrameType

import psutil

__all__ = ["Interrupted", "install", "stop_descendants", "exit_code", "received", "on_interrupt", "forget"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal asked specrig to stop (``signum``: which)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_state = {"count": 0}
_hooks: dict[object, Callable[[str], None]] = {}


def on_interrupt(key: object, hook: Callable[[str], None]) -> None:
    """Run ``hook(signal name)`` first thing when a signal interrupts this process (once; its
    errors are ignored: it must not stop the interrupt). ``key`` names it for :func:`forget`."""
    _hooks[key] = hook


def forget(key: object) -> None:
    """The hook registered under ``key`` is no longer wanted (its run finished)."""
    _hooks.pop(key, None)


def _terminal_gone(fd: int) -> bool:
    """Is ``fd`` a terminal that has hung up? Every call on it then fails with EIO (``isatty``
    says False), where a file or a pipe says it is no terminal (ENOTTY)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args) and exc.args[0] == errno.EIO
    return False


def _silence_a_gone_terminal() -> None:
    """stdout and stderr on a terminal that has gone write to /dev/null from now on."""
    for fd in (1, 2):
        if _terminal_gone(fd):
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)


def _handler(signum: int, frame: FrameType | None) -> None:
    _state["count"] += 1
    if _state["count"] > 1:
        if signum != signal.SIGINT:  # the same request again: the cleanup goes on
            _silence_a_gone_terminal()
            return
        stop_descendants(grace_s=0.0)  # a second Ctrl-C: no more unwinding
        os._exit(128 + (_state.get("signum") or signum))
    _state["signum"] = signum
    name = signal.Signals(signum).name
    for hook in list(_hooks.values()):
        with contextlib.suppress(Exception):
            hook(name)
    _silence_a_gone_terminal()
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to :class:`Interrupted` (main thread only)."""
    _state["count"] = 0
    _state["signum"] = 0
    _hooks.clear()
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
