"""``specrig build ... --plan`` from the definitions alone (no env, no network)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from specrig.builder.definition import load_definition
from specrig.cli import main as specrig_main


def main(argv: list[str]) -> int:
    return specrig_main(["build", *argv])


@pytest.fixture(autouse=True)
def _own_log_dir(tmp_path, monkeypatch):
    """Plans must not pick up measured figures from earlier builds on this machine."""
    monkeypatch.setenv("SPECRIG_BUILD_LOGS", str(tmp_path / "logs"))


def plan(capsys, *argv: str) -> str:
    assert main(list(argv) + ["--plan"]) == 0
    return capsys.readouterr().out


def plan_json(capsys, *argv: str) -> dict:
    assert main(list(argv) + ["--plan", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_help_works(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--jobs", "--nvcc-threads", "--source-cache", "--wheelhouse", "--plan", "--arch"):
        assert opt in out


def test_flash_attn_plan_on_this_host(capsys):
    out = plan(capsys, "flash-attn")
    assert "FLASH_ATTENTION_FORCE_BUILD=TRUE" in out
    assert "FLASH_ATTN_CUDA_ARCHS=120\n" in out
    assert "NVCC_THREADS=1" in out
    assert re.search(r"MAX_JOBS=\d+", out)
    assert f"sha256 {load_definition('flash-attn').source.sha256}  [" in out
    assert "job cap:" in out and "limited by" in out
    assert "FLASH_ATTN_LOCAL_VERSION=sm120.cu" in out


def test_flash_attn_plan_fits_24_gib(capsys):
    p = plan_json(capsys, "flash-attn", "--memory-gib", "24", "--cores", "128")
    cap = p["cap"]
    assert p["env"]["MAX_JOBS"] == str(cap["jobs"]) == "2"
    assert cap["jobs"] * cap["gb_per_job"] <= 24
    assert p["env"]["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"


@pytest.mark.parametrize(("gib", "jobs"), [(24, 2), (128, 14), (256, 30), (512, 61)])
def test_flash_attn_jobs_for_host_sizes(capsys, gib, jobs):
    assert plan_json(capsys, "flash-attn", "--memory-gib", str(gib), "--cores", "128")["cap"]["jobs"] == jobs


def test_sgl_kernel_plan_is_sm120_only_and_offline(capsys):
    p = plan_json(capsys, "sgl-kernel", "--memory-gib", "24")
    settings = p["config_settings"]
    gencodes = [s for s in settings if "SPECRIG_CUDA_GENCODES" in s]
    assert gencodes == ["cmake.define.SPECRIG_CUDA_GENCODES=-gencode=arch=compute_120a,code=sm_120a"]
    assert "cmake.define.FETCHCONTENT_FULLY_DISCONNECTED=ON" in settings
    assert "cmake.define.SGL_KERNEL_ENABLE_FA3=OFF" in settings
    assert "cmake.define.ENABLE_BELOW_SM90=OFF" in settings
    assert f"cmake.define.SGL_KERNEL_COMPILE_THREADS={p['cap']['nvcc_threads']}" in settings
    assert p["env"]["CMAKE_BUILD_PARALLEL_LEVEL"] == str(p["cap"]["jobs"])
    assert not any(re.search(r"sm_(90|100|103)", s) for s in settings)
    # every fetched FetchContent dependency has its own offline source dir
    d = load_definition("sgl-kernel")
    for dep in d.dependencies:
        has = any(s.startswith(f"cmake.define.FETCHCONTENT_SOURCE_DIR_{dep.name.upper()}=") for s in settings)
        assert has == dep.fetch, dep.name
    assert [s["name"] for s in p["sources"]] == [d.name, *(dep.name for dep in d.dependencies)]
    unused = {dep.name for dep in d.dependencies if not dep.fetch}
    assert unused and all((s["status"] == "not used by this build") == (s["name"] in unused) for s in p["sources"])
    assert p["cap"]["jobs"] * p["cap"]["gb_per_job"] <= 24


def test_sgl_kernel_plan_text_shows_the_source_map(capsys):
    out = plan(capsys, "sgl-kernel")
    assert "FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS" in out
    assert f"from {load_definition('sgl-kernel').source.url}" in out
    assert "edits to the build copy:" in out


def test_arch_override_and_validation(capsys):
    p = plan_json(capsys, "flash-attn", "--arch", "9.0,12.0")
    assert p["env"]["FLASH_ATTN_CUDA_ARCHS"] == "90;120"
    assert main(["flash-attn", "--arch", "89", "--plan"]) == 2
    assert f"knows only {', '.join(load_definition('flash-attn').valid_archs)}" in capsys.readouterr().err


def test_a_cross_build_is_not_recorded_for_a_recipe_whose_gpus_cannot_run_it(capsys):
    own = plan_json(capsys, "flash-attn", "--recipe", "hopper-sm90", "--memory-gib", "128")
    assert own["record"].endswith("hopper-sm90.vllm.built.toml")
    cross = plan(capsys, "flash-attn", "--recipe", "hopper-sm90", "--arch", "120", "--memory-gib", "128")
    assert "record:      (none: not recorded)" in cross
    assert (
        "not recorded in hopper-sm90.vllm.built.toml: a build for sm_120 cannot run on hopper-sm90's GPUs (sm_90)"
        in cross
    )
    both = plan_json(capsys, "flash-attn", "--recipe", "hopper-sm90", "--arch", "90,120", "--memory-gib", "128")
    assert both["record"].endswith("hopper-sm90.vllm.built.toml")


def test_fingerprint_ignores_parallelism_but_not_arch(capsys):
    a = plan_json(capsys, "flash-attn", "--memory-gib", "128")["fingerprint"]
    b = plan_json(capsys, "flash-attn", "--memory-gib", "512", "--nvcc-threads", "2")["fingerprint"]
    c = plan_json(capsys, "flash-attn", "--memory-gib", "128", "--arch", "90")["fingerprint"]
    assert a == b != c


def test_refuses_a_build_that_cannot_fit(capsys):
    assert main(["flash-attn", "--memory-gib", "8", "--plan"]) == 7
    captured = capsys.readouterr()
    m = load_definition("flash-attn").memory
    needed = (m.gb_per_compile + m.reserve_gib) / m.fraction  # the cap model's floor for one job
    assert "does not fit in memory even at one job" in captured.err and f"{needed:.1f} GiB" in captured.err
    assert "job cap:" in captured.out  # the plan is still shown


def test_bad_input_is_named(capsys):
    assert main(["flash-atn", "--plan"]) == 2
    assert "did you mean 'flash-attn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["flash-attn", "--jobs", "0"])
    assert "expected 'auto' or a positive integer" in capsys.readouterr().err


def test_build_without_env_says_how_to_make_it(capsys, tmp_path):
    rc = main(["flash-attn", "--wheelhouse", str(tmp_path), "--source-cache", str(tmp_path / "s"), "--offline"])
    assert rc == 2
    assert "nox -s env" in capsys.readouterr().err


def test_python_by_name_comes_from_path_and_a_missing_one_is_named(capsys, tmp_path, monkeypatch):
    """--python python3 (the host's interpreter on a GPU host) is looked up on PATH; a missing one is
    refused by name, before anything is planned."""
    assert main(["flash-attn", "--recipe", "hopper-sm90", "--python", "no-such-python3", "--plan"]) == 2
    err = capsys.readouterr().err
    assert "--python no-such-python3: no such interpreter" in err and "name on PATH" in err
    fake = tmp_path / "bin" / "py-with-no-torch"
    fake.parent.mkdir()
    fake.symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["flash-attn", "--recipe", "hopper-sm90", "--python", "py-with-no-torch", "--plan"]) == 2
    assert f"{fake} has no torch" in capsys.readouterr().err  # found on PATH, probed


def test_check_does_not_start_a_detached_build(capsys):
    assert main(["flash-attn", "--recipe", "hopper-sm90", "--detach", "--check"]) == 2
    assert "--check --reuse-only" in capsys.readouterr().err


SGL_SHAPE = """\
set(SGL_KERNEL_CUDA_FLAGS
    "-DNDEBUG"
    "-gencode=arch=compute_90,code=sm_90"
    "-std=c++17"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_80,code=sm_80"
    )
endif()
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    set(SGL_KERNEL_ENABLE_FA3 ON)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)
include(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)
"""


def test_sgl_kernel_rewrites_make_a_cmakelists_sm120_only(tmp_path):
    """The definition's checked edits, on a CMakeLists of the same shape (written for this test)."""
    from specrig.builder.skbuild import apply_rewrites
    from specrig.core.errors import BuildError

    (tmp_path / "CMakeLists.txt").write_text(SGL_SHAPE)
    d = load_definition("sgl-kernel")
    done = apply_rewrites(d, tmp_path, ("120",))
    assert len(done) == len(d.rewrites)
    text = (tmp_path / "CMakeLists.txt").read_text()
    assert "-gencode" not in text
    assert "set(SGL_KERNEL_CUDA_FLAGS\n    ${SPECRIG_CUDA_GENCODES}\n" in text
    assert "set(SGL_KERNEL_ENABLE_FA3 ON)" not in text
    assert "set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL ON)" in text
    assert "flashmla.cmake)" not in text
    # run again on the edited file: upstream "changed", so the edits no longer match and the build stops
    with pytest.raises(BuildError, match="matched 0 times"):
        apply_rewrites(d, tmp_path, ("120",))


