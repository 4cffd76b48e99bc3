"""Run a standalone script (a room's ``inenv/`` file) with an engine environment's Python,
any room's: the interpreter is named by its path, so a room that knows only the bench's
plan (``plan.python``) runs one as well as one that holds an :class:`~specrig.env.make.Env`.
Hugging Face stays offline; ``progress DONE TOTAL [NOTE]`` lines drive a rich progress bar;
a failure raises :class:`~specrig.core.errors.EnvError` with the tail of the output and
the command to rerun by hand, and a failure on a full disk specrig's own message (exit 6: the
folders the script writes and the space they need, :mod:`specrig.core.space`), never the
script's traceback: from a ``Traceback`` line on, its output is held back from the console."""

from __future__ import annotations

import os
import subprocess
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from specrig.core.errors import EnvError
from specrig.core.log import log
from specrig.core.space import Need, disk_full_said, full_disk_error

__all__ = ["run_script"]


def run_script(
    python: Path | str,
    script: Path | str,
    *args: str,
    what: str,
    threads: int | None = None,
    writes: Iterable[Need] = (),
) -> list[str]:
    """Run ``python script args...``; returns its output lines that are not progress (each logged too,
    up to a traceback). ``writes``: the folders it writes and how much, named if a disk fills."""
    cmd = [str(python), str(script), *args]
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
    held: list[str] = []  # from a traceback on: said only if the script still succeeds
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
    except OSError as exc:
        raise EnvError(f"{what}: cannot run {python} ({exc.strerror or exc})", hint="check the environment") from None
    assert proc.stdout is not None
    with log.progress() as bar:
        task = bar.add_task(what, total=None, note="")
        try:
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                if line.startswith("progress "):
                    parts = line.split()
                    bar.update(task, completed=int(parts[1]), total=int(parts[2]), note=" ".join(parts[3:]))
                elif line:
                    lines.append(line)
                    if held or line.startswith("Traceback (most recent call last)"):
                        held.append(line)
                    else:
                        log.info(line)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        text = "\n".join(x for x in tail if not x.startswith("progress "))
        if said := disk_full_said(text):
            raise full_disk_error(what, said, writes)
        raise EnvError(f"{what} failed (exit {rc}):\n{text}", hint=f"rerun by hand: {' '.join(cmd)}")
    for line in held:
        log.info(line)
    return lines
