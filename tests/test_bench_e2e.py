"""End to end against real vLLM servers on the CPU (the embedded default).

1. The suite run by hand, as pytest-benchmark users run it, with ``-k`` that
   deselects the baseline tests: the paired baseline is measured anyway.
   Baseline and ngram at concurrency 1 and 2: percentiles, acceptance in a
   plausible band, client tokens == the engine's counter, acceptance
   recomputed by hand from the raw expositions, the lossless check, one
   pytest-benchmark round per measured run (its wall time). With ``--specrig-profile``:
   each server's own torch profiler is switched on for a few requests after its first
   measured run; the breakdown's categories add up to the step time, the trace covers the
   client's time for the same requests within 10%, the raw trace stays in the results
   folder, profile.png is drawn, the roofline is derived, and the ngram pairing's diagnosis
   quotes the measured step cost (one run serves both: it shares the two server starts).
2. ``specrig bench --endpoint`` attached to a draft_model server (the target
   drafting for itself) that this test starts, with ``--baseline`` taken from
   run 1: the oracle (acceptance >= 0.99, mean length k+1), a speedup still
   computed, and the logs folder made by the bench.
3. A server that cannot start: specrig's message and the log tail, no traceback.

Run 1 launches its servers with an API key (``--specrig-api-key``: each server gets
``--api-key``, every request carries it); run 2's server is started with ``--api-key`` and the
bench attaches to it without the key, with a wrong one (HTTP 401 named, with where to give the
key), then with the right one from ``OPENAI_API_KEY``. Neither key is in any file of the runs.

Three server starts in all (about 6-8 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.lab.results import RunSummary, load_summary

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
MAX_TOKENS = 32
HAND_KEY = "sk-hand-run-7c41e0"  # run 1's servers want it
ATTACH_KEY = "sk-attached-93b2d8"  # run 2's server wants it


def bench(*args: str, timeout: float = 1200, api_key: str | None = None) -> subprocess.CompletedProcess[str]:
    """``specrig bench ARGS`` with ``OPENAI_API_KEY`` set to ``api_key`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env | ({"OPENAI_API_KEY": api_key} if api_key else {}),
    )


def files_holding(folder: Path, secret: str) -> list[str]:
    """The files under ``folder`` whose bytes hold ``secret``."""
    return [str(f) for f in folder.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()]


def counter(text: str, name: str, model: str = "smollm2", position: str | None = None) -> float:
    """A counter summed over series, read with a plain line parser (independent of specrig)."""
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
def hand_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    d = tmp_path_factory.mktemp("bench")
    results = d / "run"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "bench" / "test_decode.py"),  # the serving benchmarks (the harness ceiling has its own tests)
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(ROOT / "bench"),
        "-o",
        "addopts=",
        "-o",
        "testpaths=",
        "-k",
        "not baseline",
        "--specrig-spec",
        "ngram",
        "--specrig-concurrency",
        "1,2",
        "--specrig-max-tokens",
        str(MAX_TOKENS),
        "--specrig-profile",  # the step breakdown, on the same servers
        "--specrig-api-key",  # every launched server wants it
        HAND_KEY,
        "--specrig-results",
        str(results),
        f"--benchmark-storage=file://{d / 'storage'}",
        "--benchmark-autosave",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=os.environ | {"COLUMNS": "200"})
    return results, proc


def _summary(hand_run: tuple[Path, subprocess.CompletedProcess[str]]) -> RunSummary:
    results, proc = hand_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return load_summary(results)


def test_suite_by_hand_pairs_under_k_selection(hand_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    s = _summary(hand_run)
    out = hand_run[1].stdout
    # -k "not baseline" ran no baseline test, yet every spec run has its paired baseline
    assert "test_decode[r0-baseline" not in out
    assert {(m.config, m.point.label) for m in s.measurements} == {
        (c, p) for c in ("baseline", "ngram") for p in ("c1", "c2")
    }
    assert len(s.pairings) == 2 and all(p.speedup and p.speedup.mean > 0 for p in s.pairings)
    for m in s.measurements:
        assert m.completion_tokens == 5 * MAX_TOKENS and len(m.requests) == 5
        assert m.server_generation_tokens == m.completion_tokens and m.counters_own  # the counters are ours
        lat = m.latency
        assert lat.ttft_ms.n == 5 and 0 < lat.ttft_ms.p50 <= lat.ttft_ms.p90 <= lat.ttft_ms.p99  # type: ignore[operator]
        assert lat.tpot_ms.n == 5 and lat.tpot_ms.p50 > 0 and lat.e2e_ms.p99 >= lat.e2e_ms.p50  # type: ignore[operator]
    # one pytest-benchmark round per measured workload run, in the JSON pytest-benchmark wrote
    bj = json.loads((hand_run[0] / "benchmark.json").read_text())
    decode = [b for b in bj["benchmarks"] if b["name"].startswith("test_decode")]
    assert {b["stats"]["rounds"] for b in decode} == {1}
    for b in decode:  # the round is the run's wall time
        m = next(m for m in s.measurements if b["name"].endswith(f"-ngram-{m.point.label}]") and m.config == "ngram")
        assert b["stats"]["mean"] == pytest.approx(m.wall_s, rel=0.05, abs=0.05)
    assert len(decode) == 2  # only the selected tests are benchmarks
    # specrig's table printed at the end of pytest's output
    for word in ("TTFT ms p50/p90/p99", "speedup", "lossless", "ngram", "identical"):
        assert word in out
    assert (hand_run[0] / "report.md").read_text().count("Acceptance per prompt") == 2
    # the servers were started with the key, which no file of the run holds
    plan = json.loads((hand_run[0] / "plan.json").read_text())
    assert plan["engine_args"] == ["--api-key", "***"] and "api_key" not in plan
    argvs = [c.server_argv for c in s.configs]
    assert argvs and all(a[a.index("--api-key") + 1] == "***" for a in argvs), argvs
    assert files_holding(hand_run[0], HAND_KEY) == [] and HAND_KEY not in out + hand_run[1].stderr


def test_profile_breaks_each_step_down(hand_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    results, proc = hand_run
    s = _summary(hand_run)
    assert [p.config for p in s.profiles] == ["baseline", "ngram"]
    for p in s.profiles:
        assert p.device == "CPU" and p.steps >= MAX_TOKENS // 2 and not p.cut  # one request, as long as the answers
        # the categories add up to the step time (the profiled window over its steps)
        assert sum(p.per_step_ms.values()) == pytest.approx(p.step_ms, rel=1e-6)
        # ... and the trace covers what the client measured for the same requests
        assert p.coverage is not None and 0.9 <= p.coverage <= 1.1, (p.window_ms, p.client_ms)
        assert p.per_step_ms.get("target: dense GEMM", 0) > 0 and p.per_step_ms.get("sampling", 0) > 0
        assert all(Path(f).is_file() and f.startswith(str(results / "profiles")) for f in p.trace_files)
    ngram = next(p for p in s.profiles if p.config == "ngram")
    assert ngram.per_step_ms.get("drafter", 0) > 0  # the n-gram proposer's own phase
    one = next(p for p in s.pairings if p.point.concurrency == 1)  # profiled at the first load point
    assert one.measured_step_cost and "profiled: a verification step takes" in one.diagnosis
    assert (results / "profile.png").is_file() and "where a decode step's time goes" in proc.stdout
    # the roofline, derived: SmolLM2's 0.27 GB of bf16 weights against this host's measured bandwidth
    assert s.roofline is not None and 0.25 < (s.roofline.weight_gb_per_token or 0) < 0.3
    assert "measured" in s.roofline.source
    assert "Where a decode step's time goes" in (results / "report.md").read_text()


def test_acceptance_is_real_and_recomputable(hand_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    s = _summary(hand_run)
    ngram = next(p for p in s.pairings if p.point.label == "c1")
    # prompt lookup on explanatory text: measured 46-50% here; a broken counter reads 0 or 1
    assert 0.03 < ngram.acceptance_rate < 0.9  # type: ignore[operator]
    assert ngram.per_position and ngram.per_position[0] >= ngram.per_position[-1]
    # greedy outputs compared token by token; every prompt either identical or a named divergence
    lossless = ngram.lossless
    assert lossless and lossless.compared == 5 and lossless.identical + len(lossless.divergences) == 5
    assert all(d.unit in ("token", "char") and d.position > 0 for d in lossless.divergences)
    logs = hand_run[0] / "logs"
    p = "vllm:spec_decode_"
    for m in (m for m in s.measurements if m.config != "baseline"):
        tag = f"{m.config}-{m.point.label}-r{m.repeat}"
        before, after = (
            (logs / f"metrics-{tag}-before.prom").read_text(),
            (logs / f"metrics-{tag}-after.prom").read_text(),
        )
        d = {
            n: counter(after, p + n) - counter(before, p + n)
            for n in ("num_drafts_total", "num_draft_tokens_total", "num_accepted_tokens_total")
        }
        c = m.spec_counters
        assert c is not None and c.drafts == d["num_drafts_total"] > 0
        assert c.accepted_tokens == d["num_accepted_tokens_total"] and c.draft_tokens == d["num_draft_tokens_total"]
        # the per-request stats vLLM returned add up to the same counts
        assert sum(r.draft_tokens or 0 for r in m.requests) == pytest.approx(d["num_draft_tokens_total"])
        assert sum(r.accepted_tokens or 0 for r in m.requests) == pytest.approx(d["num_accepted_tokens_total"])


def test_attach_with_an_earlier_baseline(
    hand_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    from specrig.engine import get_engine
    from specrig.lab.plan import BenchPlan
    from specrig.recipe.schema import load_recipe
    from specrig.serve.server import Server, free_port

    first = _summary(hand_run)
    plan = BenchPlan.read(hand_run[0] / "plan.json")
    recipe = load_recipe(plan.recipe_path)
    engine = get_engine("vllm")
    spec = recipe.spec["draft_model"]  # the target drafting for itself
    launch = engine.launch(
        python=str(plan.python),
        model_path=str(plan.model_path),
        served_name=plan.served_name,
        port=free_port(),
        recipe=recipe,
        spec=spec,
        drafter=str(plan.model_path),
        extra_args=["--api-key", ATTACH_KEY],
    )
    with Server(
        plan=launch,
        log_path=tmp_path / "server.log",
        health_path="/health",
        served_name=plan.served_name,
        startup_timeout_s=600,
        api_key=ATTACH_KEY,  # its first completion carries it
    ) as server:
        server.start()
        server.wait_ready()
        results = tmp_path / "attached"  # a folder whose logs/ does not exist yet
        # no key, then a wrong one: HTTP 401 named, with where to give the key, before anything runs
        for given, said in (
            (None, "the server wants an API key, and specrig sent none"),
            ("sk-wrong-000000", "the server refused the API key specrig sent"),
        ):
            refused = bench(
                "--endpoint",
                launch.base_url,
                "--spec",
                "draft_model",
                "--baseline",
                str(hand_run[0]),
                "--results",
                str(tmp_path / "refused"),
                api_key=given,
                timeout=300,
            )
            err = refused.stdout + refused.stderr
            assert refused.returncode == 9, err[-4000:]
            assert f"--endpoint {launch.base_url}: GET /v1/models answered HTTP 401 (Unauthorized): {said}" in err
            assert "--api-key KEY" in err and "OPENAI_API_KEY=KEY" in err and "Traceback" not in err
        proc = bench(
            "--endpoint",
            launch.base_url,
            "--spec",
            "draft_model",
            "--baseline",
            str(hand_run[0]),
            "--max-tokens",
            str(MAX_TOKENS),
            "--concurrency",
            "1,2",
            "--results",
            str(results),
            api_key=ATTACH_KEY,  # from the environment, as `vllm bench serve` reads it
        )
        chat = chat_run(launch.base_url, tmp_path / "chat")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert files_holding(results, ATTACH_KEY) == [] and ATTACH_KEY not in out
    assert ATTACH_KEY not in (tmp_path / "server.log").read_text()  # masked when the server stopped
    s = load_summary(results)
    assert [c.name for c in s.configs] == ["draft_model"] and s.model == launch.base_url
    assert len(s.pairings) == 2
    for p in s.pairings:
        # the oracle: every draft token accepted, k+1 tokens per verification step
        assert p.acceptance_rate >= 0.99 and p.mean_acceptance_length == pytest.approx(
            spec.num_speculative_tokens + 1, abs=0.05
        )  # type: ignore[operator]
        assert p.baseline_from == str(hand_run[0]) and p.speedup and p.speedup.mean > 0
        assert p.lossless and p.lossless.compared == 5
    assert {m.point.label for m in s.measurements if m.config == "baseline"} == {"c1", "c2"}  # run 1's, shown
    assert all(m.counters_own for m in s.measurements if m.config == "draft_model")
    assert first.config("ngram") is not None  # run 1 left untouched
    # --chat: the same server through /v1/chat/completions, the prompts rendered by its chat template
    w, raw, templated, m = chat
    assert w.chat and w.stop_at_eos and "sharegpt prompts as chat messages" in w.describe()
    assert [r.prompt_tokens for r in m.requests] == templated and all(
        t > n for t, n in zip(templated, raw, strict=True)
    )
    assert all(len(r.token_ids or []) == r.completion_tokens > 0 for r in m.requests)  # ids from the chat stream
    assert m.server_generation_tokens == m.completion_tokens and m.spec_counters is not None
    c = m.spec_counters
    assert c.draft_tokens > 0 and c.accepted_tokens >= 0.99 * c.draft_tokens  # the oracle, on chat traffic
    assert (results / "logs" / "metrics-draft_model-c1-r0-after.prom").is_file()
    assert (
        "speedup" in proc.stdout and "draft_model" in proc.stdout and "[ok] draft_model.acceptance_rate" in proc.stdout
    )


def chat_run(base_url: str, results: Path) -> tuple:
    """``bench --chat`` on 3 held-out ShareGPT prompts against the running server, and each prompt's
    token count raw and through the chat template, as the server's own /tokenize counts them."""
    import httpx

    from specrig.model.datasets import load_sharegpt

    proc = bench(
        *("--endpoint", base_url, "--spec", "draft_model", "--no-baseline", "--dataset", "sharegpt", "--chat"),
        *("--stop-at-eos", "--num-prompts", "3", "--max-tokens", str(MAX_TOKENS), "--results", str(results)),
        api_key=ATTACH_KEY,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    s = load_summary(results)
    [m] = s.measurements
    texts = {p.id: p.text for p in load_sharegpt(50)}  # the bench's sample (seed 0, held-out split), and more
    auth = {"Authorization": f"Bearer {ATTACH_KEY}"}
    raw, templated = [], []
    for r in m.requests:
        said = {"model": s.served_name, "messages": [{"role": "user", "content": texts[r.prompt_id]}]}
        templated.append(httpx.post(f"{base_url}/tokenize", json=said, headers=auth).json()["count"])
        plain = {"model": s.served_name, "prompt": texts[r.prompt_id]}
        raw.append(httpx.post(f"{base_url}/tokenize", json=plain, headers=auth).json()["count"])
    return s.workload, raw, templated, m


def test_server_that_cannot_start_ends_with_its_log_tail(tmp_path: Path) -> None:
    proc = bench("--max-tokens", "4", "--results", str(tmp_path / "r"), "--engine-arg=--no-such-flag", timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 9, out[-4000:]
    assert "exited before it was ready" in out and "last lines of" in out and "no-such-flag" in out
    assert "Traceback" not in out and "specrig/lab/measure.py" not in out


def test_port_in_use_and_unreachable_endpoint(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = bench("--port", str(port), "--results", str(tmp_path / "a"), timeout=120)
        assert proc.returncode == 2 and f"port {port} on 127.0.0.1 is already in use" in proc.stderr
    proc = bench("--endpoint", "http://127.0.0.1:9", timeout=120)
    assert proc.returncode == 9 and "cannot reach --endpoint http://127.0.0.1:9" in proc.stderr


def test_bad_options_are_named() -> None:
    proc = bench("--spec", "eagle4", timeout=120)
    assert proc.returncode == 2 and "no speculative configuration 'eagle4'" in proc.stderr
    assert "ngram, draft_model" in proc.stderr
    proc = bench("--concurrency", "1,x", timeout=120)
    assert proc.returncode == 2 and "--concurrency: Input should be a valid integer" in proc.stderr
    proc = bench("--slo", "ttft=3", timeout=120)
    assert proc.returncode == 2 and "--slo" in proc.stderr