def test_sglang_kernel_plan_is_sm90a_from_content_pinned_sources(capsys):
    p = plan_json(capsys, "sglang-kernel", "--recipe", "hopper-sm90", "--memory-gib", "125.3", "--cores", "16")
    settings = p["config_settings"]
    assert "cmake.define.SPECRIG_CUDA_GENCODES=-gencode=arch=compute_90a,code=sm_90a" in settings
    assert "cmake.define.SGL_KERNEL_ENABLE_FA3=OFF" in settings
    assert not any(re.search(r"sm_(80|100|103|120)", s) for s in settings)
    # the 8 heavy cutlass units and 6 plain ones fit (measured unit by unit, whole builds for sm_90a and sm_120a)
    assert p["cap"]["jobs"] == 14 and p["cap"]["nvcc_threads"] == 1
    assert p["cap"]["heaviest"][0] == ["fp8_gemm_kernel.cu", 18.5]
    by_name = {s["name"]: s for s in p["sources"]}
    d = load_definition("sglang-kernel")
    assert by_name["sglang-kernel"]["sha256"] == f"tree:{d.source.tree_sha256}"
    assert by_name["repo-cutlass"]["sha256"].startswith("tree:")
    assert p["fingerprint_inputs"]["source_sha256"] == f"tree:{d.source.tree_sha256}"
    assert set(p["fingerprint_inputs"]["dependencies"]) == {"repo-cutlass", "repo-flashinfer"}


