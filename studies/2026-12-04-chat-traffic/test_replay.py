"""Issue 27 item 3 on the H200 (a real capture, studies/2026-12-04-chat-traffic/capture, SOURCES.md): specrig's
20k-sample drafter served on held-out ShareGPT chat traffic (``bench --chat --stop-at-eos``).

Fast: the captured summary's figures recomputed from its own counters and requests (acceptance,
mean length, per position, speedup, the step cost, the prediction from acceptance and step cost,
and the lossless count from the token ids), as the README quotes them.

Engine (the real SmolLM2 and the cpu recipe's vLLM environment, as the other engine tests): the
H200 run's lossless check rendered the chat prompts as raw text and called five of the c8
divergences real losses. The target asked again with the chat template, as the server rendered
the prompts, finds every one a numerical near-tie; asked the old way, it repeats the false loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_support import captured_summary, measurement, pairing
from specrig.specdec.theory import tokens_per_step

CAPTURE = Path(__file__).resolve().parent / "capture"


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory):
    return captured_summary(CAPTURE / "summary.json.gz", tmp_path_factory.mktemp("h200-chat"))


def test_the_chat_bench_figures_follow_from_the_captured_counters(summary) -> None:
    s = summary
    w = s.workload
    assert w.chat and w.stop_at_eos and w.dataset == "sharegpt" and w.num_prompts == 40 and w.max_tokens == 512
    assert all(m.server_generation_tokens == m.completion_tokens for m in s.measurements)  # the counters are ours
    # 12 of the 40 answers end at the target's EOS; the other 28 run to the 512-token cap (a 135M
    # model often loops): 388.7 tokens an answer at one stream
    lengths = [r.completion_tokens for r in measurement(s, "baseline", 1).requests]
    assert sum(n < 512 for n in lengths) == 12 and sum(lengths) / 40 == pytest.approx(388.7, abs=0.05)
    want = {  # (config, streams): acceptance %, mean length, speedup, identical answers (as the README)
        ("eagle3-trained-k1", 1): (46.9, 1.47, 1.08, 40),
        ("eagle3-trained-k1", 8): (46.9, 1.47, 1.25, 28),
        ("eagle3-trained-k3", 1): (22.8, 1.68, 1.05, 40),
        ("eagle3-trained-k3", 8): (23.8, 1.71, 0.97, 27),
    }
    for (config, c), (rate, length, speedup, same) in want.items():
        m, b, p = measurement(s, config, c), measurement(s, "baseline", c), pairing(s, config, c)
        sc = m.spec_counters
        assert sc is not None and sc.k == p.k
        assert 100 * sc.accepted_tokens / sc.draft_tokens == pytest.approx(rate, abs=0.05)
        assert 1 + sc.accepted_tokens / sc.drafts == pytest.approx(length, abs=0.005)
        ratio = m.decode_tok_s.mean / b.decode_tok_s.mean  # decode tok/s per stream, spec over baseline
        assert ratio == pytest.approx(speedup, abs=0.005) and p.speedup is not None
        assert p.speedup.mean == pytest.approx(ratio)
        ids = {r.prompt_id: r.token_ids for r in b.requests}
        assert sum(r.token_ids == ids[r.prompt_id] for r in m.requests) == same
        # the prediction from acceptance (p_0, i.i.d.) and the step cost measured in the same run
        a = sc.accepted_per_position[0] / sc.drafts
        predicted = tokens_per_step(a, sc.k) / p.step_cost
        assert abs(predicted / p.speedup.mean - 1) < 0.02  # 1.06, 1.24, 1.06, 0.96 (the README)


def test_one_k_predicts_the_other_within_the_noise(summary) -> None:
    """The per-draft-token cost measured at one k predicts the speedup at the other (the
    diagnosis's 'k=1 may do better'): 1.19x predicted for k=1 at one stream (1.08x measured),
    1.14x at eight (1.25x measured)."""
    for c, predicted, measured in ((1, 1.19, 1.08), (8, 1.14, 1.25)):
        p3, p1 = pairing(summary, "eagle3-trained-k3", c), pairing(summary, "eagle3-trained-k1", c)
        sc = measurement(summary, "eagle3-trained-k3", c).spec_counters
        a = sc.accepted_per_position[0] / sc.drafts
        cost = max(p3.step_cost - 1, 0) / 3
        assert tokens_per_step(a, 1) / (1 + cost) == pytest.approx(predicted, abs=0.005)
        assert p1.speedup.mean == pytest.approx(measured, abs=0.005)


def _reexplain(summary, tmp_path: Path, chat: bool, config: str | None = None):
    from specrig.env.make import make_env
    from specrig.lab.divergence import explain
    from specrig.model.folder import prepare_model
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe("cpu")
    env = make_env(recipe, recipe.engine["vllm"].env)
    model = prepare_model(recipe, env)
    given = json.loads((CAPTURE / "lossless-target-margins-in.json").read_text())["contexts"]
    assert all("chat" not in c for c in given)  # captured before the fix: raw rendering
    from specrig.model.datasets import load_sharegpt

    texts = {p.id: p.text for p in load_sharegpt(60)}
    pairs = [p for p in summary.pairings if p.point.concurrency == 8 and config in (None, p.config)]
    base = [m for m in summary.measurements if m.config == "baseline"]
    out = explain(
        pairs, summary.measurements, base, prompts=texts, python=str(env.python), model_path=str(model.path),
        work=tmp_path, chat=chat,
    )  # fmt: skip
    return {p.config: p.lossless for p in out}


@pytest.mark.engine
@pytest.mark.slow
def test_the_target_with_the_chat_template_finds_only_near_ties(summary, tmp_path: Path) -> None:
    chat = _reexplain(summary, tmp_path / "chat", chat=True)
    for config, n in (("eagle3-trained-k1", 12), ("eagle3-trained-k3", 13)):
        ll = chat[config]
        assert len(ll.divergences) == n and all(d.target is not None for d in ll.divergences)
        assert ll.real_losses == [] and len(ll.near_ties) == n, ll.describe()
    # the H200 run's way (the chat prompt as raw text): the same false loss comes back (k=1's pairing alone)
    raw = _reexplain(summary, tmp_path / "raw", chat=False, config="eagle3-trained-k1")
    worst = max(raw["eagle3-trained-k1"].real_losses, key=lambda d: d.target.spec_rank)
    assert (worst.prompt_id, worst.position, worst.target.spec_rank) == ("sharegpt-WEz8bB1_154", 6, 19)
