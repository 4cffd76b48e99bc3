"""End to end against a real vLLM server on the CPU (the embedded default):
`specrig bench` makes the environment from the lock, converts the shipped GGUF,
launches real servers (baseline, ngram, draft_model, eagle3) and measures them.

The acceptance figures are recomputed here by hand from the raw Prometheus
expositions the bench saved, with a plain line reader independent of specrig."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.slow]

MAX_TOKENS = 48


def bench(*args: str, timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", "bench", *args],
        capture_output=True, text=True, timeout=timeout, env=os.environ | {"COLUMNS": "160"},
    )  # fmt: skip


def counter(text: str, name: str, model: str = "smollm2", position: str | None = None) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name + "{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[line.index("{") : line.index("}")]))
        if labels.get("model_name") != model or (position is not None and labels.get("position") != position):
            continue
        total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    results = tmp_path_factory.mktemp("bench") / "run"
    proc = bench("--spec", "all", "--max-tokens", str(MAX_TOKENS), "--results", str(results))
    return results, proc


def test_bench_spec_all(spec_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    results, proc = spec_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = json.loads((results / "summary.json").read_text())
    names = [c["name"] for c in summary["configs"]]
    assert names == ["baseline", "ngram", "draft_model", "eagle3"]
    for c in summary["configs"]:
        agg = c["aggregate"]
        assert agg["decode_tok_s_mean"] > 0 and agg["completion_tokens"] == 5 * MAX_TOKENS
        assert c["token_count_error"] is not None and c["token_count_error"] <= 0.01
        assert c["server_generation_tokens"] == pytest.approx(agg["completion_tokens"], rel=0.01)
    # the table, the diagnosis lines and the pictures
    for word in ("decode tok/s", "speedup", "baseline", "ngram", "draft_model", "eagle3"):
        assert word in out
    for c in summary["configs"][1:]:
        assert c["diagnosis"] and c["diagnosis"] in out
        assert c["speedup"] is not None and c["speedup"] > 0
    assert (results / "throughput.png").stat().st_size > 10_000
    assert (results / "acceptance.png").stat().st_size > 10_000
    assert (results / "report.md").read_text().count("|") > 20
    bj = json.loads((results / "benchmark.json").read_text())
    assert {b["extra_info"]["config"] for b in bj["benchmarks"]} == set(names)


def test_acceptance_equals_hand_computed_counters(spec_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    results, proc = spec_run
    assert proc.returncode == 0
    summary = json.loads((results / "summary.json").read_text())
    p = "vllm:spec_decode_"
    for c in summary["configs"][1:]:
        before = (results / "logs" / f"metrics-{c['name']}-before.prom").read_text()
        after = (results / "logs" / f"metrics-{c['name']}-after.prom").read_text()
        d = {n: counter(after, p + n) - counter(before, p + n)
             for n in ("num_drafts_total", "num_draft_tokens_total", "num_accepted_tokens_total")}  # fmt: skip
        s = c["spec_stats"]
        assert d["num_drafts_total"] > 0
        assert s["acceptance_rate"] == pytest.approx(d["num_accepted_tokens_total"] / d["num_draft_tokens_total"])
        assert s["mean_acceptance_length"] == pytest.approx(1 + d["num_accepted_tokens_total"] / d["num_drafts_total"])
        k = s["k"]
        pos0 = counter(after, p + "num_accepted_tokens_per_pos_total", position="0") - counter(
            before, p + "num_accepted_tokens_per_pos_total", position="0"
        )
        assert s["per_position"][0] == pytest.approx(pos0 / d["num_drafts_total"])
        assert len(s["per_position"]) == k
        # the per-request stats vLLM returned add up to the same counts
        totals = c["per_request_spec_totals"]
        assert totals["requests"] == 5
        assert totals["draft_tokens"] == pytest.approx(d["num_draft_tokens_total"])
        assert totals["accepted_tokens"] == pytest.approx(d["num_accepted_tokens_total"])
    by = {c["name"]: c for c in summary["configs"]}
    # correctness oracle: the target drafting for itself is always accepted
    assert by["draft_model"]["spec_stats"]["acceptance_rate"] >= 0.99
    assert by["draft_model"]["spec_stats"]["mean_acceptance_length"] == pytest.approx(5.0, abs=0.05)
    # a random-weight EAGLE-3 head is (almost) never right; reported as it is
    assert by["eagle3"]["spec_stats"]["acceptance_rate"] < 0.2
    assert by["eagle3"]["drafter_info"]["trained"] is False
    assert 0.0 < by["ngram"]["spec_stats"]["acceptance_rate"] <= 1.0  # prompt lookup: a real value, text-dependent


def test_crashed_server_ends_with_its_log_tail(tmp_path: Path) -> None:
    proc = bench("--max-tokens", "4", "--results", str(tmp_path / "r"), "--engine-arg=--no-such-flag", timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "exited before it was ready" in out and "last lines of" in out and "no-such-flag" in out


def test_server_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    proc = bench("--max-tokens", "4", "--results", str(tmp_path / "r"), "--startup-timeout", "3", timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "did not become healthy within 3 s" in out and "last lines of" in out


def test_port_in_use_and_unreachable_endpoint(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = bench("--port", str(port), "--results", str(tmp_path / "a"), timeout=120)
        assert proc.returncode == 2 and f"port {port} on 127.0.0.1 is already in use" in proc.stderr
    proc = bench("--endpoint", "http://127.0.0.1:9", timeout=120)
    assert proc.returncode == 9 and "cannot reach --endpoint http://127.0.0.1:9" in proc.stderr


def test_unknown_spec_config_is_named() -> None:
    proc = bench("--spec", "eagle4", timeout=120)
    assert proc.returncode == 2 and "no speculative configuration 'eagle4'" in proc.stderr
    assert "ngram, draft_model, eagle3" in proc.stderr
