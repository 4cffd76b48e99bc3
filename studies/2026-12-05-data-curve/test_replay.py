"""The data-size curve (issue 27), replayed from two real captures beside this file (SOURCES.md in
each). Fast: every figure the README quotes, recomputed from the captured records, and the curves
drawn from them.

``capture-h200-curve/``: one H200 ran the pipeline at the recipe's default 20,000 samples (8,192-token
batches, the 150 s training cap), its drafter served on held-out ShareGPT chat traffic at k=3, one and
eight streams, then drafters on the first 1,000, 4,000 and 16,000 of the same training samples, all
scored offline on the same 200 held-out prompts and the story's five.

``capture-h100-curve-online/``: one H100 lease ran the pipeline at the recipe's 20,000 samples and the
curve's 1,000 and 4,000 (the same prompts as the H200 capture, the answers made again on this card),
then served all three drafters in one chat bench (held-out ShareGPT, chat template, EOS respected,
k=3, one and eight streams) against one baseline.

``python studies/draw.py 2026-12-05-data-curve [OUT_DIR]`` draws the study's pictures from the
captures (h200-curve.png and h100-curve-online.png, beside the README unless OUT_DIR is given)."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import pytest

from replay_support import SERVED, captured_summary, cells, chat_figures, measurement, page_tables
from specrig.drafter.curve import CurvePoint
from specrig.drafter.facts import TrainFacts
from specrig.drafter.stages import StageResult
from specrig.model.offline import OfflineEval
from specrig.report.plots import draw_curve, plot_curve

HERE = Path(__file__).resolve().parent
H200 = HERE / "capture-h200-curve"
H100 = HERE / "capture-h100-curve-online"
SIZES = (1000, 4000, 16000, 20000)
H100_SIZES = (1000, 4000, 20000)


def _json(name: str, folder: Path = H200) -> dict:
    return json.loads((folder / name).read_text())


def _length(per_position: list[float], k: int) -> float:
    return 1 + sum(per_position[:k])


# --- the H200 curve (capture-h200-curve)


def captured_points() -> list[dict]:
    """curve.json's points with the steps, epochs and cap each run's train stage recorded (the
    fields ``specrig drafter --curve`` writes itself since this capture)."""
    points = _json("curve.json")["points"]
    for p in points:
        f = TrainFacts.model_validate(_json(f"n{p['samples']}-train-stage.json")["facts"])
        p |= {"steps": f.steps, "epochs": f.epochs_done(), "capped": bool(f.stopped_early)}
    return points


def online_lengths() -> dict[int, float]:
    return {20000: 2.58}  # the chat bench at one stream (checked below)


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory):
    """The H200's chat bench."""
    return captured_summary(H200 / "chat-summary.json.gz", tmp_path_factory.mktemp("h200-curve"))


def test_every_point_learned_from_the_same_data_with_the_recipes_settings() -> None:
    hidden = _json("hidden-stage.json")["key"]
    knobs = []
    for n in SIZES:
        st = _json(f"n{n}-train-stage.json")
        assert st["inputs"]["hidden"] == hidden
        k = dict(st["inputs"]["knobs"])
        assert k.pop("limit", 20000) == n == st["facts"]["train_samples"]
        knobs.append(k)
    assert all(k == knobs[0] for k in knobs)  # nothing but the sample limit differs
    k = knobs[0]
    assert (k["batch_tokens"], k["loss_on"], k["norms"], k["epochs"], k["train_seconds"]) == (
        8192,
        "answer",
        "eagle3.1",
        6,
        150.0,
    )
    points = _json("curve.json")["points"]
    assert [p["samples"] for p in points] == list(SIZES)
    inputs = [p["offline"]["inputs"] for p in points]
    for key in ("heldout_listing_sha256", "bench_prompts_sha256", "target_config_sha256"):
        assert len({i[key] for i in inputs}) == 1, key
    assert {(p["offline"]["k"], p["offline"]["held_out_samples"], p["offline"]["held_out_tokens"]) for p in points} == {
        (4, 200, 39933)
    }


