"""What a reference trainer's run is timed by, from its per-step metric records: shared by
train_speculators.py and train_specforge.py. Imports nothing."""

import statistics


def step_summary(steps: list[tuple[int, float, dict]]) -> dict:
    """``steps``: (step number, seconds since the start, metrics) per step record, in order.
    ``steps_run``, ``first_step_s`` (the start to the first step's end), ``step_s`` and
    ``mean_step_s`` (the median and the mean gap between records after the first ten: warm-up and
    compilation left out; the mean is what a number of steps costs), ``late_step_s`` (the mean gap
    over the later half of the steps: what a long run's steps cost once compiling for new shapes has
    settled, as ``reference.calibrated_step_s`` counts it) and ``train`` (every 10th step's metrics
    and the last, each with ``t``)."""
    times = [t for _, t, _ in steps]
    gaps = [b - a for a, b in zip(times[10:], times[11:], strict=False)]
    late = gaps[len(gaps) // 2 :]
    kept = [s for i, s in enumerate(steps) if i % 10 == 0 or i == len(steps) - 1]
    return {
        "steps_run": len(steps),
        "first_step_s": times[0] if times else None,
        "step_s": statistics.median(gaps) if gaps else None,
        "mean_step_s": statistics.fmean(gaps) if gaps else None,
        "late_step_s": statistics.fmean(late) if late else None,
        "train": [{"step": n, "t": round(t, 3)} | m for n, t, m in kept],
    }
