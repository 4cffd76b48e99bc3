"""Run one of the drafter's scripts (``drafter/inenv/``) with an environment's
Python (:func:`specrig.env.script.run_script`: its ``progress DONE TOTAL`` lines drive
a rich progress bar, a failure carries the tail of its output)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from specrig.core.space import Need
from specrig.env.make import Env
from specrig.env.script import run_script

__all__ = ["run_inenv", "INENV"]

INENV = Path(__file__).parent / "inenv"


def run_inenv(
    env: Env, script: str, *args: str, what: str, threads: int | None = None, writes: Iterable[Need] = ()
) -> list[str]:
    """Run ``inenv/SCRIPT`` in ``env``; returns its output lines that are not progress. ``writes``:
    the folders it writes and how much (a full disk is named with them, exit 6)."""
    return run_script(env.python, INENV / script, *args, what=what, threads=threads, writes=writes)
