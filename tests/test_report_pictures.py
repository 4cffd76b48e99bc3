"""The pictures of ``specrig report`` and of the drafter's curves: a legend keeps what tells runs
apart, and a picture with nothing to draw is not written. (Drawn from real captures: the studies'
replays, studies/*/test_replay.py.)"""

from __future__ import annotations

from pathlib import Path

from specrig.report.compare import legend_names
from specrig.report.plots import plot_curve, plot_training_time


def test_legend_names_keep_what_tells_runs_apart() -> None:
    """A two-engine pair's acceptance plot read '-sglang-sharegpt-eos' and 'ir-vllm-sharegpt-eos' (the
    last 20 characters of each name, studies/2026-12-02-one-drafter-two-engines); the legend now drops
    the words all runs share."""
    pair = ["pair-sglang-sharegpt-eos", "pair-vllm-sharegpt-eos"]
    assert legend_names(pair) == ["sglang-sharegpt-eos", "vllm-sharegpt-eos"]
    gaps = ["gap-vllm-graphs", "gap-vllm-eager", "gap-vllm-v1runner", "gap-vllm-noprefix"]
    assert legend_names(gaps) == ["graphs", "eager", "v1runner", "noprefix"]
    runs = ["sglang-story", "vllm-story", "vllm-sharegpt-eos"]
    assert legend_names(runs) == runs  # nothing shared: whole names
    assert legend_names(["a-very-long-run-name-that-goes-on"]) == ["a-very-long-run-name…"]


def test_a_picture_with_nothing_to_draw_is_not_written(tmp_path: Path) -> None:
    assert plot_curve([], tmp_path / "none.png", "nothing") is None
    assert plot_training_time({"no epochs": {"epochs": []}}, tmp_path / "none.png", "t") is None
    assert not (tmp_path / "none.png").exists()
