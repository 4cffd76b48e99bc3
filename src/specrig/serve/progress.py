"""A live progress bar for one measured run: requests done, tokens streamed,
output tok/s. Quiet (not even created) when stdout is not a terminal."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from specrig.serve.types import RequestResult

__all__ = ["RunProgress"]


class RunProgress:
    """Updated from the client's event loop; rich redraws it from its own thread."""

    def __init__(self, progress: Progress, label: str, total: int) -> None:
        self._p = progress
        self._task = progress.add_task(label, total=total, tokens=0, rate=0.0)
        self._tokens = 0
        self._t0 = time.perf_counter()
        self._last = 0.0

    @classmethod
    def start(cls, label: str, total: int, console: Console | None = None) -> RunProgress | None:
        console = console or Console()
        if not console.is_terminal:
            return None
        p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("requests  {task.fields[tokens]} tokens  {task.fields[rate]:.1f} tok/s"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            refresh_per_second=4,
        )
        p.start()
        return cls(p, label, total)

    def tokens(self, n: int) -> None:
        self._tokens += n
        now = time.perf_counter()
        if now - self._last > 0.25:  # cheap: the bar redraws 4 times a second anyway
            self._last = now
            self._update()

    def _update(self) -> None:
        dt = time.perf_counter() - self._t0
        self._p.update(self._task, tokens=self._tokens, rate=self._tokens / dt if dt else 0.0)

    def request_done(self, res: RequestResult) -> None:
        self._p.advance(self._task)
        self._update()

    def stop(self) -> None:
        self._update()
        self._p.stop()