# The lines of sglang-kernel 0.4.5's CMakeLists.txt and csrc/common_extension.cc the rewrites edit, in
# the same shape (written for this test; the build checks the real files: docs/builds.md)
SGLANG_SHAPE = """\
FetchContent_Populate(repo-fmt)
FetchContent_Populate(repo-triton)
FetchContent_Populate(repo-flash-attention)
set(SGL_KERNEL_CUDA_FLAGS
    "-DNDEBUG"
    "-gencode=arch=compute_90,code=sm_90"
)
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.8" OR SGL_KERNEL_ENABLE_SM100A)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_100a,code=sm_100a"
        "-gencode=arch=compute_120a,code=sm_120a"
    )
endif()
set(SOURCES
    "csrc/elementwise/activation.cu"
    "${repo-flash-attention_SOURCE_DIR}/csrc/flash_attn/src/a_sm80.cu"
    "${repo-flash-attention_SOURCE_DIR}/csrc/flash_attn/src/b_sm80.cu"
    "${repo-flash-attention_SOURCE_DIR}/csrc/flash_attn/src/c_sm80.cu"
    "${repo-flash-attention_SOURCE_DIR}/csrc/flash_attn/src/d_sm80.cu"
    "${repo-flash-attention_SOURCE_DIR}/csrc/flash_attn/flash_sparse_api.cpp"
)
install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)
install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)
list(APPEND INFLLM_FLASH_CUDA_FLAGS "-gencode=arch=compute_90,code=sm_90")
install(TARGETS infllm_ops LIBRARY DESTINATION "sgl_kernel")
include(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)
install(DIRECTORY "${repo-triton_SOURCE_DIR}/python/triton_kernels/triton_kernels/"
        DESTINATION "triton_kernels"
        PATTERN "__pycache__" EXCLUDE)
"""
EXTENSION_SHAPE = """\
  m.impl("top_p_renorm_probs", torch::kCUDA, &top_p_renorm_probs);
  m.def(
      "fwd_sparse(Tensor! q, Tensor k, "
      "float softcap, Generator? gen)"
      "-> Tensor[]");
  m.impl("fwd_sparse", torch::kCUDA, &flash::mha_fwd_sparse);

  m.def(
      "varlen_fwd_sparse(Tensor! q, "
      "Generator? gen) -> Tensor[]");
  m.impl("varlen_fwd_sparse", torch::kCUDA, &flash::mha_varlen_fwd_sparse);
  m.def("convert_vertical_slash_indexes(Tensor! block_count) -> ()");
"""


