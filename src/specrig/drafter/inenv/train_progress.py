"""The trainer's progress line: steps done of the steps the run will take. Those are the planned
steps, or, when the time budget (``max_seconds``) ends the run first, the steps that fit in it at
the pace so far, so the bar reaches its end when the run does (a budget that stops 7,710 planned
steps at 2,834 shows 2,834 of about 2,834, not 37%). Plain Python: no torch."""

from __future__ import annotations

__all__ = ["expected_steps", "progress_line"]


def expected_steps(step: int, total_steps: int, elapsed: float, max_seconds: float | None) -> int:
    """The steps the run will take: ``total_steps``, or fewer when ``max_seconds`` binds first
    (``step`` steps in ``elapsed`` seconds, at that pace), never fewer than ``step``."""
    if not max_seconds or step <= 0 or elapsed <= 0:
        return max(total_steps, step)
    within_budget = round(step * max_seconds / elapsed)
    return max(step, min(total_steps, within_budget))


def progress_line(
    step: int, total_steps: int, elapsed: float, max_seconds: float | None, loss: float, *, stopped: bool = False
) -> str:
    """``progress DONE TOTAL NOTE``; ``stopped``: the budget ended the run at ``step`` (the bar is full)."""
    total = step if stopped else expected_steps(step, total_steps, elapsed, max_seconds)
    note = f"loss {loss:.3f}"
    if max_seconds and total < total_steps:
        note += f", steps within the {max_seconds:g} s budget (of {total_steps} planned)"
    return f"progress {step} {total} {note}"
