"""The front door (nox) waits for specrig: a signal does not end it while specrig still cleans up.

Left to itself, nox dies at once on SIGHUP or SIGTERM (it handles neither), returning the prompt
while specrig still stops its servers, and on Ctrl-C it gives the command 0.5 s before killing
it. The noxfile runs specrig inside :func:`passing_signals` (and with nox's
``interrupt_timeout=None``): a SIGINT, SIGTERM or SIGHUP that reaches the front door is passed on
to the command it runs (its direct children), unless the terminal sent it to the command as well
(Ctrl-C, in the terminal's foreground process group, which the command shares); the front door
keeps waiting, and once the command has ended it ends by the same signal (exit 130 / 143 / 129),
as it would have. A second Ctrl-C forces specrig (:mod:`specrig.core.interrupts`); a SIGTERM or
SIGHUP it receives twice (from the terminal and passed on here) is one request to it.

Standard library only: nox's own Python imports this module from the checkout (the noxfile
puts ``src/`` on its path), where specrig's dependencies are not installed."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

__all__ = ["passing_signals", "children"]

PASSED = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def children(pid: int | None = None) -> list[int]:
    """The processes whose parent is ``pid`` (this one by default), from /proc (Linux)."""
    pid = os.getpid() if pid is None else pid
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it ended meanwhile
            continue
        fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _terminal_foreground() -> int | None:
    """The foreground process group of this process's controlling terminal (None: it has none)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.tcgetpgrp(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def passing_signals(signals: tuple[int, ...] = PASSED) -> Iterator[list[int]]:
    """While the block runs a command (nox's ``session.run``), pass each of ``signals`` on to the
    command and keep waiting for it; after the block, end this process by the first one received.
    Yields the signals received so far."""
    received: list[int] = []

    def passed_on(signum: int, frame: object) -> None:
        received.append(signum)
        foreground = _terminal_foreground() if signum == signal.SIGINT else None
        for child in children():
            with contextlib.suppress(OSError):
                if foreground is None or os.getpgid(child) != foreground:  # else Ctrl-C reached it too
                    os.kill(child, signum)

    old = {s: signal.signal(s, passed_on) for s in signals}
    try:
        yield received
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if received:  # the command has ended: the front door ends as the signal asked
            signal.signal(received[0], signal.SIG_DFL)
            os.kill(os.getpid(), received[0])
