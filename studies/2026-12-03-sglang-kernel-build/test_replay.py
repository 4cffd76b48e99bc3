"""sglang-kernel 0.4.5 built from source on an H200 host from the documented commands, and SGLang 0.5.17
served on it, replayed from the real captures beside this file (SOURCES.md in each).

``capture-h200-sglang-kernel/``: the first 2.5 minutes of one build and the whole of a second,
replayed against the current definition: every edit applied as declared, CMake configured it for
sm_90a alone, the wheel is what the definition pins today, holds sm_90 SASS only and loaded in
SGLang's environment, and the cap model bounds every unit the watchdog measured.

``capture-h200-sglang-serve/``: the summaries of SGLang served on the built wheel (the steps of
study.toml), through the current summary model and report. With real acceptance (draft_model) the
built wheel accepts exactly what the repacked published one did on 2026-12-02, and two runs of one
wheel minutes apart differ by more than a wheel could explain."""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from pathlib import Path

import pytest
from rich.console import Console

from specrig.builder.cap import host_budget, plan_cap
from specrig.builder.definition import load_definition
from specrig.builder.wheelhouse import fingerprint
from specrig.core.errors import BuildError
from specrig.lab.results import RunSummary
from specrig.lock.built import BuiltRecord
from specrig.report.compare import write_comparison
from specrig.report.render import write_report

HERE = Path(__file__).resolve().parent
FIX = HERE / "capture-h200-sglang-kernel"
SERVE = HERE / "capture-h200-sglang-serve"
BUILT = "sglang-kernel 0.4.5+sm90.cu130.torch2110 sha256:55f9090638ab"
STATE = json.loads((FIX / "partial.detached.json").read_text())
MANIFEST = json.loads((FIX / "complete.manifest.json").read_text())
UNITS = MANIFEST["build"]["units"]
H200 = host_budget(memory_gib=125.3, cores=16)


def test_every_edit_of_the_definition_was_applied_as_declared_on_the_real_source() -> None:
    d = load_definition("sglang-kernel")
    console = (FIX / "partial.console.log").read_text()
    edits = re.findall(r"^  edit: (\S+): (.*) \((\d+)x\)$", console, flags=re.M)
    assert [(f, why) for f, why, _ in edits if f != "pyproject.toml"] == [
        (r.file, r.why) for r in d.rewrites_for(("90",))
    ]
    for (_, _, n), r in zip(edits, d.rewrites_for(("90",)), strict=False):
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


def test_the_whole_build_ran_at_the_cap_and_the_definition_bounds_every_unit() -> None:
    b = MANIFEST["build"]
    console = (FIX / "complete.console.log").read_text()
    assert "[53/53] compiled, 9m52s elapsed" in console
    assert "9 jobs at once (cap 9)" in console and "0 pauses" in console
    assert b["jobs"] == b["peak_parallel_jobs"] == 9 and b["seconds"] == pytest.approx(593.4)
    # one unit holds the build: the FP8 GEMM took 502 of its 593 s, at 18.2 GiB, while the median unit
    # stayed at 2.4 GiB: no uniform per-job figure fits both
    longest = max(UNITS, key=lambda n: UNITS[n]["seconds"])
    assert longest == "fp8_gemm_kernel.cu" and UNITS[longest]["seconds"] > 500
    assert UNITS[longest]["peak_gb"] == pytest.approx(b["peak_job_gb"], abs=1e-3) == 18.207
    d = load_definition("sglang-kernel")
    for name, unit in UNITS.items():
        assert d.memory.heavy_units.get(name, d.memory.gb_per_compile) >= unit["peak_gb"], name
    # at the 9 jobs it ran, the model's worst case bounds what the watchdog saw at once (33.9 GiB)
    ran = plan_cap(d.memory, H200, n_archs=1, nvcc_threads=1, units=d.units, jobs=9)
    assert ran.peak_gib >= b["peak_total_gb"]
    # on that host the model allows 14 jobs: the 8 heavy units (sm_120a added one) and 6 plain ones fit in 102.5 GiB
    cap = plan_cap(d.memory, H200, n_archs=1, nvcc_threads=1, units=d.units)
    assert (cap.jobs, cap.limited_by) == (14, "memory") and cap.peak_gib <= cap.usable_gib
    assert cap.heaviest[0] == ("fp8_gemm_kernel.cu", 18.5)
    # a 24 GiB box cannot hold the FP8 GEMM's one job: refused before it starts, by name of the need
    with pytest.raises(BuildError, match="one job needs about 18.5 GiB"):
        plan_cap(d.memory, host_budget(memory_gib=24, cores=2), n_archs=1, nvcc_threads=1, units=d.units)


def test_a_complete_builds_unit_peaks_cap_the_next_build_there() -> None:
    d = load_definition("sglang-kernel")
    measured = {n: u["peak_gb"] for n, u in UNITS.items()}
    again = plan_cap(
        d.memory,
        H200,
        n_archs=1,
        nvcc_threads=1,
        units=d.units,
        measured_gb_per_job=MANIFEST["build"]["peak_job_gb"],
        measured_complete=True,
        measured_units=measured,
    )
    # every unit as measured (no rounding up): the 16 heaviest fit in 101.3 GiB, as many as the cores
    assert again.jobs == again.memory_jobs == 16 and "units one by one" in again.gb_per_job_source
    assert again.peak_gib == pytest.approx(101.33, abs=0.01)
    # the peak per job alone, as the record held it before units were kept, would cap it at 5
    uniform = plan_cap(
        d.memory,
        H200,
        n_archs=1,
        nvcc_threads=1,
        units=d.units,
        measured_gb_per_job=MANIFEST["build"]["peak_job_gb"],
        measured_complete=True,
    )
    assert uniform.jobs == 5