def test_past_4000_samples_the_time_budget_not_the_data_sets_the_drafter() -> None:
    """Held-out mean length at k=4: 1.79 / 3.20 / 3.14 / 3.14 at 1k / 4k / 16k / 20k samples.
    4,000 samples ran their six epochs (1,536 steps, 136 s); 16,000 and 20,000 reached the 150 s
    cap within about one epoch (1,078 and 1,051 steps): more data, fewer steps, the same drafter."""
    pts = {p["samples"]: p for p in captured_points()}
    k4 = {n: round(p["offline"]["mean_acceptance_length"], 2) for n, p in pts.items()}
    assert k4 == {1000: 1.79, 4000: 3.20, 16000: 3.14, 20000: 3.14}
    k3 = {n: round(_length(p["offline"]["per_position"], 3), 2) for n, p in pts.items()}
    assert k3 == {1000: 1.73, 4000: 2.79, 16000: 2.75, 20000: 2.75}
    walked = {n: round(p["offline"]["walk"]["3"]["mean_acceptance_length"], 2) for n, p in pts.items()}
    assert walked == {1000: 1.60, 4000: 2.50, 16000: 2.42, 20000: 2.43}
    story = {n: round(p["offline"]["bench_prompts"]["mean_acceptance_length"], 2) for n, p in pts.items()}
    assert story == {1000: 1.53, 4000: 2.56, 16000: 2.43, 20000: 2.50}
    assert {n: (p["steps"], p["capped"]) for n, p in pts.items()} == {
        1000: (390, False),
        4000: (1536, False),
        16000: (1078, True),
        20000: (1051, True),
    }
    assert {n: round(p["epochs"], 2) for n, p in pts.items()} == {1000: 6.0, 4000: 6.0, 16000: 1.05, 20000: 0.82}
    assert max(k4[n] for n in (4000, 16000, 20000)) - min(k4[n] for n in (4000, 16000, 20000)) < 0.07
    assert k4[4000] - k4[1000] > 1.0


def test_a_first_epoch_step_costs_more_than_a_later_one() -> None:
    """Why 20,000 samples get fewer steps than 4,000 in the same budget: a step of a first epoch
    (every batch shape new) costs 115-145 ms, one of a later epoch about 74 ms (the per-epoch
    held-out check, about 1.8 s, taken out by fitting the 1k and 4k runs' later epochs)."""
    ep = {n: _json(f"n{n}-train-stage.json")["facts"]["epochs"] for n in SIZES}
    later = {n: sum(e["seconds"] for e in ep[n][1:]) / 5 for n in (1000, 4000)}  # epochs 2-6, 65 and 256 steps
    step = (later[4000] - later[1000]) / (256 - 65)
    check = later[1000] - 65 * step
    assert round(1000 * step) == 74 and round(check, 1) == 1.8
    first = {n: (ep[n][0]["seconds"] - check) / ep[n][0]["steps"] for n in (1000, 4000, 16000)}
    first[20000] = ep[20000][0]["seconds"] / ep[20000][0]["steps"]  # cut by the cap before its check
    assert {n: round(1000 * s) for n, s in first.items()} == {1000: 115, 4000: 115, 16000: 140, 20000: 145}
    assert all(s > 1.5 * step for s in first.values())


def test_the_pipeline_fits_its_budget_at_the_default_20000_samples() -> None:
    log = (H200 / "job.log").read_text()
    assert "JOB drafter done after 703 s" in log  # GGUF, prompts, answers, ids, training, export, evaluation
    assert 703 < 15 * 60
    gen, train = _json("generate-stage.json"), _json("n20000-train-stage.json")
    assert round(gen["seconds"]) == 339 and round(train["seconds"]) == 188
    # the server's start 124 s, then 4.47M answer tokens at 21.5k tok/s in 208 s
    f = gen["facts"]
    assert (round(f["server_ready_s"]), round(f["generate_s"]), f["output_tokens"]) == (124, 208, 4471975)
    run = _json("n20000-run.json")
    assert run["samples"] == {"train": 20000, "heldout": 200}


