"""The story's host is SM120: sglang-kernel 0.4.5 and flash-attn 2.8.3 cross-built whole for sm_120 on
an H200 host (and an earlier flash-attn run stopped at 53 of 73 units when its lease ran out); the real
captures in capture/ beside this file (SOURCES.md), replayed against the current definitions. Nothing
there or here can run sm_120 code: these check what was built, not that it runs."""

from __future__ import annotations

import gzip
import json
import re
import struct
import zipfile
from pathlib import Path

import pytest

from module_support import load_file
from replay_support import cells, page_tables
from specrig.builder.cap import host_budget, plan_cap
from specrig.builder.definition import load_definition
from specrig.builder.plan import BuildRequest, make_plan
from specrig.builder.wheelhouse import fingerprint

HERE = Path(__file__).resolve().parent
SM120 = HERE / "capture"
MANIFEST = json.loads((SM120 / "sglang-kernel.manifest.json").read_text())
UNITS = MANIFEST["build"]["units"]
SM90_UNITS = json.loads(
    (
        HERE.parent / "2026-12-03-sglang-kernel-build" / "capture-h200-sglang-kernel" / "complete.manifest.json"
    ).read_text()
)["build"]["units"]
FLASH = json.loads((SM120 / "flash-attn-partial.detached.json").read_text())
FLASH_WHOLE = json.loads((SM120 / "flash-attn.manifest.json").read_text())


def test_the_sm120_build_made_the_sm120_edits_and_no_other() -> None:
    d = load_definition("sglang-kernel")
    console = (SM120 / "sglang-kernel.console.log").read_text()
    edits = re.findall(r"^  edit: (\S+): (.*) \((\d+)x\)$", console, flags=re.M)
    wanted = d.rewrites_for(("120",))
    assert [(f, why) for f, why, _ in edits if f != "pyproject.toml"] == [(r.file, r.why) for r in wanted]
    assert any("as sm100/" in why for _, why, _ in edits) and not any("as sm90/" in why for _, why, _ in edits)
    assert "version 0.4.5 -> 0.4.5+sm120.cu130.torch2110" in console
    assert "[53/53] compiled, 6m31s elapsed" in console and "9 jobs at once (cap 9)" in console
    # the H200 host cannot run it, so hopper-sm90's record was left alone, and the console says why
    assert "no built-wheel record for this build" in console  # the wording of then (tests/test_build_record.py)


def test_the_wheel_is_what_the_definition_builds_for_sm120_today() -> None:
    d = load_definition("sglang-kernel")
    inputs = MANIFEST["inputs"]
    assert inputs["archs"] == ["120"] and inputs["source_sha256"] == f"tree:{d.source.tree_sha256}"
    assert [tuple(r) for r in inputs["rewrites"]] == [
        (r.file, r.pattern, r.replacement) for r in d.rewrites_for(("120",))
    ]
    assert "cmake.define.SPECRIG_CUDA_GENCODES=-gencode=arch=compute_120a,code=sm_120a" in inputs["config_settings"]
    assert fingerprint(inputs) == MANIFEST["fingerprint"]
    assert MANIFEST["filename"] == "sglang_kernel-0.4.5+sm120.cu130.torch2110-cp310-abi3-linux_x86_64.whl"
    # every nvcc compile of the build got sm_120a alone (torch's CMake also detected the H200 and
    # printed sm_90a for its own flag list, which no target of this build reads)
    log = gzip.decompress((SM120 / "sglang-kernel.build.log.gz").read_bytes()).decode()
    compiles = [line for line in log.splitlines() if "/nvcc " in line and " -c " in line]
    assert len(compiles) == 48  # 47 .cu of common_ops, 1 of spatial_ops
    assert all("-gencode=arch=compute_120a,code=sm_120a" in c and "compute_90" not in c for c in compiles)


def test_the_wheel_holds_sm120_sass_in_sm100_only() -> None:
    sass = (SM120 / "sglang-kernel.sass.txt").read_text()
    assert f"sha256 {MANIFEST['sha256']}" in sass and f" {MANIFEST['size']} bytes" in sass
    libs = dict(re.findall(r"^(sgl_kernel/\S+\.so) (.*)$", sass, flags=re.M))
    # sm100/ is what load_utils loads on any GPU other than compute capability 9.0
    assert libs == {
        "sgl_kernel/sm100/common_ops.abi3.so": "{('sass', 120): 47}",
        "sgl_kernel/spatial_ops.abi3.so": "{('sass', 120): 1}",
    }
    dump = (SM120 / "sglang-kernel.cuobjdump.txt").read_text()
    cubins = re.findall(r"^ELF file\s+\d+: (\S+)\.(sm_\w+)\.cubin$", dump, flags=re.M)
    assert len(cubins) == 48 and {arch for _, arch in cubins} == {"sm_120"}
    assert dump.count("No PTX file found") == 2


