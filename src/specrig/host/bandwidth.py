"""Memory bandwidth of the device that serves: the other input of the roofline.

A GPU's is its datasheet figure, looked up by the name the driver reports
(``nvidia-smi``/NVML, e.g. "NVIDIA H200"); a recipe's ``[bench.roofline]`` or
``--memory-bandwidth`` overrides it. A host without a GPU has its memory copy
bandwidth measured here (a 256 MiB copy, best of a few: bytes read plus bytes
written per second), which is what a CPU engine's decode streams its weights
through. A device the table does not know has no figure, and the report says so."""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["Bandwidth", "KNOWN_GB_S", "gpu_bandwidth", "measure_host_copy_gb_s"]

# datasheet HBM/GDDR bandwidth, GB/s; the longest matching key wins (so "H100 PCIe" beats "H100")
KNOWN_GB_S: dict[str, float] = {
    "H200": 4800,
    "H100 NVL": 3900,
    "H100 PCIe": 2000,
    "H100": 3350,  # SXM5 (the driver reports "NVIDIA H100 80GB HBM3")
    "H800": 3350,
    "GH200": 4000,
    "B200": 8000,
    "B100": 8000,
    "GB200": 8000,
    "B300": 8000,
    "RTX PRO 6000 Blackwell": 1792,
    "RTX 6000 Ada": 960,
    "L40S": 864,
    "L40": 864,
    "L4": 300,
    "A100-SXM4-80GB": 2039,
    "A100 80GB PCIe": 1935,
    "A100-SXM4-40GB": 1555,
    "A100-PCIE-40GB": 1555,
    "A100": 1555,
    "A10G": 600,
    "A10": 600,
    "RTX 5090": 1792,
    "RTX 4090": 1008,
    "RTX 3090": 936,
    "V100": 900,
    "T4": 320,
}


@dataclass(frozen=True)
class Bandwidth:
    gb_s: float
    """Aggregate bandwidth of the devices serving (GB/s)."""
    source: str


def gpu_bandwidth(name: str, count: int = 1) -> Bandwidth | None:
    """``count`` GPUs named ``name`` by the driver; None when the table does not know it."""
    hits = [k for k in KNOWN_GB_S if k.lower() in name.lower()]
    if not hits:
        return None
    key = max(hits, key=len)
    each = KNOWN_GB_S[key]
    return Bandwidth(
        each * count,
        f"{count} x {name} ({each:,.0f} GB/s datasheet)" if count > 1 else f"{name} ({each:,.0f} GB/s datasheet)",
    )


def measure_host_copy_gb_s(size_mib: int = 256, repeats: int = 4) -> Bandwidth:
    """The host's memory copy bandwidth: read + write bytes per second of a large copy, best of ``repeats``."""
    n = size_mib * 2**20
    src = bytearray(n)
    dst = bytearray(n)
    view = memoryview(dst)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        view[:] = src
        best = min(best, time.perf_counter() - t)
    gb_s = 2 * n / best / 1e9
    return Bandwidth(gb_s, f"this host's memory, measured: {gb_s:.1f} GB/s (a {size_mib} MiB copy, read + write)")