def test_the_20k_drafter_on_chat_traffic_meets_the_aims(chat) -> None:
    """Held-out chat at k=3: mean length 2.58 / 2.56 (aim 2.3), 1.48x / 1.47x; the mean length over
    this run's measured step cost predicts 1.38x / 1.33x, 6.5% and 9.4% short (aim: within 10%)."""
    want = {1: (52.6, 2.58, 1.48, 24, 1.38), 8: (52.1, 2.56, 1.47, 15, 1.33)}
    for c, (rate, length, speedup, same, pred) in want.items():
        f = chat_figures(chat, "eagle3-trained-k3", c)
        mal = f.length
        assert round(f.rate, 1) == rate
        assert round(mal, 2) == length and mal >= 2.3
        assert round(f.speedup, 2) == speedup == round(f.paired, 2)
        assert f.identical == same
        assert round(mal / f.step_cost, 2) == pred and abs(pred / speedup - 1) < 0.10
        if c == 1:
            assert online_lengths() == {20000: round(mal, 2)}  # what the plot draws as served


def test_a_curve_point_records_its_steps_epochs_and_cap(tmp_path: Path) -> None:
    """What ``specrig drafter --curve`` writes into curve.json since this capture, from a train
    stage's facts (here the captured 16k run's), and curve.png drawn beside a curve.json."""
    st = _json("n16000-train-stage.json")
    train = StageResult("train", st["key"], tmp_path, st["seconds"], False, TrainFacts.model_validate(st["facts"]))
    offline = OfflineEval.model_validate(_json("curve.json")["points"][2]["offline"])
    d = CurvePoint.of(16000, tmp_path / "eagle3-n16000", offline, train).as_dict()
    assert (d["samples"], d["steps"], round(d["epochs"], 2), d["capped"], d["train_tokens"]) == (
        16000,
        1078,
        1.05,
        True,
        8234558,
    )
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"quick": False, "points": [d]}))
    drawn = draw_curve(curve, "one point")
    assert drawn == tmp_path / "curve.png" and drawn.stat().st_size > 0


# --- the H100 curve served (capture-h100-curve-online)


def _points(folder: Path = H100) -> dict[int, dict]:
    return {p["samples"]: p for p in _json("curve.json", folder)["points"]}


@pytest.fixture(scope="module")
def h100_chat(tmp_path_factory: pytest.TempPathFactory):
    """The H100's chat bench: three drafters and one baseline."""
    return captured_summary(H100 / "chat-summary.json.gz", tmp_path_factory.mktemp("h100-curve-online"))


def h100_online_lengths(chat, c: int = 1) -> dict[int, float]:
    return {n: chat_figures(chat, f"eagle3-n{n}-k3", c).length for n in H100_SIZES}


def test_the_same_prompts_and_settings_as_the_h200_curve() -> None:
    """The prompts, the generation's settings and every training knob are the H200 capture's; only
    the trainer scripts' digest differs (train_batches.py split off since) and the answers, which
    this card generated again (39,469 held-out answer tokens against the H200's 39,933)."""
    for stage in ("prompts-stage.json", "generate-stage.json", "hidden-stage.json"):
        assert _json(stage, H100)["key"] == _json(stage, H200)["key"], stage
    for n in H100_SIZES:
        here, there = _json(f"n{n}-train-stage.json", H100), _json(f"n{n}-train-stage.json", H200)
        assert {k: v for k, v in here["inputs"].items() if k != "scripts"} == {
            k: v for k, v in there["inputs"].items() if k != "scripts"
        }
        assert here["facts"]["train_samples"] == n
    pts = _points()
    assert {(p["offline"]["held_out_samples"], p["offline"]["held_out_tokens"]) for p in pts.values()} == {(200, 39469)}
    assert json.loads((H100 / "chat-prompts.json").read_text()) == json.loads((H200 / "chat-prompts.json").read_text())


