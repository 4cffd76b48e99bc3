"""Compile one flash-attn translation unit with the flags a real build uses,
and measure its time and peak memory (``specrig tu-probe``).

The flags are not typed in here: the nvcc flag list is read out of the pinned
sdist's ``setup.py`` (its ``nvcc_flags = [...]`` literal), the arch flags follow
setup.py's rule for ``FLASH_ATTN_CUDA_ARCHS``, ``--threads`` comes from
``NVCC_THREADS``, and torch's own extension flags and include paths come from
``torch.utils.cpp_extension`` in the build python. A full build needs a CUDA
torch; one unit needs only torch's headers, so any torch (a CPU build too) can
measure it.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

from specrig.builder.definition import load_definition
from specrig.builder.fatbin import sass_archs
from specrig.builder.sources import SourceCache
from specrig.builder.watchdog import Watchdog
from specrig.core import atomic
from specrig.core.errors import SpecrigError
from specrig.host import toolchain

__all__ = ["setup_nvcc_flags", "arch_flags", "probe_command", "probe_unit"]

_TORCH_FLAGS = """
import json, torch
from torch.utils import cpp_extension as c
print(json.dumps({"common": c.COMMON_NVCC_FLAGS, "include": c.include_paths(),
                  "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI), "torch": torch.__version__}))
"""


def setup_nvcc_flags(setup_py: Path) -> list[str]:
    """The string literals of ``nvcc_flags = [...]`` in flash-attn's setup.py."""
    tree = ast.parse(setup_py.read_text())
    for node in ast.walk(tree):
        named = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "nvcc_flags" for t in node.targets
        )
        if named and isinstance(node.value, ast.List):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    raise SpecrigError(f"no `nvcc_flags = [...]` list in {setup_py}", hint="the sdist is not the one this probe knows")


def arch_flags(archs: list[str]) -> list[str]:
    """setup.py v2.8.3: ``-gencode arch=compute_A,code=sm_A`` for each of 80/90/100/120 listed (SASS only)."""
    out: list[str] = []
    for a in ("80", "90", "100", "120"):
        if a in archs:
            out += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    return out


def torch_info_from_wheel(wheel: Path, cache: Path) -> dict:
    """Torch's headers and extension flags straight from a torch wheel (no import, so a
    CUDA torch wheel serves on a host without CUDA libraries). PyPI torch >= 2.7 uses
    the C++11 ABI."""
    import hashlib
    import zipfile

    digest = hashlib.sha256(wheel.name.encode()).hexdigest()[:16]
    root = cache / "torch-headers" / digest
    if not (root / "torch" / "include").is_dir():
        tmp = atomic.staging_dir(root)
        try:
            with zipfile.ZipFile(wheel) as zf:
                for name in zf.namelist():
                    if name.startswith("torch/include/") or name == "torch/utils/cpp_extension.py":
                        zf.extract(name, tmp)
            # a finished folder another process published first wins; a leftover without headers is swapped out
            atomic.publish_dir(tmp, root, replace=not (root / "torch" / "include").is_dir())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    tree = ast.parse((root / "torch" / "utils" / "cpp_extension.py").read_text())
    common: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMMON_NVCC_FLAGS" for t in node.targets
        ):
            common = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
    inc = root / "torch" / "include"
    return {
        "common": common,
        "include": [str(inc), str(inc / "torch" / "csrc" / "api" / "include")],
        "abi": 1,
        "torch": wheel.name,
    }


def probe_command(
    src: Path, unit: str, out: Path, python: Path, archs: list[str], nvcc_threads: int, torch_info: dict | None = None
) -> list[str]:
    info = torch_info or json.loads(
        subprocess.run(
            [str(python), "-c", _TORCH_FLAGS], capture_output=True, text=True, check=True
        ).stdout.splitlines()[-1]
    )
    tc = toolchain.probe()
    if tc is None:
        raise SpecrigError("no CUDA toolkit here (no nvcc)", hint="install the CUDA toolkit or set CUDA_HOME")
    nvcc = str(tc.nvcc)
    includes = [src / "csrc" / "flash_attn", src / "csrc" / "flash_attn" / "src", src / "csrc" / "cutlass" / "include"]
    py_include = (
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        or sysconfig.get_paths()["include"]
    )
    argv = [nvcc]
    argv += [f"-I{p}" for p in [*includes, *info["include"], py_include]]
    argv += ["-c", str(src / "csrc" / "flash_attn" / "src" / unit), "-o", str(out)]
    argv += info["common"] + ["--compiler-options", "-fPIC"]
    argv += setup_nvcc_flags(src / "setup.py") + arch_flags(archs) + ["--threads", str(nvcc_threads)]
    argv += [
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
        f"-D_GLIBCXX_USE_CXX11_ABI={info['abi']}",
    ]
    return argv


def probe_unit(
    *,
    python: Path,
    torch_wheel: Path | None,
    unit: str,
    arch: str,
    nvcc_threads: int,
    source_cache: Path | None,
    json_out: Path | None,
) -> int:
    """Compile ``unit`` and print (and optionally write) its time, peak memory and SASS archs;
    0 when it compiled for the asked archs."""
    from specrig.core.paths import subdir

    d = load_definition("flash-attn")
    cache_root = source_cache or subdir("sources")
    src = SourceCache(cache_root).unpack(d.source_archive())  # type: ignore[arg-type]
    tinfo = torch_info_from_wheel(torch_wheel, cache_root) if torch_wheel else None
    with tempfile.TemporaryDirectory(prefix="specrig-tu-") as tmp:
        obj = Path(tmp) / "unit.o"
        cmd = probe_command(src, unit, obj, python, arch.split(","), nvcc_threads, tinfo)
        print("+ " + " ".join(cmd), flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(cmd)
        dog = Watchdog(proc.pid, interval=0.25).start()
        rc = proc.wait()
        rep = dog.stop()
        seconds = time.monotonic() - start
        archs = dict(sass_archs(obj)) if obj.exists() else {}
        result = {
            "torch": (tinfo or {}).get("torch", str(python)),
            "unit": unit,
            "archs": arch,
            "nvcc_threads": nvcc_threads,
            "returncode": rc,
            "seconds": round(seconds, 1),
            "peak_job_gb": round(rep.peak_job_gb, 3),
            "peak_total_gb": round(rep.peak_total_gb, 3),
            "sass_in_object": {f"sm_{k}": v for k, v in archs.items()},
        }
    print(json.dumps(result, indent=2))
    if json_out:
        atomic.write_text(json_out, json.dumps(result, indent=2) + "\n")
    return 0 if rc == 0 and archs else 1
