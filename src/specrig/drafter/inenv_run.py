"""Run one of the drafter's scripts (``drafter/inenv/``) with an environment's
Python, showing its ``progress DONE TOTAL`` lines as a rich progress bar and
failing with the tail of its output."""

from __future__ import annotations

import os
import subprocess
from collections import deque
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from specrig.core.errors import EnvError
from specrig.core.log import log
from specrig.env.make import Env

__all__ = ["run_inenv", "INENV"]

INENV = Path(__file__).parent / "inenv"


def run_inenv(env: Env, script: str, *args: str, what: str, threads: int | None = None) -> list[str]:
    """Run ``inenv/SCRIPT`` in ``env``; returns its output lines that are not progress."""
    cmd = [str(env.python), str(INENV / script), *args]
    environ = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' weight-loading bars: noise in a log
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    }
    if threads:
        environ |= {"OMP_NUM_THREADS": str(threads)}
    tail: deque[str] = deque(maxlen=40)
    lines: list[str] = []
    columns = (
        TextColumn("  {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=log.console, transient=True) as bar:
        task = bar.add_task(what, total=None, note="")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                if line.startswith("progress "):
                    parts = line.split()
                    bar.update(task, completed=int(parts[1]), total=int(parts[2]), note=" ".join(parts[3:]))
                elif line:
                    lines.append(line)
                    log.info(line)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        text = "\n".join(x for x in tail if not x.startswith("progress "))
        raise EnvError(f"{what} failed (exit {rc}):\n{text}", hint=f"rerun by hand: {' '.join(cmd)}")
    return lines
