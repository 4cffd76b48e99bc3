"""SGLang's profiler traces (``--profile --engine sglang``), on synthetic traces laid out as SGLang
0.5.17 writes them (its nested ``record_function`` spans: ``scheduler.run_batch`` around every
forward ``step[MODE bs=N]``, ``draft`` / ``draft_extend`` around the drafter's; kernels tied to
their launch, or to the graph replay that launched them, by CUPTI's correlation id): a step is a
forward of the target, the drafter's nested forwards are the drafter's, the tree verification
counts with the drafter, sampling after the forward goes by name, and the categories add up to
the step time. And the profiler's endpoint as SGLang's takes it: the folder in the start body,
the API key on both paths, the trace named ``<id>-TP-0.trace.json.gz``."""

from __future__ import annotations

import gzip
import json
from http.server import BaseHTTPRequestHandler
from itertools import count
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from client_support import local_http
from specrig.engine import get_engine
from specrig.lab.profile import profile_run, summarize_trace


class _Trace:
    """Events of a Chrome trace as torch's profiler writes them on a GPU."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._ids = count(1)

    def span(self, name: str, ts: float, dur: float, cat: str = "user_annotation") -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 7})

    def launch(self, ts: float, kernels: list[tuple[str, float]], api: str = "cudaLaunchKernel") -> None:
        """One launch on the host (a kernel, or a CUDA graph's replay) and the kernels it ran, one after another."""
        c = next(self._ids)
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": api, "ts": ts, "dur": 4, "args": {"correlation": c}}
        )
        t = ts + 10
        for name, dur in kernels:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "ts": t,
                    "dur": dur,
                    "pid": 0,
                    "tid": 7,
                    "args": {"correlation": c},
                }
            )
            t += dur

    def write(self, path: Path) -> Path:
        with gzip.open(path, "wt") as f:
            json.dump({"traceEvents": self.events}, f)
        return path


def _speculative(t: _Trace) -> None:
    """A prefill, then two EAGLE steps: draft (a graph replay), the target's verify (a graph replay),
    the tree's acceptance, the drafter's extend (its own nested forward), the result processed."""
    t.span("scheduler.run_batch", 0, 400)
    t.span("step[EXTEND bs=1 toks=37]", 10, 200)
    t.launch(20, [("nvjet_tst_128x64_gemm", 50), ("flash_fwd_kernel", 30)])
    t.span("draft_extend", 250, 100)
    t.span("step[DRAFT_EXTEND_V2 bs=1]", 260, 80)  # the drafter's forward: not a step of the target
    t.launch(270, [("nvjet_tst_64x8_gemm", 20)])
    for base in (1000, 2000):
        t.span("scheduler.run_batch", base, 800)
        t.span("draft", base + 10, 200)
        t.launch(base + 20, [("flash_fwd_splitkv_kernel", 40), ("nvjet_tst_64x8_gemm", 40)], api="cudaGraphLaunch")
        t.span("step[TARGET_VERIFY bs=1]", base + 250, 300)
        t.span("step[TARGET_VERIFY bs=1]", base + 260, 280, cat="gpu_user_annotation")  # its copy on the GPU's row
        t.launch(
            base + 260,
            [("nvjet_tst_128x64_gemm", 100), ("flash_fwd_kernel", 60), ("rmsnorm_kernel", 10)],
            "cudaGraphLaunch",
        )
        t.launch(base + 560, [("verify_tree_greedy_kernel", 20)])
        t.span("draft_extend", base + 600, 150)
        t.launch(base + 610, [("nvjet_tst_64x8_gemm", 30)])
        t.span("scheduler.process_batch_result", base + 850, 100)


