"""flash-attn 2.8.3 built for sm_90 on an H200 host from the documented commands, and its check there
against torch's SDPA: the real captures (capture/ beside this file, SOURCES.md) replayed against the
current definition, checker and cap model. (The checker itself on the CPU: tests/test_build_check.py.)"""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from pathlib import Path

from module_support import load_file
from replay_support import cells, page_tables
from specrig.builder.cap import host_budget, plan_cap
from specrig.builder.check import render_check
from specrig.builder.definition import CHECKS_DIR, load_definition
from specrig.builder.wheelhouse import fingerprint

FIX = Path(__file__).resolve().parent / "capture"
CHECK = json.loads((FIX / "check.json").read_text())
MANIFEST = json.loads((FIX / "manifest.json").read_text())


def _checker():
    return load_file(CHECKS_DIR / "flash_attn_sdpa.py")


def test_every_case_of_the_h200_check_passes_under_the_current_criterion() -> None:
    mod = _checker()
    assert CHECK["device"] == "NVIDIA H200" and CHECK["capability"] == "9.0"
    assert CHECK["torch"] == "2.11.0+cu130" and CHECK["flash_attn"] == "2.8.3"
    assert {(c["dtype"], c["hdim"], c["causal"]) for c in CHECK["cases"]} == set(mod.CASES)
    for c in CHECK["cases"]:
        for t in ("out", "dq", "dk", "dv"):
            e = c[t]
            limit = mod.FACTOR * max(e["plain"], e["sdpa"]) + mod.ATOL
            assert 0 < e["flash"] <= limit, (c["dtype"], c["hdim"], c["causal"], t, e)
    # every library in the wheel holds SASS for sm_90 only: one cubin per .cu unit (72)
    assert CHECK["sass"] == {"flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so": {"sm_90": 72}}


def test_the_check_renders_as_a_table_with_its_speed() -> None:
    text = render_check(CHECK)
    assert "12 of 12 cases pass" in text
    assert "sm_90 x72" in text
    assert re.search(r"bfloat16\s+128\s+True\s+out", text)
    assert re.search(r"flash\s+forward 0\.875 \(314\)", text)
    assert "FAIL" not in text
    broken = json.loads(json.dumps(CHECK))
    broken["cases"][0]["dq"]["ok"], broken["cases"][0]["ok"] = False, False
    assert "FAIL" in render_check(broken) and "11 of 12 cases pass" in render_check(broken)


def test_the_captured_wheel_is_the_current_definitions_build() -> None:
    """The wheel's recorded inputs are what build/flash-attn.toml pins today, its fingerprint is their
    hash, and the record, the wheelhouse manifest and the check name the same bytes."""
    d = load_definition("flash-attn")
    inputs = MANIFEST["inputs"]
    assert inputs["source_sha256"] == d.source.sha256
    assert inputs["version"] == d.version and inputs["archs"] == ["90"]
    assert {k: v for k, v in inputs["env"].items() if k in d.env} == d.env
    assert inputs["env"]["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert fingerprint(inputs) == MANIFEST["fingerprint"]
    record = tomllib.loads((FIX / "built.toml").read_text())["wheel"][0]
    assert record["sha256"] == MANIFEST["sha256"] == CHECK["wheel"]["sha256"]
    assert record["fingerprint"] == MANIFEST["fingerprint"]
    assert record["filename"] == CHECK["wheel"]["filename"] == MANIFEST["filename"]
    assert record["version"] == "2.8.3+sm90.cu130.torch2110"


def test_the_build_ran_at_the_cap_and_the_watchdog_saw_every_unit() -> None:
    state = json.loads((FIX / "detached.json").read_text())
    assert state["status"] == "done" and state["done"] == state["total"] == 73
    dog = state["watchdog"]
    assert dog["peak_jobs"] == state["jobs_cap"] == MANIFEST["build"]["jobs"] == 14
    assert dog["job_commands"] == 73 and dog["paused_events"] == 0
    assert dog["peak_job_gb"] < state["gb_per_job_estimate"] == 7.0
    # the cap model on that host's memory and cores gives the 14 jobs it ran with
    d = load_definition("flash-attn")
    cap = plan_cap(d.memory, host_budget(memory_gib=125.3, cores=16), n_archs=1, nvcc_threads=1, units=73)
    assert cap.jobs == 14
    # with the complete build's measured peak, the next build there runs more jobs, not fewer
    again = plan_cap(
        d.memory,
        host_budget(memory_gib=125.3, cores=16),
        n_archs=1,
        nvcc_threads=1,
        units=73,
        measured_gb_per_job=dog["peak_job_gb"],
        measured_complete=True,
    )
    assert again.jobs == 15
    # the build log: 73 compile commands, every nvcc one for sm_90 only, no download attempted
    log = gzip.decompress((FIX / "build.log.gz").read_bytes()).decode()
    steps = re.findall(r"^\[(\d+)/73\] (\S+)", log, flags=re.M)
    assert len(steps) == 73
    nvcc = [line for line in log.splitlines() if re.match(r"^\[\d+/73\] \S*nvcc ", line)]
    assert len(nvcc) == 72 and all("-gencode arch=compute_90,code=sm_90 --threads 1" in x for x in nvcc)
    assert "Guessing wheel URL" not in log and "urlopen" not in log


def test_the_results_page_shows_the_build() -> None:
    """The study's table as the results page draws it: 19 min 56 s at 14 jobs, 73 units, 6.56 GiB a
    job at most, 60.1 GiB at once."""
    (build,) = (cells(t) for t in page_tables(FIX.parent))
    assert build == [["flash-attn 2.8.3+sm90.cu130.torch2110", "sm_90", "19 min 56 s", "14", "73", "6.56", "60.1"]]