def test_offline_the_curve_reproduces_on_another_card() -> None:
    """Held-out mean length at k=4: 1.78 / 3.19 / 3.09 here, 1.79 / 3.20 / 3.14 on the H200; the
    steps the same but the 20k's (1,045 against 1,051, both stopped by the 150 s cap)."""
    here, there = _points(), _points(H200)
    k4 = {n: round(here[n]["offline"]["mean_acceptance_length"], 2) for n in H100_SIZES}
    assert k4 == {1000: 1.78, 4000: 3.19, 20000: 3.09}
    for n in H100_SIZES:
        assert abs(here[n]["offline"]["mean_acceptance_length"] - there[n]["offline"]["mean_acceptance_length"]) < 0.06
    assert {n: (here[n]["steps"], here[n]["capped"]) for n in H100_SIZES} == {
        1000: (390, False),
        4000: (1536, False),
        20000: (1045, True),
    }


def test_served_each_drafter_accepts_what_offline_said(h100_chat) -> None:
    """Online mean length at k=3, one / eight streams: 1k 1.66 / 1.69, 4k 2.58 / 2.62, 20k 2.55 /
    2.50: each between its offline walk at k=3 (as the engine drafts) and the teacher-forced
    figure, and the order of the offline curve kept (4k at least the 20k, both far above 1k)."""
    want = {1000: (22.0, 1.66, 23.1, 1.69), 4000: (52.6, 2.58, 53.9, 2.62), 20000: (51.6, 2.55, 50.0, 2.50)}
    pts = _points()
    for n, (r1, l1, r8, l8) in want.items():
        one, eight = chat_figures(h100_chat, f"eagle3-n{n}-k3", 1), chat_figures(h100_chat, f"eagle3-n{n}-k3", 8)
        assert (round(one.rate, 1), round(one.length, 2), round(eight.rate, 1), round(eight.length, 2)) == (
            r1,
            l1,
            r8,
            l8,
        )
        off = pts[n]["offline"]
        walked, forced = off["walk"]["3"]["mean_acceptance_length"], 1 + sum(off["per_position"][:3])
        for f in (one, eight):
            assert walked <= f.length <= forced, n
    c1 = h100_online_lengths(h100_chat)
    assert c1[4000] >= c1[20000] - 0.05 and min(c1[4000], c1[20000]) - c1[1000] > 0.8
    assert c1[20000] >= 2.3 and c1[4000] >= 2.3  # the aim at k=3 on chat traffic


def test_speedups_one_repeat_each(h100_chat) -> None:
    """0.74x / 0.78x (1k: a step 2.3x a plain one for 1.7 tokens), 1.50x / 1.45x (4k), 1.28x /
    1.07x (20k). The 4k and 20k drafters are the same network (only their weights differ), yet
    their steps cost 1.80x and 2.30x at one stream in this repeat: the 20k's requests spread wider
    (its TPOT standard deviation 0.8 ms against 0.3), so the prediction from mean length and step
    cost misses its measured speedup by 14% / 12% where the 4k's is within 4.5% / 9.3%. Every answer
    at one stream token-identical to the baseline's."""
    want = {
        1000: ((0.74, 2.30, 24), (0.78, 2.28, 16)),
        4000: ((1.50, 1.80, 24), (1.45, 2.00, 15)),
        20000: ((1.28, 2.30, 24), (1.07, 2.65, 15)),
    }
    miss = {}
    for n, loads in want.items():
        for c, (speedup, cost, same) in zip((1, 8), loads, strict=True):
            f = chat_figures(h100_chat, f"eagle3-n{n}-k3", c)
            assert (round(f.speedup, 2), round(f.step_cost, 2), f.identical) == (speedup, cost, same), (n, c)
            assert round(f.paired, 2) == speedup
            miss[n, c] = round(1 - f.length / f.step_cost / f.speedup, 3)
    assert miss == {
        (1000, 1): 0.02,
        (1000, 8): 0.05,
        (4000, 1): 0.045,
        (4000, 8): 0.093,
        (20000, 1): 0.136,
        (20000, 8): 0.119,
    }
    spread = {
        n: statistics.stdev(r.tpot_ms for r in measurement(h100_chat, f"eagle3-n{n}-k3", 1).requests)
        for n in H100_SIZES
    }
    assert (round(spread[4000], 1), round(spread[20000], 1)) == (0.3, 0.8)


