"""The CPUs this process may run on: its affinity mask (``taskset``, a batch
scheduler's binding), narrowed by its cgroup's cpuset where that says less, and
the compact list text Linux uses for them (``1,3-5``). Every CPU list or count
specrig derives (a CPU engine's thread binding, build jobs, the host facts of a
run) comes from here, never from the machine's CPU count alone."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["usable_cpu_list", "cpu_list_text", "parse_cpu_list"]


def parse_cpu_list(text: str) -> set[int]:
    """``"0-2,5"`` (the kernel's list format) as ``{0, 1, 2, 5}``; empty for blank or unreadable text."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def cpu_list_text(cpus: set[int] | list[int]) -> str:
    """The compact list of ``cpus``: runs of consecutive CPUs as ranges (``[1, 3, 4, 5]`` is ``"1,3-5"``)."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _cgroup_cpuset(root: Path) -> set[int]:
    """The CPUs of this process's cgroup cpuset (v2 ``cpuset.cpus.effective``, v1
    ``cpuset.effective_cpus``); empty when there is none to read."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return set()
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2: one unified hierarchy
            candidates.append(root / "sys/fs/cgroup" / rel / "cpuset.cpus.effective")
        elif "cpuset" in controllers.split(","):
            candidates.append(root / "sys/fs/cgroup/cpuset" / rel / "cpuset.effective_cpus")
    for f in candidates:
        try:
            found = parse_cpu_list(f.read_text())
        except OSError:
            continue
        if found:
            return found
    return set()


def usable_cpu_list(root: Path = Path("/")) -> list[int]:
    """The CPUs this process may run on, sorted: its affinity, narrowed by its cgroup's cpuset where the
    two overlap and the cpuset says less (a cpuset read from another namespace's view is ignored)."""
    if hasattr(os, "sched_getaffinity"):
        allowed = set(os.sched_getaffinity(0))
    else:  # no affinity call (macOS): every CPU the machine has
        allowed = set(range(os.cpu_count() or 1))
    narrowed = allowed & _cgroup_cpuset(root)
    return sorted(narrowed or allowed)
