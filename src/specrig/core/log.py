"""One logger for the whole tool: steps with timings, warnings prefixed with
``specrig: warning:``, all on stderr through rich (plain text when not a TTY)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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

    def progress(self) -> Progress:
        """The bar of a long step (what, a bar, done/total, a note, elapsed, left): transient,
        on this log's console. Tasks take a ``note`` field."""
        return Progress(
            TextColumn("  {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )

    @contextmanager
    def timed(self, message: str) -> Iterator[None]:
        self.step(message + " ...")
        start = time.monotonic()
        yield
        self.console.print(f"  [dim]done in {time.monotonic() - start:.1f} s[/]")


log = Log()
