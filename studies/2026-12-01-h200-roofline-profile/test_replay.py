"""Where a decode step's time goes on an H200, replayed from the two real profiler traces beside this
file (capture/, SOURCES.md: vLLM 0.26's baselines, cut to 40 engine steps): today's step breakdown
(``specrig.lab.profile``) gives the README's row for the 8B shape, bandwidth-bound, and SmolLM2's
host-bound step, the GPU idle two thirds of it."""

from __future__ import annotations

from pathlib import Path

from specrig.lab.profile import summarize_trace

CAPTURE = Path(__file__).resolve().parent / "capture"
IDLE = "GPU idle (host between kernels)"


def test_the_8b_shape_spends_two_thirds_of_its_step_in_gemm() -> None:
    """The README's row: 40 steps marked, GEMM 3.57, attention 0.41, other ops 0.23, sampling 0.01, GPU
    idle 1.12 ms of a 5.37 ms step (8B bf16 at ~4.8 TB/s: ~3 ms of weights a step at best)."""
    b = summarize_trace([CAPTURE / "llama8b-dummy-baseline-40steps.pt.trace.json.gz"], "baseline")
    assert (b.device, b.steps, round(b.step_ms, 2)) == ("GPU", 40, 5.37)
    ms = {k: round(v, 2) for k, v in b.per_step_ms.items()}
    assert (ms["target: dense GEMM"], ms["target: attention"], ms["target: other ops"]) == (3.57, 0.41, 0.23)
    assert (ms["sampling"], ms[IDLE]) == (0.01, 1.12)
    assert round(b.per_step_ms["target: dense GEMM"] / b.step_ms, 2) == 0.67  # bandwidth-bound


def test_smollm2_idles_the_gpu_two_thirds_of_a_step() -> None:
    """SmolLM2 on an H200 is host-bound: the GPU works 0.9 ms of a 2.7 ms step (GEMM 0.46, attention
    0.26, other ops 0.17) and idles 1.83 ms, 67% of it, as the 520 steps of the README's row did."""
    b = summarize_trace([CAPTURE / "smollm2-baseline-40steps.pt.trace.json.gz"], "baseline")
    assert (b.device, b.steps, round(b.step_ms, 2)) == ("GPU", 40, 2.73)
    ms = {k: round(v, 2) for k, v in b.per_step_ms.items()}
    assert (ms["target: dense GEMM"], ms["target: attention"], ms["target: other ops"], ms[IDLE]) == (
        0.46,
        0.26,
        0.17,
        1.83,
    )
    assert round(b.per_step_ms[IDLE] / b.step_ms, 2) == 0.67
