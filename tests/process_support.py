"""What is left of a process group, seen from outside it: the tests of detached runs (a build, a
study) check that stopping one leaves no process of its group behind."""

from __future__ import annotations

import os

import psutil

__all__ = ["group_alive"]


def group_alive(pgid: int) -> list[int]:
    """The pids of the live (not zombie) processes in process group ``pgid``."""
    left = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.info["pid"]) == pgid:
                left.append(p.info["pid"])
        except (psutil.Error, OSError):
            pass
    return left
