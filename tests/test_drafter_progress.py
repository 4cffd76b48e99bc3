"""The trainer's progress bar counts toward what ends the run: its planned steps, or, when the
``--train-seconds`` budget binds first, the steps that fit in the budget at the pace so far. The
trainer's own progress module (plain Python, no torch), and the bar specrig draws from its lines."""

from __future__ import annotations

import sys

import pytest

from specrig.core.log import log
from specrig.drafter.inenv_run import INENV
from specrig.env.script import run_script

sys.path.insert(0, str(INENV))
from train_progress import expected_steps, progress_line


def test_a_binding_time_budget_sets_the_bars_end() -> None:
    # the GPU capture: 7,710 planned steps, the 300 s budget ended the run at 2,834
    assert expected_steps(1000, 7710, elapsed=105.85, max_seconds=300.0) == 2834
    assert progress_line(1000, 7710, 105.85, 300.0, 2.5).startswith("progress 1000 2834 loss 2.500")
    assert "within the 300 s budget (of 7710 planned)" in progress_line(1000, 7710, 105.85, 300.0, 2.5)
    # the run's last line: the budget stopped it, the bar is full
    assert progress_line(2834, 7710, 300.1, 300.0, 1.9, stopped=True).startswith("progress 2834 2834 ")


@pytest.mark.parametrize(
    ("step", "elapsed", "budget", "expected"),
    [
        (100, 10.0, None, 7710),  # no budget: the planned steps
        (100, 10.0, 10_000.0, 7710),  # a budget the planned steps end first
        (7710, 50.0, 300.0, 7710),  # done within the budget
        (500, 400.0, 300.0, 500),  # past the budget: never fewer than done
        (0, 0.0, 300.0, 7710),  # nothing done yet: no pace to judge by
    ],
)
def test_the_planned_steps_stay_the_end_when_the_budget_does_not_bind(
    step: int, elapsed: float, budget: float | None, expected: int
) -> None:
    assert expected_steps(step, 7710, elapsed, budget) == expected


def test_the_bar_specrig_draws_ends_full_on_a_budget_cut_run(tmp_path) -> None:
    """The trainer's lines through specrig's script runner: the bar's last state is its total."""
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(INENV)!r})\n"
        "from train_progress import progress_line\n"
        "for step in range(1, 31):\n"
        "    print(progress_line(step, 7710, step * 10.0, 300.0, 1.0, stopped=step == 30), flush=True)\n"
    )
    with log.console.capture() as captured:
        run_script(sys.executable, script, what="training")
    said = captured.get()
    assert "30/30" in said or "100%" in said, said[-500:]
    assert "/7710" not in said