def test_the_wheel_is_the_current_definitions_build_and_holds_sm90_sass_only() -> None:
    d = load_definition("sglang-kernel")
    inputs = MANIFEST["inputs"]
    assert inputs["source_sha256"] == f"tree:{d.source.tree_sha256}"
    pins = {x.name: f"tree:{x.tree_sha256}" for x in d.dependencies if x.tree_sha256}
    assert inputs["dependencies"] == pins
    assert [tuple(r) for r in inputs["rewrites"]] == [
        (r.file, r.pattern, r.replacement) for r in d.rewrites_for(("90",))
    ]
    assert "cmake.define.SPECRIG_CUDA_GENCODES=-gencode=arch=compute_90a,code=sm_90a" in inputs["config_settings"]
    assert fingerprint(inputs) == MANIFEST["fingerprint"]
    record = BuiltRecord.model_validate(tomllib.loads((FIX / "complete.built.toml").read_text())).wheel[0]
    assert (record.sha256, record.fingerprint, record.filename) == (
        MANIFEST["sha256"],
        MANIFEST["fingerprint"],
        MANIFEST["filename"],
    )
    assert record.version == "0.4.5+sm90.cu130.torch2110" and record.archs == ("90",)
    listing = (FIX / "complete.wheel.txt").read_text()
    assert f"{MANIFEST['sha256']}  " in listing and f" {MANIFEST['size']} " in listing
    # common_ops once, as sm90/; no FA3, FlashMLA, InfLLM-V2 or sm100/ copy; every cubin sm_90
    libs = re.findall(r"^(sgl_kernel/\S+\.so)\s", listing, flags=re.M)
    assert libs == ["sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"]
    assert re.findall(r"Counter\(\{(.*)\}\)", listing) == ["('sass', 90): 47", "('sass', 90): 1"]


def test_sglangs_environment_loaded_the_built_wheel_with_its_ops() -> None:
    text = (FIX / "complete.which-wheel.txt").read_text()
    version, path = text.splitlines()[0].split(" ", 1)
    assert version == "0.4.5+sm90.cu130.torch2110" and path.endswith("site-packages/sgl_kernel/__init__.py")
    # the speculative verify op registered; the sparse FA2 op the definition leaves out did not
    assert text.splitlines()[1] == "True False"


# --- SGLang served on the built wheel (capture-h200-sglang-serve)


def _summary(name: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((SERVE / f"{name}.summary.json.gz").read_bytes()))


def _pairing(s: RunSummary, config: str, level: int):
    return next(p for p in s.pairings if p.config == config and p.point.concurrency == level)


def test_the_built_wheel_accepts_what_the_published_one_did() -> None:
    s = _summary("sgl-built-draft")
    assert s.engine == "sglang" and s.host.gpus[0].name == "NVIDIA H200"
    p = _pairing(s, "draft_model", 1)
    # 2026-12-02, the repacked published wheel, same command (studies/2026-12-02-sglang-h200): 93.8% accepted, mean
    # length 4.75, per position 97.0 / 94.8 / 92.4 / 90.9%; every divergence from the baseline a near-tie
    assert round(p.acceptance_rate * 100, 1) == 93.8 and round(p.mean_acceptance_length, 2) == 4.75
    assert [round(x * 100, 1) for x in p.per_position] == [97.0, 94.8, 92.4, 90.9]
    assert p.lossless.compared == 5 and p.lossless.identical == 0
    assert {d.target.verdict for d in p.lossless.divergences} == {"near-tie"}
    assert p.speedup.mean == pytest.approx(1.30, abs=0.005)


def test_two_runs_of_one_wheel_differ_by_more_than_a_wheel_could_explain() -> None:
    """Both eagle3-random runs served the built wheel (the bench installs what the record names, and
    the build had recorded it): their spread is this host's run-to-run noise at one repeat."""
    first, second = _summary("sgl-repacked"), _summary("sgl-built")
    for s in (first, second):
        for p in s.pairings:
            assert p.acceptance_rate == 0.0 and p.mean_acceptance_length == 1.0  # a random drafter
    a, b = _pairing(first, "eagle3-random-k2", 1).speedup.mean, _pairing(second, "eagle3-random-k2", 1).speedup.mean
    assert (round(a, 2), round(b, 2)) == (0.60, 0.37)
    assert all(p.speedup.n == 1 for s in (first, second) for p in s.pairings)  # one repeat: no interval
    logs = [
        gzip.decompress((SERVE / f"{n}.server-eagle3-random-k2.log.gz").read_bytes()).decode()
        for n in ("sgl-repacked", "sgl-built")
    ]
    for log in logs:  # the same server both times: CUDA graphs captured, no kernel fallback logged
        assert "Capture draft decode CUDA graph end" in log and "fallback" not in log.lower()


def test_the_report_names_the_built_wheel_it_served(tmp_path: Path) -> None:
    s = _summary("sgl-built").model_copy(update={"built": [BUILT]})
    assert _summary("sgl-built").built == []  # captured before summaries named their built wheels
    write_report(tmp_path / "run", s)
    text = (tmp_path / "run" / "report.md").read_text()
    assert f"Built wheels served: `{BUILT}`." in text
    write_comparison(
        [(tmp_path / "a", s), (tmp_path / "b", _summary("sgl-repacked"))],
        tmp_path / "cmp",
        Console(file=None, width=200, record=True),
    )
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"- `{tmp_path / 'a'}`: hopper-sm90 / sglang; built wheels: {BUILT}" in md
    assert f"- `{tmp_path / 'b'}`: hopper-sm90 / sglang\n" in md
