"""The one CUDA toolchain probe (specrig.toolchain), as host, build and tu-probe see it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.host import toolchain
from specrig.host.machine import probe as probe_host

pytestmark = pytest.mark.nvcc


@pytest.fixture
def real_nvcc() -> Path:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on PATH")
    return Path(nvcc)


def test_probe_reads_the_version_nvcc_prints(real_nvcc, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    printed = subprocess.run([str(real_nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    tc = toolchain.probe()
    assert tc is not None
    assert f"release {tc.release}, V{tc.version}" in printed
    assert re.fullmatch(r"\d+\.\d+\.\d+", tc.version) and tc.major == int(tc.version.split(".")[0])
    assert (tc.home / "bin" / "nvcc").resolve() == tc.nvcc.resolve()
    assert (tc.home / "include" / "cuda_runtime.h").is_file()
    # host reports the same toolkit (major.minor), from the same probe
    assert probe_host().nvcc == tc.release


def test_a_wrapper_script_on_path_leads_to_the_real_toolkit(real_nvcc, tmp_path, monkeypatch):
    real = toolchain.probe()
    assert real is not None
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real.nvcc} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.cuda_home() == real.home.resolve()
    assert toolchain.probe().version == real.version


def test_cuda_home_wins_and_a_broken_one_gives_no_toolchain(real_nvcc, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert toolchain.cuda_home() == tmp_path
    assert toolchain.probe() is None  # no bin/nvcc there: no toolchain, not a guess
    assert probe_host().nvcc is None
