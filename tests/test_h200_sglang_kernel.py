"""sglang-kernel 0.4.5 from source on an H200 host: the first 2.5 minutes of a real build, from the
documented commands (tests/fixtures/h200-sglang-kernel, SOURCES.md), replayed against the current
definition: every edit applied as declared, CMake configured it for sm_90a alone, and the watchdog's
per-unit figures are what the definition's memory model now says."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from specrig.build.cap import host_budget, plan_cap
from specrig.build.definition import load_definition

FIX = Path(__file__).parent / "fixtures" / "h200-sglang-kernel"
STATE = json.loads((FIX / "partial.detached.json").read_text())


def test_every_edit_of_the_definition_was_applied_as_declared_on_the_real_source() -> None:
    d = load_definition("sglang-kernel")
    console = (FIX / "partial.console.log").read_text()
    edits = re.findall(r"^  edit: (\S+): (.*) \((\d+)x\)$", console, flags=re.M)
    assert [(f, why) for f, why, _ in edits if f != "pyproject.toml"] == [(r.file, r.why) for r in d.rewrites]
    for (_, _, n), r in zip(edits, d.rewrites, strict=False):
        assert r.count == 0 or int(n) == r.count
    assert "version 0.4.5 -> 0.4.5+sm90.cu130.torch2110" in console
    configure = gzip.decompress((FIX / "partial.configure.log.gz").read_bytes()).decode()
    assert "Added CUDA NVCC flags for: -gencode;arch=compute_90a,code=sm_90a" in configure
    assert "Configuring done" in configure and "CMake Error" not in configure
    assert "ninja -v -j 14" in configure


def test_the_partial_build_ran_at_the_cap_and_timed_every_unit() -> None:
    assert STATE["done"] == 26 and STATE["total"] == 53 and STATE["jobs_cap"] == 14
    dog = STATE["watchdog"]
    assert dog["peak_jobs"] == 14 and dog["paused_events"] == 0
    units = dog["units"]
    heaviest = max(units, key=lambda n: units[n]["peak_gb"])
    assert heaviest == "es_fp8_blockwise.cu" and units[heaviest]["peak_gb"] == round(dog["peak_job_gb"], 3)
    assert sum(u["peak_gb"] > 8 for u in units.values()) == 3  # the cutlass units; most stay under 2.5
    # the definition's per-compile figure now covers the heaviest unit seen; on that host it caps at 9
    d = load_definition("sglang-kernel")
    assert d.memory.gb_per_compile >= dog["peak_job_gb"]
    cap = plan_cap(d.memory, host_budget(memory_gib=125.3, cores=16), n_archs=1, nvcc_threads=1, units=d.units)
    assert cap.jobs == 9
