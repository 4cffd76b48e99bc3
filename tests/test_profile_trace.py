"""The step breakdown of a profiled run (``specrig.lab.profile``): on real GPU traces (vLLM 0.26's
V2 model runner on an H200, the record of studies/2026-12-01-h200-roofline-profile, read from its
capture) steps are marked, kernels are put in categories by name and launch, GPU idle is the rest,
and the categories add up to the step time; a trace without steps and a profiler endpoint that
answers late or not at all are named errors. (What the two traces say: that study's replay.)"""

from __future__ import annotations

import socket
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from client_support import local_http
from specrig.core.errors import BenchError
from specrig.lab.profile import CATEGORIES, profile_run, summarize_trace

# real traces of two baselines on an H200, cut to 40 engine steps: the record of a study
H200 = Path(__file__).resolve().parents[1] / "studies" / "2026-12-01-h200-roofline-profile" / "capture"


@pytest.mark.parametrize("trace", ["smollm2-baseline-40steps", "llama8b-dummy-baseline-40steps"])
def test_a_real_trace_breaks_each_step_into_categories_that_add_up(trace: str) -> None:
    b = summarize_trace([H200 / f"{trace}.pt.trace.json.gz"], "baseline")
    assert b.device == "GPU" and b.steps == 40 and b.step_ms > 0  # every step of the cut marked
    assert set(b.per_step_ms) <= set(CATEGORIES) and all(v >= 0 for v in b.per_step_ms.values())
    assert b.per_step_ms["target: dense GEMM"] > 0 and b.per_step_ms["target: attention"] > 0
    assert b.per_step_ms["sampling"] > 0  # the gumbel sampler's kernel, by name
    assert sum(b.per_step_ms.values()) == pytest.approx(b.step_ms, rel=0.02)  # kernels on two streams may overlap


def test_a_trace_without_steps_is_named(tmp_path: Path) -> None:
    f = tmp_path / "empty.json"
    f.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}')
    with pytest.raises(BenchError, match="no engine steps"):
        summarize_trace([f], "x")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(BenchError, match="cannot read the profiler trace"):
        summarize_trace([bad], "x")


class _SlowStop(BaseHTTPRequestHandler):
    """A profiler endpoint whose stop answers late, as vLLM's does on a busy CPU (129 s in a CI run)."""

    def do_POST(self) -> None:
        if self.path == "/stop_profile":
            time.sleep(3)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_stop():
    with local_http(_SlowStop) as url:
        yield url


def test_a_stop_that_answers_late_is_a_named_error_not_a_traceback(tmp_path: Path, slow_stop: str) -> None:
    """The bench keeps the measurement and says why the breakdown is missing: a BenchError, which
    the caller turns into a warning (httpx's own timeout ended the whole bench with a traceback)."""
    paths = ("/start_profile", "/stop_profile")
    with pytest.raises(BenchError) as err:
        profile_run(
            base_url=slow_stop, paths=paths, trace_dir=tmp_path, config="c", run=lambda: None, stop_timeout_s=0.5
        )
    assert (
        "/stop_profile did not answer within 0.5 s" in err.value.message and "--first-token-timeout" in err.value.hint
    )

    # the run's own failure is the one reported, not the stop's
    def failing() -> None:
        raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        profile_run(base_url=slow_stop, paths=paths, trace_dir=tmp_path, config="c", run=failing, stop_timeout_s=0.5)


def test_a_dead_profiler_endpoint_is_a_named_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BenchError, match="/start_profile did not answer"):
        profile_run(
            base_url=f"http://127.0.0.1:{port}",
            paths=("/start_profile", "/stop_profile"),
            trace_dir=tmp_path,
            config="c",
            run=lambda: None,
        )
