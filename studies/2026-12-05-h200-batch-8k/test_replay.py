"""Issue 27 on the H200, steps per epoch (a real capture, studies/2026-12-05-h200-batch-8k/capture, SOURCES.md):
specrig's trainer on the same 4,000 samples at 8,192-token batches (speculators' step size) and at
32,768 (the recipe's until then), both scored by specrig's offline evaluation on the same 200
held-out prompts, and the 8k drafter served on held-out ShareGPT chat traffic at k=3, one and
eight streams. Fast: every figure the README quotes, recomputed from the captured records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_support import captured_summary, chat_figures, pairing
from specrig.drafter.settings import for_recipe
from specrig.recipe.schema import load_recipe
from specrig.specdec.theory import tokens_per_step

HERE = Path(__file__).resolve().parent
CAPTURE = HERE / "capture"
VARIANTS = HERE.parent / "2026-12-05-gap-variants" / "capture"
CHAT = HERE.parent / "2026-12-04-chat-traffic" / "capture"


def _json(name: str, where: Path = CAPTURE) -> dict:
    return json.loads((where / name).read_text())


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory):
    return captured_summary(CAPTURE / "chat-summary.json.gz", tmp_path_factory.mktemp("h200-batch8k"))


def _length(per_position: list[float], k: int) -> float:
    return 1 + sum(per_position[:k])


def test_both_drafters_learned_from_the_same_data_with_only_the_batch_size_changed() -> None:
    s8, s32 = _json("specrig-8k-train-stage.json"), _json("specrig-32k-train-stage.json")
    assert s8["inputs"]["hidden"] == s32["inputs"]["hidden"] == _json("hidden-stage.json")["key"]
    k8, k32 = s8["inputs"]["knobs"], s32["inputs"]["knobs"]
    assert (k8.pop("batch_tokens"), k32.pop("batch_tokens")) == (8192, 32768) and k8 == k32
    assert (k8["loss_on"], k8["norms"], k8["optimizer"], k8["epochs"], k8["train_seconds"]) == (
        "answer",
        "eagle3.1",
        "adamw",
        6,
        150.0,
    )
    f8, f32 = s8["facts"], s32["facts"]
    assert f8["train_samples"] == f32["train_samples"] == 4000 and f8["train_tokens"] == f32["train_tokens"]
    # four times the steps, each of a quarter of the tokens: 256 an epoch against 64; the 8k run
    # reached the recipe's 150 s cap 46 steps before its sixth epoch ended
    assert [e["steps"] for e in f8["epochs"]] == [256] * 5 + [210] and f8["stopped_early"]
    assert [e["steps"] for e in f32["epochs"]] == [64] * 6 and not f32["stopped_early"]
    assert (f8["steps"], round(f8["seconds"]), f32["steps"], round(f32["seconds"])) == (1490, 152, 384, 83)
    e8, e32 = _json("specrig-8k-offline_eval.json"), _json("specrig-32k-offline_eval.json")
    for key in ("heldout_listing_sha256", "bench_prompts_sha256", "target_config_sha256"):
        assert e8["inputs"][key] == e32["inputs"][key], key
    assert (
        (e8["k"], e8["held_out_samples"], e8["held_out_tokens"])
        == (4, 200, 40014)
        == (
            e32["k"],
            e32["held_out_samples"],
            e32["held_out_tokens"],
        )
    )


def test_8k_batches_close_the_gap_to_speculators_trainer() -> None:
    """Held-out per position at k=4: 8k 0.73 / 0.57 / 0.46 / 0.39 (mean length 3.16), 32k
    0.63 / 0.44 / 0.33 / 0.26 (2.65; the lease before's 32k run of the same settings: 2.67);
    speculators 0.9.0 on its lease's 4,000 samples: 3.14 (studies/2026-12-05-gap-variants/capture)."""
    e8, e32 = _json("specrig-8k-offline_eval.json"), _json("specrig-32k-offline_eval.json")
    assert [round(p, 2) for p in e8["per_position"]] == [0.73, 0.57, 0.46, 0.39]
    assert [round(p, 2) for p in e32["per_position"]] == [0.63, 0.44, 0.33, 0.26]
    assert e8["mean_acceptance_length"] == pytest.approx(_length(e8["per_position"], 4))
    assert round(e8["mean_acceptance_length"], 2) == 3.16 and round(e32["mean_acceptance_length"], 2) == 2.65
    assert (round(_length(e8["per_position"], 3), 2), round(_length(e32["per_position"], 3), 2)) == (2.76, 2.39)
    walk8, walk32 = e8["walk"]["3"]["mean_acceptance_length"], e32["walk"]["3"]["mean_acceptance_length"]
    assert (round(walk8, 2), round(walk32, 2)) == (2.48, 2.11)  # drafts walked as served, k=3
    story8, story32 = e8["bench_prompts"]["mean_acceptance_length"], e32["bench_prompts"]["mean_acceptance_length"]
    assert (round(story8, 2), round(story32, 2)) == (2.52, 2.14)  # the story's prompts, k=4
    before = _json("specrig-eagle31-answer-offline_eval.json", VARIANTS)
    reference = _json("reference-offline_eval.json", VARIANTS)
    assert abs(e32["mean_acceptance_length"] - before["mean_acceptance_length"]) < 0.03  # the control reproduces
    assert e8["mean_acceptance_length"] >= reference["mean_acceptance_length"]  # 3.16 >= 3.14
    # at the same training time as the 32k run (83 s), the 8k run's own held-out check after its
    # third epoch (86 s): 2.86, already past the 32k run's end
    epochs = _json("specrig-8k-train-stage.json")["facts"]["epochs"]
    assert round(sum(e["seconds"] for e in epochs[:3])) == 86
    assert round(_length(epochs[2]["heldout_per_position"], 4), 2) == 2.86


def test_the_8k_drafter_on_chat_traffic_meets_the_aim_and_the_prediction(chat, tmp_path: Path) -> None:
    """Issue 27's aims on held-out chat at k=3: mean length 2.54 / 2.56 (aim 2.3); the speedup
    1.70x / 1.35x at one / eight streams, within 10% of the mean length over the step cost (1.61x,
    1.24x), and of the same over the step cost the 20k drafter's chat bench measured at k=3 a lease
    before (1.55x, 1.40x). The i.i.d. model from position 0 alone falls 12-13% short: this
    drafter's later positions are accepted more often than its first, given the first."""
    s = chat
    old = captured_summary(CHAT / "summary.json.gz", tmp_path)
    config = next(p.config for p in s.pairings)  # the one speculative configuration, k=3
    want = {1: (51.5, 2.54, 1.70, 24, 1.61, 1.55, 1.49), 8: (52.1, 2.56, 1.35, 15, 1.24, 1.40, 1.17)}
    for c, (rate, length, speedup, same, pred, pred_other, iid) in want.items():
        f = chat_figures(s, config, c)
        sc, mal = f.counters, f.length
        assert round(f.rate, 1) == rate
        assert round(mal, 2) == length and mal >= 2.3
        assert round(f.speedup, 2) == speedup == round(f.paired, 2)
        assert f.identical == same
        assert round(mal / f.step_cost, 2) == pred and abs(pred / speedup - 1) < 0.10
        other = pairing(old, "eagle3-trained-k3", c)
        assert round(mal / other.step_cost, 2) == pred_other and abs(pred_other / speedup - 1) < 0.10
        a = sc.accepted_per_position[0] / sc.drafts
        assert round(tokens_per_step(a, 3) / f.step_cost, 2) == iid and iid / speedup < 0.9
        cond = [sc.accepted_per_position[i + 1] / sc.accepted_per_position[i] for i in range(2)]
        assert min(cond) > a  # accepted more often given the one before: not i.i.d.


def test_the_recipe_trains_at_8k_since_this_capture() -> None:
    settings = for_recipe(load_recipe("hopper-sm90"), quick=False)
    assert settings.batch_tokens == _json("specrig-8k-train-stage.json")["inputs"]["knobs"]["batch_tokens"]
