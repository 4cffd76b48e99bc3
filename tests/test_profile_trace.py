"""The step breakdown on real GPU traces (captures from the H200, named as such in
tests/fixtures/h200/SOURCES.md): vLLM 0.26's V2 model runner marks steps, kernels
are put in categories by name and launch, GPU idle is the rest; the categories add
up to the step time, and the two captures read as what they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from specrig.core.errors import BenchError
from specrig.lab.profile import summarize_trace

H200 = Path(__file__).parent / "fixtures" / "h200"


def _share(b, key: str) -> float:
    return b.per_step_ms.get(key, 0.0) / b.step_ms


def test_a_host_bound_model_idles_the_gpu() -> None:
    b = summarize_trace([H200 / "smollm2-baseline-40steps.pt.trace.json.gz"], "baseline")
    assert b.device == "GPU" and b.steps == 40 and 2.0 < b.step_ms < 4.0
    assert sum(b.per_step_ms.values()) == pytest.approx(b.step_ms, rel=0.02)  # kernels on two streams may overlap
    assert _share(b, "GPU idle (host between kernels)") > 0.5  # SmolLM2 on an H200: the host sets the pace
    assert b.per_step_ms["target: dense GEMM"] > b.per_step_ms["target: attention"] > 0


def test_a_bandwidth_bound_model_spends_its_step_in_gemm() -> None:
    b = summarize_trace([H200 / "llama8b-dummy-baseline-40steps.pt.trace.json.gz"], "baseline")
    assert b.steps == 40 and 4.5 < b.step_ms < 6.0  # 8B bf16 at ~4.8 TB/s: ~3 ms of weights a step at best
    assert sum(b.per_step_ms.values()) == pytest.approx(b.step_ms, rel=0.02)  # kernels on two streams may overlap
    assert _share(b, "target: dense GEMM") > 0.6 and _share(b, "GPU idle (host between kernels)") < 0.3
    assert 0 < b.per_step_ms["sampling"] < 0.1  # the gumbel sampler's kernel, by name


def test_a_trace_without_steps_is_named(tmp_path: Path) -> None:
    f = tmp_path / "empty.json"
    f.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}')
    with pytest.raises(BenchError, match="no engine steps"):
        summarize_trace([f], "x")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(BenchError, match="cannot read the profiler trace"):
        summarize_trace([bad], "x")
