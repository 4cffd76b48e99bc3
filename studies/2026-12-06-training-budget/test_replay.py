"""Issue 27, what decided the GPU recipe's training budget (a real capture,
studies/2026-12-06-training-budget/capture, SOURCES.md): one H100 lease ran the pipeline at the recipe's
20,000 samples (then a 150 s cap), then specrig's trainer twice more on the same answers: with
each batch's length padded to a multiple of 64 (``--length-bucket 64``), and with 300 s of
training (``--train-seconds 300``), the rest of the pipeline's 15-minute budget. Each was scored
on the same 200 held-out prompts as the curve (studies/2026-12-05-data-curve/capture-h100-curve-online, whose 4,000-sample
drafter is the one to beat); the 300 s drafter was then served on held-out chat traffic. Fast:
every figure the README quotes, recomputed from the captured records.

``python studies/draw.py 2026-12-06-training-budget [OUT_DIR]`` draws the study's picture from the
captures (h100-train-budget.png, beside the README unless OUT_DIR is given)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_support import captured_summary, cells, chat_figures, measurement, page_tables
from specrig.drafter.pipeline import TRAIN_KNOBS
from specrig.drafter.settings import for_recipe
from specrig.lab.results import LoadPoint
from specrig.lab.summary import pair
from specrig.recipe.schema import load_recipe
from specrig.report.plots import plot_training_time

HERE = Path(__file__).resolve().parent
CAPTURE = HERE / "capture"
CURVE = HERE.parent / "2026-12-05-data-curve" / "capture-h100-curve-online"
RUNS = ("default", "bucket64", "train300")
SERVED = "eagle3-eagle3-14e01f80cd5eaf7d-k3"


def _json(name: str, folder: Path = CAPTURE) -> dict:
    return json.loads((folder / name).read_text())


def _stage(run: str) -> dict:
    return _json(f"{run}-train-stage.json")


def _eval(run: str) -> dict:
    return _json(f"{run}-offline_eval.json")


def test_three_runs_of_one_trainer_on_the_same_answers() -> None:
    """One generation (20,200 answers of the curve's prompts in 168 s, the server up in 90 s) and one
    token-id stage feed all three runs; they differ only in the flag each run names."""
    gen = _json("generate-stage.json")
    assert gen["inputs"]["prompts"] == _json("prompts-stage.json", CURVE)["key"]  # the curve's prompts
    assert gen["facts"]["output_tokens"] == 4467571 and round(gen["facts"]["generate_s"]) == 168
    assert len({_stage(run)["inputs"]["hidden"] for run in RUNS}) == 1
    base = _stage("default")["inputs"]["knobs"]
    assert base["train_seconds"] == 150.0 and "length_bucket" not in base
    assert _stage("bucket64")["inputs"]["knobs"] == base | {"length_bucket": 64}
    assert _stage("train300")["inputs"]["knobs"] == base | {"train_seconds": 300.0}
    for run in RUNS:
        f = _stage(run)["facts"]
        assert f["train_samples"] == 20000 and f["epoch_steps"] == (1363 if run == "bucket64" else 1285)
        assert f["stopped_early"] and f["device"] == "cuda" and f["features"] == "online"


def test_the_recipe_now_trains_as_the_300_s_run_did() -> None:
    """The hopper recipe's training settings are the 300 s run's, knob for knob."""
    s = for_recipe(load_recipe("hopper-sm90"), quick=False)
    assert s.samples == 20000 and s.length_bucket == 1
    assert {k: getattr(s, k) for k in TRAIN_KNOBS} == _stage("train300")["inputs"]["knobs"]


def test_a_first_epoch_step_costs_more_unless_lengths_are_bucketed() -> None:
    """At 150 s the pipeline's run took 989 steps, 0.77 of an epoch (154 ms a step). With 300 s the
    first epoch's 1,285 steps took 179 s (139 ms), the second's 115 s (89 ms): a later epoch
    repeats the batch shapes the first compiled for. Bucketed to multiples of 64, the first epoch
    runs at the later epochs' pace (1,363 steps in 120 s, 88 ms) and the run gets 1,726 steps in
    the same 150 s, 1.75x the unbucketed."""
    d, b, t = (_stage(run)["facts"] for run in RUNS)
    assert d["steps"] == 989 and round(d["steps"] / d["epoch_steps"], 2) == 0.77
    assert round(1000 * d["seconds"] / d["steps"]) == 154
    e1, e2, e3 = t["epochs"]
    assert (e1["steps"], e2["steps"], e3["steps"], t["steps"]) == (1285, 1285, 68, 2638)
    assert round(1000 * e1["seconds"] / e1["steps"]) == 139 and round(1000 * e2["seconds"] / e2["steps"]) == 89
    b1 = b["epochs"][0]
    assert (b1["steps"], round(b1["seconds"]), b["steps"]) == (1363, 120, 1726)
    assert round(1000 * b1["seconds"] / b1["steps"]) == 88 and round(b["steps"] / d["steps"], 2) == 1.75


def test_offline_both_beat_the_4k_drafter() -> None:
    """The same 200 held-out prompts (39,879 answer tokens on this card), k=4 teacher-forced: 3.11 at
    150 s, 3.36 bucketed, 3.44 at 300 s; the 4,000-sample drafter's six epochs (the curve's H100
    lease) 3.19. Walked at k=3, as the engine drafts: 2.41 / 2.61 / 2.68 against 2.49."""
    want = {"default": (3.11, 2.41), "bucket64": (3.36, 2.61), "train300": (3.44, 2.68)}
    for run, (k4, k3) in want.items():
        e = _eval(run)
        assert e["held_out_samples"] == 200 and e["held_out_tokens"] == 39879 and e["k"] == 4
        assert round(e["mean_acceptance_length"], 2) == k4 and round(e["walk"]["3"]["mean_acceptance_length"], 2) == k3
    assert [round(x, 2) for x in _eval("train300")["per_position"]] == [0.78, 0.64, 0.54, 0.48]
    four_k = next(p for p in _json("curve.json", CURVE)["points"] if p["samples"] == 4000)
    assert (four_k["steps"], four_k["epochs"], four_k["capped"]) == (1536, 6.0, False)  # six epochs, not the cap
    assert round(four_k["offline"]["mean_acceptance_length"], 2) == 3.19
    for run in ("bucket64", "train300"):
        assert _eval(run)["mean_acceptance_length"] > four_k["offline"]["mean_acceptance_length"] + 0.15
        assert (
            _eval(run)["walk"]["3"]["mean_acceptance_length"] > four_k["offline"]["walk"]["3"]["mean_acceptance_length"]
        )
    # one epoch of 20,000 samples (179 s) already passes six of 4,000
    assert round(1 + sum(_stage("train300")["facts"]["epochs"][0]["heldout_per_position"]), 2) == 3.25


def test_the_pipeline_at_300_s_fits_the_15_minute_budget() -> None:
    """The pipeline ran 638 s with its 192 s training stage (the GGUF's conversion 37 s included);
    the 300 s training stage took 335 s, so the default pipeline is now about 780 s, 13 minutes."""
    whole = _json("default-run.json")["seconds"]
    d, t = _stage("default")["seconds"], _stage("train300")["seconds"]
    assert (round(whole), round(d), round(t)) == (638, 192, 335)
    assert round(whole - d + t) == 780 < 15 * 60
    assert "converting SmolLM2-135M-Instruct.Q4_1.gguf" in (CAPTURE / "job.log").read_text()


def test_the_300_s_drafter_on_held_out_chat_traffic(tmp_path: Path) -> None:
    """24 held-out ShareGPT chat prompts (to EOS, 512 tokens at most), k=3, 1 and 8 streams, one
    repeat: 59.8% / 59.2% acceptance, mean length 2.79 / 2.78 (issue 27's aim 2.3; the 4k drafter
    2.58 / 2.62 on the same prompts on an H100), 1.50x / 1.36x; token-identical 24/24 at one stream.
    The mean length over the measured step cost (2.06x / 2.22x) predicts 1.36x / 1.25x, 9.3% and
    7.8% under the measured speedup (the aim: within 10%)."""
    s = captured_summary(CAPTURE / "chat-summary.json.gz", tmp_path)
    assert s.host.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert json.loads((CAPTURE / "chat-prompts.json").read_text()) == _json("chat-prompts.json", CURVE)
    want = {1: (59.83, 2.79, 1.50, 24, 2.06, 1.36, 9.3), 8: (59.23, 2.78, 1.36, 16, 2.22, 1.25, 7.8)}
    for c, (rate, length, speedup, identical, cost, predicted, under) in want.items():
        f = chat_figures(s, SERVED, c)
        assert f.rate == pytest.approx(rate, abs=0.005) and round(f.length, 2) == length
        assert round(f.speedup, 2) == round(f.paired, 2) == speedup and f.identical == identical
        assert round(f.step_cost, 2) == cost and round(f.length / f.step_cost, 2) == predicted
        assert round(100 * (1 - f.length / f.step_cost / f.paired), 1) == under
    assert [round(measurement(s, "baseline", c).decode_tok_s.mean, 1) for c in (1, 8)] == [465.2, 364.0]


def test_the_prediction_gap_is_the_spread_of_request_rates(tmp_path: Path) -> None:
    """The 9.3% and 7.8% are no engine cost: mean length over step cost is the ratio of mean TPOTs,
    the speedup the ratio of mean per-request rates. Speculative requests spread wider (TPOT 1.6 +-
    0.5 ms against 2.2 +- 0.2 at one stream), so their mean rate lies further above the rate of
    their mean TPOT: by 10.2% / 8.5% (``rate_spread``), which is the whole gap. Paired again by
    today's code, the diagnosis says so."""
    s = captured_summary(CAPTURE / "chat-summary.json.gz", tmp_path)
    for c, spread, said in ((1, 1.102, 10), (8, 1.085, 9)):
        point = LoadPoint(concurrency=c)
        runs = [m for m in s.measurements if m.point == point]
        spec = [m for m in runs if m.config == SERVED]
        p = pair(s.config(SERVED), spec, [m for m in runs if m.config == "baseline"])
        assert round(p.rate_spread, 3) == spread
        assert p.speedup.mean == pytest.approx(p.rate_spread * p.mean_acceptance_length / p.step_cost, rel=1e-9)
        assert f"give {p.mean_acceptance_length / p.step_cost:.2f}x by mean TPOT" in p.diagnosis
        assert f"is {said}% above: the speculative requests' rates spread wider" in p.diagnosis


def _runs() -> dict[str, dict]:
    four_k = _json("n4000-train-stage.json", CURVE)["facts"]
    return {
        "4,000 samples, six epochs (the curve's H100 lease)": four_k,
        "20,000, 150 s (the old default)": _stage("default")["facts"],
        "20,000, 150 s, --length-bucket 64": _stage("bucket64")["facts"],
        "20,000, 300 s (the default now)": _stage("train300")["facts"],
    }


def test_the_studys_picture_is_drawn_from_the_captures(tmp_path: Path) -> None:
    """What ``python studies/draw.py 2026-12-06-training-budget`` draws."""
    (drawn,) = draw(tmp_path)
    assert drawn.name == "h100-train-budget.png" and drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_results_page_shows_the_studys_figures() -> None:
    """The study's tables as the results page draws them from results.toml: held out at k=4, 3.11 at
    150 s, 3.36 bucketed, 3.44 at 300 s (2.96 as served at k=4); the 300 s drafter on chat 1.50x /
    1.36x, its baseline's decode rate beside it."""
    offline, chat = (cells(t) for t in page_tables(HERE))
    assert offline == [
        ["150 s", "4", "0.72 / 0.55 / 0.45 / 0.38", "3.11", "2.60", "2.48 (story)"],
        ["150 s, --length-bucket 64", "4", "0.77 / 0.62 / 0.52 / 0.46", "3.36", "2.87", "2.74 (story)"],
        ["300 s", "4", "0.78 / 0.64 / 0.54 / 0.48", "3.44", "2.96", "2.82 (story)"],
    ]
    assert chat == [
        ["baseline", "c1", "465.2", "–", "–", "–", "–"],
        ["baseline", "c8", "364.0", "–", "–", "–", "–"],
        ["eagle3 300 s (k=3)", "c1", "697.1", "59.8%", "2.79", "1.50x", "24/24"],
        ["eagle3 300 s (k=3)", "c8", "494.2", "59.2%", "2.78", "1.36x", "16/24 ties"],
    ]


def draw(out: Path) -> list[Path]:
    """The study's picture, drawn into ``out`` (studies/draw.py)."""
    return [
        plot_training_time(
            _runs(),
            out / "h100-train-budget.png",
            "Held-out acceptance against training time (H100, the same answers and held-out prompts)",
        )
    ]
