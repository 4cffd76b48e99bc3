"""What this machine is: GPUs (count, name, compute capability, driver),
CUDA toolkit, cores, memory and disk. Read once, handed to whoever decides."""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specrig.host import toolchain
from specrig.host.cpus import usable_cpu_list

__all__ = ["Gpu", "Host", "cpu_flags", "cpu_native_bf16", "probe", "usable_cpus"]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory_gib: float


@dataclass(frozen=True)
class Host:
    cpus: int
    memory_gib: float
    available_memory_gib: float
    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    glibc: str | None = None
    nvcc: str | None = None
    """CUDA toolkit version from ``nvcc --version`` (e.g. ``13.0``), if nvcc is on PATH."""
    notes: tuple[str, ...] = field(default=())

    @property
    def compute_capabilities(self) -> set[str]:
        """The GPUs' compute capabilities, e.g. ``{"9.0"}`` (empty without an NVIDIA GPU)."""
        return {g.compute_capability for g in self.gpus}

    def free_disk_gib(self, path: Path) -> float:
        path = Path(path)
        while not path.exists():
            path = path.parent
        return shutil.disk_usage(path).free / 2**30

    def as_dict(self) -> dict:
        return {
            "cpus": self.cpus,
            "memory_gib": round(self.memory_gib, 1),
            "gpus": [g.__dict__ for g in self.gpus],
            "driver": self.driver,
            "glibc": self.glibc,
            "nvcc": self.nvcc,
        }


def _nvidia_smi() -> tuple[tuple[Gpu, ...], str | None, list[str]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return (), None, []
    query = "index,name,compute_cap,memory.total,driver_version"
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), None, [f"nvidia-smi failed: {exc}"]
    if proc.returncode != 0:
        return (), None, [f"nvidia-smi failed: {proc.stderr.strip() or proc.stdout.strip()}"]
    gpus, driver = [], None
    for line in proc.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        idx, name, cc, mem, driver = parts[:5]
        gpus.append(Gpu(int(idx), name, cc, round(float(mem) / 1024, 1)))
    return tuple(gpus), driver, []


# CPU flags (Linux /proc/cpuinfo) of matrix units that do bf16 natively; without them
# torch emulates bf16 and it runs slower than float32
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo does not exist or says none)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, arm64
            return frozenset(value.split())
    return frozenset()


def cpu_native_bf16(flags: frozenset[str] | None = None) -> str | None:
    """The flag by which this CPU computes bf16 natively (AMX or AVX512-BF16), else None."""
    flags = cpu_flags() if flags is None else flags
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def usable_cpus() -> int:
    """How many CPUs this process may run on (:func:`specrig.host.cpus.usable_cpu_list`), not the machine's count."""
    return len(usable_cpu_list())


def probe() -> Host:
    vm = psutil.virtual_memory()
    gpus, driver, notes = _nvidia_smi()
    return Host(
        cpus=usable_cpus(),
        memory_gib=vm.total / 2**30,
        available_memory_gib=vm.available / 2**30,
        gpus=gpus,
        driver=driver,
        glibc=platform.libc_ver()[1] or None,
        nvcc=tc.release if (tc := toolchain.probe()) else None,
        notes=tuple(notes),
    )