def test_the_20k_drafter_across_two_leases(h100_chat, chat) -> None:
    """The recipe's default drafter trained again on another card: its acceptance on the same 24
    chat prompts reproduces (H200 2.58 / 2.56, here 2.55 / 2.50), its one-repeat speedup does not
    (1.48x / 1.47x there, 1.28x / 1.07x here)."""
    for c in (1, 8):
        there, here = chat_figures(chat, "eagle3-trained-k3", c), chat_figures(h100_chat, "eagle3-n20000-k3", c)
        assert abs(here.length - there.length) < 0.07, c
        assert there.speedup - here.speedup > 0.15, c
    assert chat.workload.model_dump() == h100_chat.workload.model_dump()  # the same requests


def test_the_studys_pictures_are_drawn_from_the_captures(tmp_path: Path) -> None:
    """What ``python studies/draw.py 2026-12-05-data-curve`` draws: both curves, offline and served."""
    drawn = draw(tmp_path)
    assert [p.name for p in drawn] == ["h200-curve.png", "h100-curve-online.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in drawn)


def test_the_results_page_shows_the_studys_figures() -> None:
    """The study's tables as the results page draws them: the curve one row per point, 1.79 / 3.20 /
    3.14 / 3.14 at k=4 (as served 1.63 / 2.71 / 2.62 / 2.64); the 20k drafter on chat on the H200
    (1.48x / 1.47x) and the three drafters on the H100 (the 4k 1.50x / 1.45x)."""
    curve, h200, h100 = (cells(t) for t in page_tables(HERE))
    assert curve == [
        ["1,000 samples", "4", "0.43 / 0.20 / 0.10 / 0.06", "1.79", "1.63", "1.53 (story)"],
        ["4,000 samples", "4", "0.74 / 0.58 / 0.48 / 0.41", "3.20", "2.71", "2.56 (story)"],
        ["16,000 samples", "4", "0.73 / 0.56 / 0.46 / 0.39", "3.14", "2.62", "2.43 (story)"],
        ["20,000 samples", "4", "0.73 / 0.56 / 0.46 / 0.39", "3.14", "2.64", "2.50 (story)"],
    ]
    assert h200[2:] == [
        ["eagle3-trained-k3", "c1", "816.1", "52.6%", "2.58", "1.48x", "24/24"],
        ["eagle3-trained-k3", "c8", "769.9", "52.1%", "2.56", "1.47x", "15/24 ties"],
    ]
    assert [r[0::5] for r in h100[2:]] == [
        ["eagle3-n1000-k3", "0.74x"],
        ["eagle3-n1000-k3", "0.78x"],
        ["eagle3-n4000-k3", "1.50x"],
        ["eagle3-n4000-k3", "1.45x"],
        ["eagle3-n20000-k3", "1.28x"],
        ["eagle3-n20000-k3", "1.07x"],
    ]


def draw(out: Path) -> list[Path]:
    """The study's two pictures, drawn into ``out`` (studies/draw.py)."""
    h200 = plot_curve(
        captured_points(),
        out / "h200-curve.png",
        "hopper-sm90 (one H200): acceptance against training data, 150 s of training",
        online_lengths(),
        SERVED,
    )
    with tempfile.TemporaryDirectory() as tmp:
        h100 = plot_curve(
            list(_points().values()),
            out / "h100-curve-online.png",
            "hopper-sm90 on one H100: acceptance against training data, offline and served",
            h100_online_lengths(captured_summary(H100 / "chat-summary.json.gz", Path(tmp))),
            SERVED,
        )
    return [h200, h100]
