"""bench/agree_sglang.py: its computation on made-up rounds, its reading of
SGLang 0.5.17's ``sglang.benchmark.serving`` output line and ``/metrics`` (a real H200 capture, the
record of studies/2026-12-02-sglang-h200), the specrig half against the synthetic server, and the
whole orchestration with a stand-in for SGLang's client. (The GPU run's recorded output, its
comparison recomputed from its raw rounds: studies/2026-12-03-sglang-client-agreement/test_replay.py.)"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import pytest

from module_support import load_file
from specrig.engine.metrics import parse
from specrig.model.datasets import STORY_PROMPTS
from specrig.serve.synthetic import Behaviour, serve_in_process
from specrig.specdec.stats import t_quantile

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "studies" / "2026-12-02-sglang-h200" / "capture"  # a real SGLang 0.5.17 server's /metrics


def _load():
    return load_file(ROOT / "bench" / "agree_sglang.py")


ag = _load()


def test_rounds_alternate_abba() -> None:
    assert [ag.order(r) for r in range(4)] == [
        ("specrig", "sglang"),
        ("sglang", "specrig"),
        ("specrig", "sglang"),
        ("sglang", "specrig"),
    ]


def test_paired_difference_interval_and_verdicts() -> None:
    ours_tok, theirs_tok = [200.0, 202.0, 198.0, 201.0], [200.4, 202.6, 198.2, 201.6]
    ours_tpot, theirs_tpot = [4.50, 4.52, 4.49, 4.51], [4.95, 4.98, 4.93, 4.96]  # +10%: a real disagreement
    ours_ttft, theirs_ttft = [20.0, 26.0, 21.0, 25.0], [21.0, 19.0, 26.0, 22.0]  # noisy: within its noise
    by_client = {"specrig": (ours_tok, ours_tpot, ours_ttft), "sglang": (theirs_tok, theirs_tpot, theirs_ttft)}
    runs = [
        {"round": r, "client": client, "concurrency": 1, "server": None}
        | dict(zip(ag.FIGURES, (values[r] for values in by_client[client]), strict=True))
        for r in range(4)
        for client in ag.order(r)
    ]
    rows = {(row["view"], row["figure"]): row for row in ag.compare(runs)}
    assert set(rows) == {("raw", f) for f in ag.FIGURES}  # no server figures: no "vs_server" rows

    tok = rows[("raw", "output_tok_s")]
    diffs = [t / o - 1 for o, t in zip(ours_tok, theirs_tok, strict=True)]
    half = t_quantile(3) * statistics.stdev(diffs) / 2
    assert tok["specrig"] == ours_tok and tok["sglang"] == theirs_tok
    assert tok["diff_mean"] == pytest.approx(statistics.fmean(diffs))
    assert (tok["diff_low"], tok["diff_high"]) == pytest.approx((tok["diff_mean"] - half, tok["diff_mean"] + half))
    assert tok["tolerance"] == 0.03 and tok["verdict"] == "agree"

    assert rows[("raw", "tpot_ms")]["verdict"] == "disagree"
    assert rows[("raw", "tpot_ms")]["diff_low"] > 0.03

    ttft = rows[("raw", "ttft_ms")]
    assert ttft["noise"]["specrig"] == pytest.approx(6.0 / 23.0)  # (26 - 20) / mean 23
    assert ttft["tolerance"] == pytest.approx(max(6.0 / 23.0, 7.0 / 22.0))
    assert ttft["diff_low"] < -ttft["tolerance"] < ttft["diff_high"]  # the interval straddles the noise:
    assert ttft["verdict"] == "undecided"  # neither shown to agree nor to disagree (more rounds)
    assert ag.overall(list(rows.values())) == "disagree"


def test_verdicts_at_the_edges() -> None:
    iv = ag.mean_interval([0.01, 0.02])
    assert ag.judge(iv, 1.0) == "agree" and ag.judge(iv, 0.001) == "undecided"
    assert ag.judge(ag.mean_interval([0.10, 0.101, 0.102]), 0.03) == "disagree"
    assert ag.judge(ag.mean_interval([0.0]), 0.03) == "undecided"  # one round: no interval


def test_a_bench_serving_line() -> None:
    """A line as sglang/benchmark/serving.py (0.5.17) writes it: the `result` dict of L1772-1825
    (keys "completed", "total_output_tokens", "output_throughput", "mean_ttft_ms", "mean_tpot_ms",
    "server_info" from GET /server_info at L1764), appended with json.dumps at L1875-1880."""
    line = json.dumps(
        {
            "tag": None,
            "backend": "sglang-oai",
            "dataset_name": "custom",
            "request_rate": float("inf"),
            "max_concurrency": 1,
            "sharegpt_output_len": 512,
            "server_info": {"version": "0.5.17", "internal_states": [{}]},
            "duration": 37.1,
            "completed": 16,
            "total_input_tokens": 320,
            "total_output_tokens": 8192,
            "total_output_tokens_retokenized": 8190,
            "request_throughput": 0.43,
            "output_throughput": 220.8,
            "mean_e2e_latency_ms": 2318.0,
            "mean_ttft_ms": 17.2,
            "median_ttft_ms": 17.0,
            "mean_tpot_ms": 4.503,
            "mean_itl_ms": 4.49,
            "concurrency": 1.0,
            "accept_length": None,
        }
    )
    got = ag.from_bench_serving(line)
    assert got == {
        "output_tok_s": 220.8,
        "tpot_ms": 4.503,
        "ttft_ms": 17.2,
        "completed": 16,
        "tokens": 8192,
        "sglang_version": "0.5.17",
    }


def test_server_figures_from_a_real_sglang_0_5_17_capture() -> None:
    """The study's capture/metrics.{before,after}.txt: two streamed 48-token requests between the scrapes."""
    d = H200
    before, after = parse((d / "metrics.before.txt").read_text()), parse((d / "metrics.after.txt").read_text())
    s = ag.server_figures(before, after)
    assert s is not None
    assert s["requests"] == 2 and s["tokens"] == 96
    assert s["ttft_ms"] == pytest.approx(1000 * 0.07460661499999333 / 2)
    assert s["itl_ms"] == pytest.approx(1000 * 0.1305663480001158 / 94)
    assert s["e2e_s"] == pytest.approx(0.2064039420000654)
    assert ag.server_figures(after, after) is None  # no request between: nothing to divide by
    run = {"output_tok_s": 400.0, "tpot_ms": 1.5, "ttft_ms": 40.0, "server": s}
    v = ag.view(run, "vs_server")
    assert v["tpot_ms"] == pytest.approx(1.5 / s["itl_ms"]) and v["ttft_ms"] == pytest.approx(40.0 / s["ttft_ms"])
    assert v["output_tok_s"] == pytest.approx(400.0 * s["e2e_s"] / 96)


