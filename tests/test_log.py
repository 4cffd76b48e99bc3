"""Long steps show progress where nobody watches a terminal too: a log file or CI gets plain lines
(now and then, and the last state once), a terminal gets rich's bar and none of those lines."""

from __future__ import annotations

import io

from rich.console import Console

from specrig.core.log import Log


def _run(console: Console, every_s: float) -> str:
    log = Log()
    log.console = console
    with log.progress(every_s=every_s) as bar:
        task = bar.add_task("target answers", total=4, note="")
        for i in range(4):
            bar.update(task, advance=1, note=f"{10 * i} tok/s")
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_log_file_gets_plain_progress_lines_and_the_last_state() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=False, width=200), every_s=0)
    lines = [x.strip() for x in out.splitlines() if x.strip()]
    assert lines == [f"target answers: {i + 1}/4 ({25 * (i + 1)}%) {10 * i} tok/s, 0:00 elapsed" for i in range(4)]


def test_lines_are_spaced_and_the_end_is_always_shown() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=False, width=200), every_s=3600)
    lines = [x.strip() for x in out.splitlines() if x.strip()]
    assert lines == [
        "target answers: 1/4 (25%) 0 tok/s, 0:00 elapsed",
        "target answers: 4/4 (100%) 30 tok/s, 0:00 elapsed",
    ]


def test_a_terminal_gets_the_bar_not_the_lines() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=True, width=200), every_s=0)
    assert "elapsed" not in out


def _lines(description: str, total: float | None, advance: float) -> list[str]:
    """The plain lines of one task that is advanced once and has no note."""
    log = Log()
    log.console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with log.progress(every_s=0) as bar:
        bar.update(bar.add_task(description, total=total, note=""), advance=advance)
    return [x.strip() for x in log.console.file.getvalue().splitlines() if x.strip()]  # type: ignore[attr-defined]


def test_a_step_without_a_note_has_no_stray_separator() -> None:
    assert _lines("hidden states", total=2, advance=2) == ["hidden states: 2/2 (100%), 0:00 elapsed"]


def test_a_step_with_no_total_and_nothing_done_shows_only_its_time() -> None:
    assert _lines("offline acceptance", total=None, advance=0) == ["offline acceptance: 0:00 elapsed"]
