"""``specrig bench --spec ngram --profile`` end to end on the CPU default: a real
vLLM server, its own torch profiler switched on for a few requests after each
configuration's measured run. The breakdown's categories add up to the step
time, the trace covers the client's time for the same requests within 10%, the
raw trace stays in the results folder, profile.png is drawn, the roofline line
is printed, and the ngram pairing's diagnosis quotes the measured step cost.
Two server starts (~3-4 minutes on 2 cores)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.lab.results import load_summary

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_profile_breaks_each_step_down(tmp_path: Path) -> None:
    results = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrig.cli",
            "bench",
            "--spec",
            "ngram",
            "--profile",
            "--max-tokens",
            "32",
            "--num-prompts",
            "2",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=os.environ | {"COLUMNS": "220"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    s = load_summary(results)
    assert [p.config for p in s.profiles] == ["baseline", "ngram"]
    for p in s.profiles:
        assert p.device == "CPU" and p.steps >= 40 and not p.cut
        # the categories add up to the step time (the profiled window over its steps)
        assert sum(p.per_step_ms.values()) == pytest.approx(p.step_ms, rel=1e-6)
        # ... and the trace covers what the client measured for the same requests
        assert p.coverage is not None and 0.9 <= p.coverage <= 1.1, (p.window_ms, p.client_ms)
        assert p.per_step_ms.get("target: dense GEMM", 0) > 0 and p.per_step_ms.get("sampling", 0) > 0
        assert all(Path(f).is_file() and f.startswith(str(results / "profiles")) for f in p.trace_files)
    ngram = next(p for p in s.profiles if p.config == "ngram")
    assert ngram.per_step_ms.get("drafter", 0) > 0  # the n-gram proposer's own phase
    pairing = s.pairings[0]
    assert pairing.measured_step_cost and "profiled: a verification step takes" in pairing.diagnosis
    assert (results / "profile.png").is_file() and "where a decode step's time goes" in proc.stdout
    # the roofline, derived: SmolLM2's 0.27 GB of bf16 weights against this host's measured bandwidth
    assert s.roofline is not None and 0.25 < (s.roofline.weight_gb_per_token or 0) < 0.3
    assert "measured" in s.roofline.source and "roofline at batch 1" in proc.stdout
    assert "Where a decode step's time goes" in (results / "report.md").read_text()
