"""Run one of the drafter's scripts (``drafter/inenv/``) with an environment's
Python (:func:`specrig.env.script.run_script`: its ``progress DONE TOTAL`` lines drive
a rich progress bar, a failure carries the tail of its output)."""

from __future__ import annotations

from pathlib import Path

from specrig.env.make import Env
from specrig.env.script import run_script

__all__ = ["run_inenv", "INENV"]

INENV = Path(__file__).parent / "inenv"


def run_inenv(env: Env, script: str, *args: str, what: str, threads: int | None = None) -> list[str]:
    """Run ``inenv/SCRIPT`` in ``env``; returns its output lines that are not progress."""
    return run_script(env.python, INENV / script, *args, what=what, threads=threads)