def _library(sass: list[int]) -> bytes:
    """A 64-bit ELF file whose ``.nv_fatbin`` section holds one container of these cubins."""
    entries = b"".join(struct.pack("<HHIQ", 2, 0, 32, 0) + bytes(12) + struct.pack("<I", a) for a in sass)
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_at, names_at = 64, 64 + len(fatbin)
    headers_at = names_at + len(names)
    section = lambda name, at, size: struct.pack("<IIQQQQIIQQ", name, 1, 0, 0, at, size, 0, 0, 1, 0)  # noqa: E731
    head = (
        b"\x7fELF"
        + bytes([2, 1, 1])
        + bytes(9)
        + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, headers_at, 0, 64, 0, 0, 64, 3, 1)
    )
    return head + fatbin + names + bytes(64) + section(1, names_at, len(names)) + section(11, data_at, len(fatbin))


def test_the_studys_wheel_listing_writes_what_the_capture_holds(tmp_path: Path, capsys) -> None:
    """wheel_sass.py (beside this file), the listing the captures' *.sass.txt are:
    each library of the wheel with its cubins counted by arch, from the fat binary itself."""
    tool = load_file(HERE / "wheel_sass.py")
    wheel = tmp_path / "sglang_kernel-0.4.5+sm120.cu130.torch2110-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sgl_kernel/sm100/common_ops.abi3.so", _library([120] * 47))
        z.writestr("sgl_kernel/spatial_ops.abi3.so", _library([120]))
        z.writestr("sgl_kernel/host_only.abi3.so", _library([]))
        z.writestr("sgl_kernel/__init__.py", "")
    assert tool.main([str(wheel)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"== {wheel.name} {wheel.stat().st_size} bytes sha256 ")
    libs = dict(re.findall(r"^(sgl_kernel/\S+\.so) (.*)$", said, flags=re.M))
    captured = dict(re.findall(r"^(sgl_kernel/\S+\.so) (.*)$", (SM120 / "sglang-kernel.sass.txt").read_text(), re.M))
    assert libs == captured | {"sgl_kernel/host_only.abi3.so": "{}"}
    assert tool.main([]) == 2


def test_sm120_units_weigh_what_sm90s_did_so_the_cap_model_holds_for_both() -> None:
    d = load_definition("sglang-kernel")
    same = set(UNITS) & set(SM90_UNITS)
    assert len(same) >= 50
    for name in same:  # memory is the template instantiation, not the arch: within 0.5 GiB unit by unit
        assert UNITS[name]["peak_gb"] == pytest.approx(SM90_UNITS[name]["peak_gb"], abs=0.5), name
    for name, unit in UNITS.items():
        assert d.memory.heavy_units.get(name, d.memory.gb_per_compile) >= unit["peak_gb"], name
    # time is not: sm_120a code generation took two thirds of sm_90a's (2,756 against 4,040 unit-seconds)
    seconds = sum(u["seconds"] for u in UNITS.values())
    assert seconds < 0.75 * sum(u["seconds"] for u in SM90_UNITS.values())
    assert max(UNITS, key=lambda n: UNITS[n]["seconds"]) == "fp8_gemm_kernel.cu"
    # at the 9 jobs it ran, the model's worst case bounds what the watchdog saw at once
    ran = plan_cap(d.memory, host_budget(memory_gib=125.3, cores=16), n_archs=1, nvcc_threads=1, units=d.units, jobs=9)
    assert ran.peak_gib >= MANIFEST["build"]["peak_total_gb"]
    # the story's host (128 cores, the recipe's 600 GiB): one job per unit, 51 at once
    story = plan_cap(d.memory, host_budget(memory_gib=600, cores=128), n_archs=1, nvcc_threads=1, units=d.units)
    assert (story.jobs, story.limited_by) == (51, "units")


def test_flash_attn_for_sm120_compiled_53_units_at_the_cap_within_the_estimate() -> None:
    d = load_definition("flash-attn")
    assert (FLASH["status"], FLASH["done"], FLASH["total"], FLASH["jobs_cap"]) == ("stopped", 53, 73, 14)
    dog = FLASH["watchdog"]
    assert dog["peak_jobs"] == 14 and dog["paused_events"] == 0
    assert dog["peak_job_gb"] <= d.memory.gb_per_compile == FLASH["gb_per_job_estimate"]
    units = dog["units"]
    heaviest = max(units, key=lambda n: units[n]["peak_gb"])
    assert heaviest.startswith("flash_bwd_hdim256") and units[heaviest]["peak_gb"] == pytest.approx(6.6, abs=0.01)
    console = (SM120 / "flash-attn-partial.console.log").read_text()
    assert "[53/73] compiled, 7m14s elapsed" in console and "nothing was stored" in console


def test_flash_attn_for_sm120_whole_is_todays_plan_with_sm120_sass_only() -> None:
    """The whole wheel (a later lease, 2026-12-04): 73 of 73 units at the cap, the fingerprint the
    plan for --arch 120 gives today, every nvcc compile for sm_120 alone, 72 sm_120 cubins and nothing
    else in its library (the 73rd unit is flash_api.cpp)."""
    d = load_definition("flash-attn")
    inputs = FLASH_WHOLE["inputs"]
    assert inputs["archs"] == ["120"] and inputs["env"]["FLASH_ATTN_CUDA_ARCHS"] == "120"
    assert inputs["source_sha256"] == d.source.sha256 and inputs["version"] == d.version
    plan = make_plan(BuildRequest(target="flash-attn", recipe="hopper-sm90", archs=("120",), plan_only=True))
    assert fingerprint(inputs) == FLASH_WHOLE["fingerprint"] == plan.fingerprint
    assert plan.record_path is None  # an H200 recipe does not record a wheel its GPUs cannot run
    assert FLASH_WHOLE["filename"] == "flash_attn-2.8.3+sm120.cu130.torch2110-cp312-cp312-linux_x86_64.whl"
    built = FLASH_WHOLE["build"]
    assert built["compile_jobs_seen"] == 73 and built["jobs"] == built["peak_parallel_jobs"] == 14
    units = built["units"]
    assert len(units) == 73 and all(u["peak_gb"] <= d.memory.gb_per_compile for u in units.values())
    assert built["peak_job_gb"] == max(u["peak_gb"] for u in units.values()) == pytest.approx(6.6, abs=0.01)
    # the partial run on the earlier lease weighed the same units the same, unit by unit (its state
    # lists units still compiling too, at their peak so far: a minute in, a unit is near its peak)
    earlier = FLASH["watchdog"]["units"]
    seen = [n for n in earlier if n in units and earlier[n]["seconds"] > 60]
    assert len(seen) >= 40
    for name in seen:
        assert earlier[name]["peak_gb"] == pytest.approx(units[name]["peak_gb"], abs=0.2), name
    console = (SM120 / "flash-attn.console.log").read_text()
    assert "[73/73] compiled, 14m36s elapsed" in console and "0 pauses" in console
    assert f"in {round(built['seconds'])} s" in console and "not recorded in hopper-sm90.vllm.built.toml" in console
    log = gzip.decompress((SM120 / "flash-attn.build.log.gz").read_bytes()).decode()
    nvcc = [line for line in log.splitlines() if re.match(r"^\[\d+/73\] \S*nvcc ", line)]
    assert len(nvcc) == 72 and all("-gencode arch=compute_120,code=sm_120 --threads 1" in x for x in nvcc)
    assert "compute_90" not in log and "Guessing wheel URL" not in log
    sass = (SM120 / "flash-attn.sass.txt").read_text()
    assert f"{FLASH_WHOLE['size']} bytes sha256 {FLASH_WHOLE['sha256']}" in sass
    libs = dict(re.findall(r"^(\S+\.so) (.*)$", sass, flags=re.M))
    assert libs == {"flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so": "{('sass', 120): 72}"}


def test_the_results_page_shows_both_builds_for_both_archs() -> None:
    """The study's table as the results page draws it: each build for sm_120 beside its sm_90 build,
    the same jobs and memory within 0.1 GiB a job, two thirds to three quarters of the time."""
    (build,) = (cells(t) for t in page_tables(HERE))
    assert build == [
        ["flash-attn 2.8.3+sm90.cu130.torch2110", "sm_90", "19 min 56 s", "14", "73", "6.56", "60.1"],
        ["flash-attn 2.8.3+sm120.cu130.torch2110", "sm_120", "14 min 50 s", "14", "73", "6.60", "60.3"],
        ["sglang-kernel 0.4.5+sm90.cu130.torch2110", "sm_90", "9 min 53 s", "9", "55", "18.21", "33.9"],
        ["sglang-kernel 0.4.5+sm120.cu130.torch2110", "sm_120", "6 min 32 s", "9", "53", "18.29", "33.1"],
    ]
