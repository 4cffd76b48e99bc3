"""Before an environment is made: does this host fit the recipe (OS, glibc,
memory, disk), and which interpreter of the recipe's Python serves as its base:
the host's own, else (online) one of uv's managed Pythons."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from specrig.core.errors import HostError
from specrig.core.log import log
from specrig.host.machine import Host
from specrig.lock.resolve import uv_bin
from specrig.recipe.schema import Recipe

__all__ = ["find_python", "preflight"]


def find_python(version: str, *, download: bool = False) -> str:
    """An interpreter of that minor version: this host's (uv's discovery), else with ``download``
    one of uv's managed Pythons, installed once into uv's own folder (said in one line)."""

    def find(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [uv_bin(), "python", "find", "--no-python-downloads", *extra, version]
        return subprocess.run(cmd, capture_output=True, text=True)

    proc = find("--system")  # not the venv specrig itself runs in
    if proc.returncode != 0 or not proc.stdout.strip():
        proc = find()
    if (proc.returncode != 0 or not proc.stdout.strip()) and download:
        log.step(
            f"Python {version} is not installed on this host: uv provides a managed one (`uv python install {version}`)"
        )
        inst = subprocess.run([uv_bin(), "python", "install", version], capture_output=True, text=True)
        if inst.returncode != 0:
            raise HostError(
                f"Python {version} is not installed here and uv could not provide one:\n{inst.stderr.strip()[-1500:]}",
                hint=f"install Python {version} (e.g. `apt-get install python{version}`), or let uv reach its Python downloads",
            )
        proc = find("--managed-python")
        if proc.returncode != 0:
            proc = find()
    if proc.returncode != 0 or not proc.stdout.strip():
        raise HostError(
            f"Python {version} is not installed on this host",
            hint=f"install Python {version} (e.g. `apt-get install python{version}`); offline, copy one in or run "
            f"`uv python install {version}` where the network allows and carry uv's Python folder",
        )
    return proc.stdout.strip()


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _glibc_needed(platform: str) -> tuple[int, ...] | None:
    m = re.search(r"manylinux_(\d+)_(\d+)", platform)
    return (int(m.group(1)), int(m.group(2))) if m else None


def preflight(recipe: Recipe, host: Host, target_dir: Path, *, offline: bool = False) -> list[str]:
    """Check the host against the recipe; raise HostError listing every misfit.
    Returns informational lines for the log."""
    problems: list[str] = []
    info: list[str] = [
        f"host: {host.cpus} CPUs, {host.memory_gib:.1f} GiB memory ({host.available_memory_gib:.1f} GiB available)"
    ]
    h = recipe.host
    if h.gpu_count:
        if not host.gpus:
            problems.append(
                f"recipe {recipe.name!r} needs {h.gpu_count} NVIDIA GPU(s) with compute capability "
                f"{'/'.join(h.compute_capability)}, but nvidia-smi finds none"
                + (f" ({host.notes[0]})" if host.notes else "")
            )
        else:
            wanted = {c.rstrip("a") for c in h.compute_capability}
            fitting = [g for g in host.gpus if g.compute_capability in wanted]
            if len(fitting) < h.gpu_count:
                have = ", ".join(f"{g.name} (cc {g.compute_capability})" for g in host.gpus)
                problems.append(
                    f"recipe needs {h.gpu_count} GPU(s) of compute capability {'/'.join(sorted(wanted))}; found {have}"
                )
            info.append(f"GPUs: {len(host.gpus)} x {host.gpus[0].name}, driver {host.driver}")
            if h.driver_min and host.driver and _version_tuple(host.driver) < _version_tuple(h.driver_min):
                problems.append(
                    f"NVIDIA driver {host.driver} is older than the recipe's minimum {h.driver_min} (CUDA {h.cuda})"
                )
    if host.available_memory_gib < h.min_memory_gib:
        problems.append(
            f"{host.available_memory_gib:.1f} GiB memory available, the recipe needs {h.min_memory_gib:g} GiB"
        )
    glibc = _glibc_needed(h.platform)
    if glibc and host.glibc and _version_tuple(host.glibc) < glibc:
        problems.append(f"glibc {host.glibc} is older than the recipe's platform {h.platform} needs")
    free = host.free_disk_gib(target_dir)
    info.append(f"disk: {free:.1f} GiB free at {target_dir.parent}")
    if free < h.min_disk_gib:
        problems.append(f"{free:.1f} GiB free disk at {target_dir.parent}, the recipe needs {h.min_disk_gib:g} GiB")
    try:
        info.append(f"python {h.python}: {find_python(h.python)}")
    except HostError as exc:
        if offline:
            problems.append(exc.message)
        else:
            info.append(f"python {h.python}: not on this host; uv will provide a managed one")
    if problems:
        raise HostError(
            f"this host does not fit recipe {recipe.name!r}:\n" + "\n".join(f"  - {p}" for p in problems),
            hint="run on a host that fits, pick another recipe with --recipe, or lower the recipe's [host] floors",
        )
    return info
