"""The CUDA toolchain of this host: the toolkit root and its nvcc's version.

The one probe for it: ``host`` reports it, ``build`` plans and compiles with it,
``tu-probe`` measures with it. The toolkit is found the way torch's
``cpp_extension`` finds it: ``$CUDA_HOME``, else the root of the ``nvcc`` on
``PATH`` (through links and one-line ``exec`` wrapper scripts), else
``/usr/local/cuda``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Toolchain", "cuda_home", "nvcc_version", "probe"]

DEFAULT_HOME = Path("/usr/local/cuda")
# `nvcc --version`: "Cuda compilation tools, release 13.0, V13.0.88"
_VERSION = re.compile(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?")


@dataclass(frozen=True)
class Toolchain:
    home: Path
    nvcc: Path
    version: str
    """Full nvcc version (``13.0.88``; ``13.0`` where nvcc prints no build number)."""

    @property
    def release(self) -> str:
        """Major.minor (``13.0``)."""
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def _unwrap(nvcc: Path) -> Path:
    """The real nvcc behind links and a ``#!`` wrapper that ends in ``exec .../bin/nvcc``."""
    real = nvcc.resolve()
    try:
        head = real.read_bytes()[:4096]
    except OSError:
        return real
    if head.startswith(b"#!"):
        m = re.search(rb"exec\s+(\S+/bin/nvcc)", head)
        if m:
            return Path(m.group(1).decode()).resolve()
    return real


def cuda_home() -> Path | None:
    """The CUDA toolkit root, or None where there is none."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    nvcc = shutil.which("nvcc")
    if nvcc:
        root = _unwrap(Path(nvcc)).parent.parent
        if (root / "include" / "cuda_runtime.h").exists() or (root / "targets").is_dir():
            return root
    return DEFAULT_HOME if (DEFAULT_HOME / "bin" / "nvcc").exists() else None


def nvcc_version(nvcc: Path) -> str | None:
    """``13.0.88`` from ``nvcc --version`` (``13.0`` without a build number), or None."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(out)
    if not m:
        return None
    return m.group(2) or m.group(1)


def probe() -> Toolchain | None:
    """This host's CUDA toolchain, or None (no toolkit, or an nvcc that does not run)."""
    home = cuda_home()
    if home is None:
        return None
    nvcc = home / "bin" / "nvcc"
    version = nvcc_version(nvcc) if nvcc.exists() else None
    return Toolchain(home=home, nvcc=nvcc, version=version) if version else None
