"""specrig's own sglang-kernel against the repacked published wheel, op by op, on one H200 (2026-12-04).

Real captures in capture/ beside this file (SOURCES.md): the lease job's sglang-kernel
build for sm_90 at the cap of the per-unit model (14 jobs), then the study's sgl-kernel-ops.py
(beside this file) on both wheels, three interleaved runs each. Replayed here: the comparison the docs quote, the
wheels against the committed record and today's plan, and the cap that build ran at."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.builder.cap import host_budget, plan_cap
from specrig.builder.definition import load_definition
from specrig.builder.plan import BuildRequest, make_plan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OPS = HERE / "capture"
SCRIPT = HERE / "sgl-kernel-ops.py"
ROW = re.compile(r"^\s*(\w+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(.+)$", re.M)


def _compare(*labels: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--compare", str(OPS), *labels], capture_output=True, text=True, timeout=60
    )


def test_the_built_wheel_runs_every_op_as_fast_as_the_published_one() -> None:
    done = _compare("repacked", "built")
    assert done.returncode == 0, done.stderr
    rows = ROW.findall(done.stdout)
    assert len(rows) == 25  # norms, activation, FP8/INT8 GEMMs, quant, MoE routing, tree verify
    assert {r[0] for r in rows} >= {"rmsnorm", "fp8_scaled_mm", "int8_scaled_mm", "verify_tree_greedy"}
    for op, shape, a, b, ratio, _ in rows:
        assert float(ratio) == pytest.approx(float(b) / float(a), abs=0.01), (op, shape)
        assert 0.98 <= float(ratio) <= 1.02, (op, shape)  # the capture: no op apart by more than 1.1%
    assert "geometric mean B/A over 25 op shapes: 1.000 (runs per wheel: A 3, B 3)" in done.stdout
    assert "B = built: 0.4.5+sm90.cu130.torch2110" in done.stdout
    # outputs were compared on the host, where the tensors were (too large to bring back)
    host = ROW.findall((OPS / "compare.txt").read_text())
    assert [(r[0], r[1]) for r in host] == [(r[0], r[1]) for r in rows]
    assert {r[5] for r in host} == {"identical"}


def test_a_label_with_no_runs_is_named_with_the_fix() -> None:
    done = _compare("repacked", "nope")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "no nope-N.json in" in done.stderr and "run the op timing for that wheel first" in done.stderr


def test_the_two_wheels_are_the_recorded_one_and_what_the_plan_builds_today() -> None:
    wheels = dict(line.split()[::-1] for line in (OPS / "wheels.txt").read_text().splitlines())
    # the repack docs/sglang.md gives (`specrig repack ... --build-tag 0sm90`): the same bytes every time
    repacked = "sglang_kernel-0.4.5-0sm90-cp310-abi3-manylinux2014_x86_64.whl"
    assert wheels[f"~/WH/{repacked}"] == "cff99ddceb4c180a6ff9357c103a45b76ef30345343dce0a35f5b8d4ca975508"
    assert (
        "cff99ddceb4c180a6ff9357c103a45b76ef30345343dce0a35f5b8d4ca975508" in (ROOT / "docs" / "sglang.md").read_text()
    )
    plan = make_plan(BuildRequest(target="sglang-kernel", recipe="hopper-sm90", archs=("90",), plan_only=True))
    built = [path for path in wheels if "+sm90" in path]
    name = "sglang_kernel-0.4.5+sm90.cu130.torch2110-cp310-abi3-linux_x86_64.whl"
    assert built == [f"~/.cache/specrig/wheelhouse/{plan.fingerprint}/{name}"]
    # stop 38 built the same inputs to other bytes (sha256 55f90906...): the wheel is not byte-reproducible
    assert not wheels[built[0]].startswith("55f90906")


def test_the_build_ran_at_the_per_unit_cap_and_stayed_under_its_worst_case() -> None:
    console = (OPS / "lease.console.log").read_text()
    d = load_definition("sglang-kernel")
    cap = plan_cap(d.memory, host_budget(memory_gib=125.3, cores=16), n_archs=1, nvcc_threads=1, units=d.units)
    assert f"=> {cap.jobs} parallel jobs (limited by memory); peak estimate {cap.peak_gib:.1f} GiB" in console
    assert cap.jobs == 14
    done = re.search(
        r"done \(pid \d+, started [\d:]+, (\d+)m(\d+)s\)\n.*53/53 compiled\n.*peak ([\d.]+) GiB per job.*, ([\d.]+) GiB in all, 0 pauses",
        console,
    )
    assert done, console
    minutes = int(done[1]) + int(done[2]) / 60
    assert minutes < 9 + 52 / 60  # faster than stop 38's 9 jobs (9 min 52 s): 7 min 56 s
    assert float(done[4]) <= cap.peak_gib and float(done[3]) <= d.memory.heavy_units["fp8_gemm_kernel.cu"]