def test_sglang_kernel_rewrites_build_common_ops_for_sm90_only(tmp_path):
    from specrig.builder.skbuild import apply_rewrites
    from specrig.core.errors import BuildError

    (tmp_path / "csrc").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(SGLANG_SHAPE)
    (tmp_path / "csrc" / "common_extension.cc").write_text(EXTENSION_SHAPE)
    d = load_definition("sglang-kernel")
    assert len(apply_rewrites(d, tmp_path, ("90",))) == len(d.rewrites) - 1  # all but sm_120's variant
    text = (tmp_path / "CMakeLists.txt").read_text()
    assert "set(SGL_KERNEL_CUDA_FLAGS\n    ${SPECRIG_CUDA_GENCODES}\n" in text
    assert not re.search(r'^\s*"-gencode', text, flags=re.M)  # only infllm's own line keeps one
    assert "install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)" in text
    assert "set_target_properties(common_ops_sm100_build PROPERTIES EXCLUDE_FROM_ALL ON)" in text
    assert "set_target_properties(infllm_ops PROPERTIES EXCLUDE_FROM_ALL ON)" in text
    assert "flash-attention_SOURCE_DIR" not in text and "flashmla.cmake)" not in text
    assert "triton_kernels/" not in text and "FetchContent_Populate" not in text
    assert '"csrc/elementwise/activation.cu"' in text
    ext = (tmp_path / "csrc" / "common_extension.cc").read_text()
    assert "fwd_sparse" not in ext
    assert "top_p_renorm_probs" in ext and "convert_vertical_slash_indexes" in ext
    with pytest.raises(BuildError, match="matched 0 times"):  # an edited (or changed) source stops the build
        apply_rewrites(d, tmp_path, ("90",))


def test_sglang_kernel_for_sm120_builds_common_ops_as_sm100_and_only_that(tmp_path):
    """load_utils loads sm90/ on compute capability 9.0 and sm100/ on any other GPU: an sm_120 build
    must install the sm100 target (precise math), not the sm90 one (fast math)."""
    from specrig.builder.skbuild import apply_rewrites

    (tmp_path / "csrc").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(SGLANG_SHAPE)
    (tmp_path / "csrc" / "common_extension.cc").write_text(EXTENSION_SHAPE)
    d = load_definition("sglang-kernel")
    done = apply_rewrites(d, tmp_path, ("120",))
    assert len(done) == len(d.rewrites) - 1 and any("as sm100/" in line for line in done)
    text = (tmp_path / "CMakeLists.txt").read_text()
    assert "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)" in text
    assert "set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL ON)" in text
    assert "install(TARGETS common_ops_sm90_build" not in text
    assert not re.search(r'^\s*"-gencode', text, flags=re.M)


def test_sglang_kernel_plans_for_sm120_with_its_own_edits_and_fingerprint(capsys):
    p90 = plan_json(capsys, "sglang-kernel", "--recipe", "hopper-sm90", "--memory-gib", "125.3", "--cores", "16")
    p120 = plan_json(
        capsys, "sglang-kernel", "--recipe", "hopper-sm90", "--arch", "120", "--memory-gib", "125.3", "--cores", "16"
    )
    assert "cmake.define.SPECRIG_CUDA_GENCODES=-gencode=arch=compute_120a,code=sm_120a" in p120["config_settings"]
    edits90 = {r[2] for r in p90["fingerprint_inputs"]["rewrites"]}
    edits120 = {r[2] for r in p120["fingerprint_inputs"]["rewrites"]}
    assert edits90 ^ edits120 == {
        "set_target_properties(common_ops_sm100_build PROPERTIES EXCLUDE_FROM_ALL ON)",
        "set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL ON)",
    }
    assert p90["fingerprint"] != p120["fingerprint"]
    # the H200 cannot run it: kept in the wheelhouse, never in the recipe's built-wheel record
    assert p120["record"] is None and any(n.startswith("not recorded") for n in p120["notes"])


def test_the_old_name_builds_what_the_recipe_pins(capsys):
    """`nox -s build_sgl_kernel -- --recipe hopper-sm90` builds sglang-kernel (sgl-kernel's new name)."""
    hopper = plan_json(capsys, "sgl-kernel", "--recipe", "hopper-sm90", "--memory-gib", "125.3")
    assert hopper["fingerprint_inputs"]["name"] == "sglang-kernel"
    assert plan_json(capsys, "sgl-kernel", "--recipe", "blackwell-sm120")["fingerprint_inputs"]["name"] == "sgl-kernel"
