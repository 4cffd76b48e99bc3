"""One logger for the whole tool: steps with timings, warnings prefixed with
``specrig: warning:``, all on stderr through rich (plain text when not a TTY)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["log", "Log"]


class Log:
    def __init__(self) -> None:
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)

    def step(self, message: str) -> None:
        self.console.print(f"[bold cyan]specrig:[/] {escape(message)}")

    def info(self, message: str) -> None:
        self.console.print(f"  {escape(message)}")

    def warn(self, message: str) -> None:
        self.console.print(f"[bold yellow]specrig: warning:[/] {escape(message)}")

    def error(self, message: str) -> None:
        self.console.print(f"[bold red]specrig: error:[/] {escape(message)}")

    def progress(self, every_s: float | None = 30.0, *, transient: bool = True) -> Progress:
        """The bar of a long step (what, a bar, done/total, a note, elapsed, left) on this log's
        console, gone when it ends unless not ``transient``. Tasks take a ``note`` field. Where the
        console is no terminal (a log file, CI), a plain line instead, at most every ``every_s``
        seconds and once at the end (None: nothing at all)."""
        return _Progress(
            every_s,
            TextColumn("  {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=transient,
        )

    @contextmanager
    def timed(self, message: str) -> Iterator[None]:
        self.step(message + " ...")
        start = time.monotonic()
        yield
        self.console.print(f"  [dim]done in {time.monotonic() - start:.1f} s[/]")


log = Log()


class _Progress(Progress):
    """rich's Progress, which draws nothing where the console is no terminal: there it prints a
    line per task ("  target answers: 312/1224 (25%) 96 tok/s, 3:10 elapsed") now and then, and
    the last state at the end."""

    def __init__(self, every_s: float | None, *columns: object, **kwargs: object) -> None:
        super().__init__(*columns, **kwargs)  # type: ignore[arg-type]
        self._every_s = every_s
        self._shown: dict[TaskID, tuple[float, float]] = {}  # when, and at how many done

    def start(self) -> None:
        if self.console.is_terminal:  # elsewhere the lines below are the display (rich adds a blank line)
            super().start()

    def update(self, task_id: TaskID, **kwargs: object) -> None:  # type: ignore[override]
        super().update(task_id, **kwargs)  # type: ignore[arg-type]
        self._line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._line(task_id)

    def stop(self) -> None:
        if self.console.is_terminal:
            super().stop()
        for task_id in self.task_ids:
            self._line(task_id, final=True)

    def _line(self, task_id: TaskID, final: bool = False) -> None:
        if self.console.is_terminal or self._every_s is None:
            return
        with self._lock:
            task = self._tasks[task_id]
            done, total, note, elapsed = task.completed, task.total, task.fields.get("note", ""), task.elapsed or 0.0
        now = time.monotonic()
        when, at = self._shown.get(task_id, (-float("inf"), -1.0))
        if (final and done == at) or (not final and now - when < self._every_s):
            return
        self._shown[task_id] = (now, done)
        # "312/1224 (25%) 96 tok/s, ": a bare count without a total, nothing for a step not yet counting
        count = f"{done:.0f}/{total:.0f} ({done / total:.0%})" if total else f"{done:.0f}" if done else ""
        head = " ".join(x for x in (count, escape(str(note))) if x)
        m, sec = divmod(int(elapsed), 60)
        self.console.print(f"  {escape(task.description)}: {head + ', ' if head else ''}{m}:{sec:02d} elapsed")