def _options(url: str, tmp_path: Path, **kw) -> list[str]:
    args = {"--endpoint": url, "--recipe": "cpu", "--engine": "vllm", "--model": "default", "--max-tokens": "16"}
    args |= {"--num-prompts": "5", "--out": str(tmp_path / "agree.json")} | kw
    return [x for k, v in args.items() for x in (k, v)]


def test_the_specrig_half_reads_its_summary(tmp_path: Path) -> None:
    """specrig's own client in attach mode, against the synthetic server: the summary is read back."""
    with serve_in_process(Behaviour(token_delay_s=0.001)) as srv:
        a = argparse.Namespace(recipe="cpu", engine="vllm", model="default", max_tokens=16, num_prompts=5)
        got = ag.run_specrig(a, srv.base_url, 2, tmp_path, "r0-c2-specrig", "unused")
    assert got["completed"] == 5 and got["tokens"] == 5 * 16
    assert got["output_tok_s"] > 0 and got["tpot_ms"] > 0 and got["ttft_ms"] > 0
    assert got["argv"][:3] == ["-m", "specrig.cli", "bench"] and "--endpoint" in got["argv"]


# A stand-in for `python -m sglang.benchmark.serving`: the flags the script passes, as 0.5.17 declares
# them (cli_main), the custom dataset read as datasets/custom.py reads it, the requests it would send
# (/v1/completions, greedy, ignore_eos, streamed), and the line it appends, with the keys it writes.
STANDIN = """
import argparse, json, time
from concurrent.futures import ThreadPoolExecutor
import httpx
p = argparse.ArgumentParser()
for flag in ("--backend", "--base-url", "--model", "--served-model-name", "--tokenizer", "--dataset-name",
             "--dataset-path", "--extra-request-body", "--output-file"):
    p.add_argument(flag)
for flag in ("--num-prompts", "--sharegpt-output-len", "--max-concurrency", "--warmup-requests"):
    p.add_argument(flag, type=int)
p.add_argument("--request-rate", type=float)
p.add_argument("--disable-tqdm", action="store_true")
a = p.parse_args()
assert a.backend == "sglang-oai" and a.dataset_name == "custom" and a.warmup_requests == 0
rows = [json.loads(x) for x in open(a.dataset_path) if x.strip()]
prompts = [r["conversations"][0]["content"] for r in rows][: a.num_prompts]
def one(prompt):
    body = {"model": a.served_model_name, "prompt": prompt, "max_tokens": a.sharegpt_output_len,
            "temperature": 0.0, "ignore_eos": True, "stream": True} | json.loads(a.extra_request_body)
    st, ttft, last = time.perf_counter(), None, None
    with httpx.stream("POST", a.base_url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                last = time.perf_counter() - st
                ttft = ttft if ttft is not None else last
    return ttft, last
t0 = time.perf_counter()
with ThreadPoolExecutor(a.max_concurrency) as pool:
    out = list(pool.map(one, prompts))
dur = time.perf_counter() - t0
n = a.sharegpt_output_len
line = {"backend": a.backend, "server_info": {"version": "stand-in"}, "duration": dur, "completed": len(out),
        "total_output_tokens": n * len(out), "output_throughput": n * len(out) / dur,
        "mean_ttft_ms": 1000 * sum(t for t, _ in out) / len(out),
        "mean_tpot_ms": 1000 * sum((e - t) / (n - 1) for t, e in out) / len(out)}
open(a.output_file, "a").write(json.dumps(line) + "\\n")
"""


