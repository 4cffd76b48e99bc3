"""One drafter on two engines, replayed from REAL captures of one H200 (issue 24, 2026-12-02; in
capture/ beside this file, SOURCES.md): the summaries ``specrig bench`` wrote there, through the kit, for a
drafter trained on that H200 (2,500 samples, 73 s of training) and served at k = 1..3 by
SGLang 0.5.17 and vLLM 0.26.0 on the story's five prompts, plus vLLM on 40 held-out
ShareGPT prompts with answers ending at EOS. And from a second lease (2026-12-03): the pair
on chat traffic, one drafter trained there (2,000 samples, 45 s of training) served at k=2 by
SGLang and by vLLM on the same 40 held-out ShareGPT prompts with EOS respected, at 1 and 8
streams (``pair-*``); and four acceptance-only vLLM runs side by side at k=1 (``gap-*``: CUDA
graphs, eager, the V1 model runner, no prefix caching). Paths of that host are rewritten
($SPECRIG_CACHE_DIR, RUN/, HOST, ~/); nothing else is changed.

What CI can check without the GPU: today's code still reads those runs, puts them side by
side (``specrig report``), and the figures the docs quote are the captured ones."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from rich.console import Console

from specrig.lab.results import RunSummary
from specrig.report.compare import write_comparison

FIXTURES = Path(__file__).resolve().parent / "capture"
RUNS = ("sglang-story", "vllm-story", "vllm-sharegpt-eos")
PAIR = ("pair-sglang-sharegpt-eos", "pair-vllm-sharegpt-eos")
GAPS = ("gap-vllm-graphs", "gap-vllm-eager", "gap-vllm-v1runner", "gap-vllm-noprefix")


def captured(name: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((FIXTURES / f"{name}.summary.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def runs() -> dict[str, RunSummary]:
    return {n: captured(n) for n in RUNS}


def pairing(s: RunSummary, config: str, concurrency: int):
    return next(p for p in s.pairings if p.config == config and p.point.concurrency == concurrency)


def test_the_same_drafter_on_both_engines(runs: dict[str, RunSummary]) -> None:
    sgl, vllm = runs["sglang-story"], runs["vllm-story"]
    assert (sgl.engine, vllm.engine) == ("sglang", "vllm")
    # the same trained weights: SGLang serves the copy whose aux ids make it feed the same positions
    drafters = {e: {c.drafter for c in s.configs if c.drafter} for e, s in (("sglang", sgl), ("vllm", vllm))}
    [v] = drafters["vllm"]
    [s] = drafters["sglang"]
    assert Path(s).name.startswith(Path(v).name + "-for-sglang-")
    for k in (1, 2, 3):
        a, b = pairing(sgl, f"eagle3-k{k}", 1), pairing(vllm, f"eagle3-k{k}", 1)
        assert len(a.per_position) == len(b.per_position) == k
        # SGLang accepts more at position 0 (0.34-0.38 against 0.30-0.31: docs/sglang.md says what is known)
        assert a.per_position[0] > b.per_position[0]
        # and its speculative step costs more: vLLM's k=1 pays at one stream, no SGLang k does
        assert a.speedup is not None and b.speedup is not None and a.speedup.mean < b.speedup.mean
    assert pairing(vllm, "eagle3-k1", 1).speedup.mean > 1.0 > pairing(sgl, "eagle3-k1", 1).speedup.mean


def test_sglang_divergences_are_classified_from_token_ids(runs: dict[str, RunSummary]) -> None:
    for p in runs["sglang-story"].pairings:
        ll = p.lossless
        assert ll is not None and ll.identical + len(ll.divergences) == ll.compared
        for d in ll.divergences:
            assert d.unit == "token" and d.target is not None and d.target.verdict == "near-tie", d
    # vLLM at one stream: token-identical
    assert all(p.lossless and p.lossless.identical == p.lossless.compared for p in runs["vllm-story"].pairings)


def test_chat_traffic_stops_at_eos(runs: dict[str, RunSummary]) -> None:
    eos = runs["vllm-sharegpt-eos"]
    assert eos.workload.stop_at_eos and eos.workload.dataset == "sharegpt" and eos.workload.num_prompts == 40
    lengths = {r.completion_tokens for m in eos.measurements for r in m.requests}
    assert min(lengths) < eos.workload.max_tokens and max(lengths) <= eos.workload.max_tokens
    assert pairing(eos, "eagle3-k2", 1).per_position[0] > pairing(runs["vllm-story"], "eagle3-k2", 1).per_position[0]


def test_the_three_runs_side_by_side(runs: dict[str, RunSummary], tmp_path: Path) -> None:
    out = write_comparison([(Path(n), runs[n]) for n in RUNS], tmp_path, Console(file=io.StringIO(), width=200))
    md = out.read_text() if out.is_file() else (tmp_path / "compare.md").read_text()
    for n in RUNS:
        assert f"| {n} " in md
    assert md.count("eagle3-k") >= 14 and (tmp_path / "acceptance.png").is_file()


@pytest.fixture(scope="module")
def pair() -> tuple[RunSummary, RunSummary]:
    sgl, vllm = (captured(n) for n in PAIR)
    return sgl, vllm


def test_chat_pair_is_one_drafter_on_the_same_prompts(pair: tuple[RunSummary, RunSummary]) -> None:
    sgl, vllm = pair
    assert (sgl.engine, vllm.engine) == ("sglang", "vllm")
    for s in pair:
        w = s.workload
        assert w.stop_at_eos and w.dataset == "sharegpt" and w.num_prompts == 40 and w.max_tokens == 256
        assert sorted({m.point.concurrency for m in s.measurements}) == [1, 8]
    ids = [{r.prompt_id for m in s.measurements for r in m.requests} for s in pair]
    assert len(ids[0]) == 40 and ids[0] == ids[1]
    [s_drafter] = {c.drafter for c in sgl.configs if c.drafter}
    [v_drafter] = {c.drafter for c in vllm.configs if c.drafter}
    assert Path(s_drafter).name.startswith(Path(v_drafter).name + "-for-sglang-")
    for c in (1, 8):
        a, b = pairing(sgl, "eagle3-trained-k2", c), pairing(vllm, "eagle3-trained-k2", c)
        assert a.k == b.k == 2 and len(a.per_position) == len(b.per_position) == 2
        # the same weights accept alike on both engines (0.44 / 0.46 against 0.42 at position 0)
        assert abs(a.per_position[0] - b.per_position[0]) < 0.06, (c, a.per_position, b.per_position)
        # and SGLang's speculative step costs more: it loses more at both loads
        assert a.speedup is not None and b.speedup is not None and a.speedup.mean < b.speedup.mean < 1.05


def test_chat_pair_divergences_are_token_level_and_classified(pair: tuple[RunSummary, RunSummary]) -> None:
    sgl, vllm = pair
    for s in pair:
        for p in s.pairings:
            ll = p.lossless
            assert ll is not None and ll.compared == 40 and ll.identical + len(ll.divergences) == ll.compared
            for d in ll.divergences:
                assert d.unit == "token" and d.target is not None and d.target.verdict == "near-tie", d
    # vLLM at one stream is token-identical to its baseline; SGLang diverges, every time at a near-tie
    assert pairing(vllm, "eagle3-trained-k2", 1).lossless.identical == 40
    assert pairing(sgl, "eagle3-trained-k2", 1).lossless.divergences


def test_gap_runs_change_only_what_they_name(tmp_path: Path) -> None:
    gaps = {n: captured(n) for n in GAPS}
    rates = {n: pairing(s, "eagle3-trained-k1", 1).acceptance_rate for n, s in gaps.items()}
    # the V1 runner and prefix caching leave acceptance as it is; eager mode (no CUDA graphs) accepts more
    assert rates["gap-vllm-v1runner"] == rates["gap-vllm-noprefix"] == rates["gap-vllm-graphs"]
    assert rates["gap-vllm-eager"] > rates["gap-vllm-graphs"] + 0.03
    out = write_comparison([(Path(n), s) for n, s in gaps.items()], tmp_path, Console(file=io.StringIO(), width=200))
    md = out.read_text() if out.is_file() else (tmp_path / "compare.md").read_text()
    assert all(f"| {n} " in md for n in GAPS)


def test_a_report_over_many_runs_keeps_its_acceptance_plot_readable(tmp_path: Path) -> None:
    """Five runs (18 series): the legend used to squash the plot to a strip; now the figure
    grows with its legend and the i.i.d. references are left out."""
    from PIL import Image

    from specrig.report.plots import plot_acceptance

    five = [captured(n) for n in (*RUNS, *PAIR)]
    many = [(f"{i} {p.config} {p.point.label}", p) for i, s in enumerate(five) for p in s.pairings]
    few = many[:2]
    assert len(many) == 18
    big, small = plot_acceptance(many, tmp_path / "many.png", "t"), plot_acceptance(few, tmp_path / "few.png", "t")
    assert big and small
    (w1, h1), (w2, h2) = Image.open(big).size, Image.open(small).size
    assert w1 == w2 and h1 > h2 * 1.1
