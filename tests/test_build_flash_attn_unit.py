"""One real flash-attn 2.8.3 translation unit compiled for sm_120 with the flags
a build uses (read from the pinned sdist's setup.py and torch's cpp_extension).

Slow: ~400 s and ~4.2 GiB peak for flash_fwd_hdim128_fp16_sm80.cu on a 2-core
box, plus a one-time ~900 MB torch 2.9.1 wheel download (its headers only) into
the specrig cache. Run it with ``SPECRIG_SLOW_BUILD_TESTS=1 pytest -m slow tests/test_build_flash_attn_unit.py``
or as the script ``specrig tu-probe --torch-wheel WHEEL``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from specrig.builder.definition import load_definition
from specrig.builder.sources import SourceCache
from specrig.builder.tu_probe import arch_flags, setup_nvcc_flags
from specrig.cli import main as specrig_main
from specrig.core.paths import subdir


@pytest.mark.network
def test_flags_come_from_the_pinned_setup_py():
    src = SourceCache(subdir("sources")).unpack(load_definition("flash-attn").source_archive())
    flags = setup_nvcc_flags(src / "setup.py")
    assert flags[:2] == ["-O3", "-std=c++17"]
    assert "--use_fast_math" in flags and "--expt-extended-lambda" in flags
    assert arch_flags(["120"]) == ["-gencode", "arch=compute_120,code=sm_120"]
    assert arch_flags(["89"]) == []  # setup.py ignores tokens it does not know


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.network
@pytest.mark.skipif(
    not os.environ.get("SPECRIG_SLOW_BUILD_TESTS"),
    reason="~7 min and a ~900 MB torch wheel: set SPECRIG_SLOW_BUILD_TESTS=1 to run",
)
def test_one_flash_attn_unit_compiles_for_sm120(tmp_path):
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not on PATH")
    wheels = subdir("torch-wheels")
    wheel = next(iter(sorted(wheels.glob("torch-2.9.1-*.whl"))), None)
    if wheel is None:
        import importlib.util

        python = sys.executable if importlib.util.find_spec("pip") else shutil.which("python3")
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "download",
                "torch==2.9.1",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
                str(wheels),
            ],
            check=True,
        )
        wheel = next(iter(sorted(wheels.glob("torch-2.9.1-*.whl"))))
    out = tmp_path / "result.json"
    assert specrig_main(["tu-probe", "--torch-wheel", str(wheel), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sass_in_object"] == {"sm_120": 1}
    # within the cap model's per-compile figure for flash-attn
    assert result["peak_job_gb"] < load_definition("flash-attn").memory.gb_per_compile