def test_the_whole_orchestration_with_a_stand_in_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "standin" / "sglang" / "benchmark"
    pkg.mkdir(parents=True)
    for init in (pkg.parent / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "serving.py").write_text(STANDIN)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "standin"))
    with serve_in_process(Behaviour(token_delay_s=0.001)) as srv:
        opts = _options(srv.base_url, tmp_path, **{"--rounds": "2", "--concurrency": "2"})
        rc = ag.main([*opts, "--sglang-python", sys.executable])
    doc = json.loads((tmp_path / "agree.json").read_text())
    assert rc in (0, 1) and doc["verdict"] in ("agree", "disagree", "undecided")
    assert [(r["round"], r["client"]) for r in doc["runs"]] == [
        (0, "specrig"),
        (0, "sglang"),
        (1, "sglang"),
        (1, "specrig"),
    ]
    assert {r["completed"] for r in doc["runs"]} == {5} and doc["sglang_version"] == "stand-in"
    assert all(r["server"] is None for r in doc["runs"])  # the synthetic server has no SGLang histograms
    assert [(r["concurrency"], r["figure"]) for r in doc["comparison"]] == [(2, f) for f in ag.FIGURES]
    lines = (tmp_path / "agree.json.runs" / "prompts-c2.jsonl").read_text().splitlines()
    sent = [json.loads(line)["conversations"][0]["content"] for line in lines]
    assert sent == [p.text for p in STORY_PROMPTS]  # the very texts specrig's client sends