def test_a_speculative_step_is_split_into_the_drafter_and_the_targets_verify(tmp_path: Path) -> None:
    t = _Trace()
    _speculative(t)
    b = summarize_trace([t.write(tmp_path / "1765000000.1-TP-0.trace.json.gz")], "eagle3")
    assert b.device == "GPU" and b.phases and b.steps == 3  # the prefill and two verifies; no drafter forward
    ms = {k: round(v * b.steps, 6) for k, v in b.per_step_ms.items()}  # back to the window's totals
    # draft replays 2 x 80, the drafter's prefill 20, the tree's acceptance 2 x 20, the drafter's extends 2 x 30
    assert ms["drafter"] == pytest.approx(0.280)
    assert ms["target: dense GEMM"] == pytest.approx(0.250) and ms["target: attention"] == pytest.approx(0.150)
    assert ms["target: other ops"] == pytest.approx(0.020)
    busy = 0.280 + 0.250 + 0.150 + 0.020
    assert b.window_ms == pytest.approx(2.95) and ms["GPU idle (host between kernels)"] == pytest.approx(2.95 - busy)
    assert sum(b.per_step_ms.values()) == pytest.approx(b.step_ms, rel=1e-9)


def test_a_plain_step_samples_after_its_forward(tmp_path: Path) -> None:
    t = _Trace()
    for i in range(4):
        base = 1000 * i
        t.span("scheduler.run_batch", base, 500)
        t.span("step[DECODE bs=1]", base + 10, 300)
        t.launch(base + 20, [("nvjet_tst_128x64_gemm", 100), ("flash_fwd_kernel", 50)], api="cudaGraphLaunch")
        t.launch(base + 400, [("top_k_top_p_sampling_from_probs_kernel", 15)])
        t.span("scheduler.process_batch_result", base + 520, 60)
    b = summarize_trace([t.write(tmp_path / "t-TP-0.trace.json.gz")], "baseline")
    assert b.steps == 4 and "drafter" not in b.per_step_ms
    assert b.per_step_ms["sampling"] == pytest.approx(0.015) and b.per_step_ms["target: dense GEMM"] == pytest.approx(
        0.1
    )
    assert sum(b.per_step_ms.values()) == pytest.approx(b.step_ms, rel=1e-9)


class _SGLangProfiler(BaseHTTPRequestHandler):
    """SGLang's profiler paths as far as specrig uses them: the key checked on both, the folder
    taken from the start body, the trace written into it before the stop answers."""

    folder: list[str] = []

    def do_POST(self) -> None:
        if self.headers.get("Authorization") != "Bearer sk-profile":
            self.send_response(401)
        elif self.path == "/start_profile":
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["with_stack"] is False and body["activities"] == ["CPU", "GPU"]
            self.folder.append(body["output_dir"])
            self.send_response(200)
        else:
            t = _Trace()
            _speculative(t)
            t.write(Path(self.folder[-1]) / "1765000000.25-TP-0.trace.json.gz")
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_profiler_is_driven_as_sglang_takes_it(tmp_path: Path) -> None:
    engine = get_engine("sglang")
    assert engine.profile_paths == ("/start_profile", "/stop_profile")
    _, env = engine.profile_launch(str(tmp_path))
    assert env["SGLANG_TORCH_PROFILER_DIR"] == str(tmp_path) and env["SGLANG_PROFILE_WITH_STACK"] == "false"
    folder = tmp_path / "profiles" / "eagle3"
    with local_http(_SGLangProfiler) as url:
        b = profile_run(
            base_url=url,
            paths=engine.profile_paths,
            trace_dir=folder,
            config="eagle3",
            run=lambda: SimpleNamespace(requests=[SimpleNamespace(e2e_s=0.003)], completion_tokens=5),
            headers={"Authorization": "Bearer sk-profile"},
            start_body=engine.profile_start_body(str(folder)),
        )
    assert b.steps == 3 and b.trace_files == [str(folder / "1765000000.25-TP-0.trace.json.gz")]
    assert b.client_ms == pytest.approx(3.0) and b.coverage == pytest.approx(2.95 / 3.0)
