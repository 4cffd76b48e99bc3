"""The parallelism cap model: how many compile jobs a build may run at once.

All sizes are GiB (2**30 bytes). A CUDA compile job (one ``nvcc`` process and its ``cicc``/``ptxas`` children)
needs a lot of memory, and the need grows with the number of device
compilations it runs at once: ``nvcc --threads T`` compiles up to ``T`` of the
job's ``A`` target archs in parallel, so

    gb_per_job = gb_per_compile * min(T, A)

where ``gb_per_compile`` comes from the build definition (a published figure)
or, once a build of the same kind has run here, from the watchdog's
measurement (``measured.json`` in the build-log folder) times a safety factor.
Then

    usable = available_gib * fraction - reserve_gib
    jobs   = min(floor(usable / gb_per_job), cores, units)

Units are not alike: in sglang-kernel one cutlass FP8 GEMM unit peaked at 18.2 GiB while most stayed
at 2.4 (measured on an H200). Where some units are known to be heavier, by name (``heavy_units`` in
the definition, or every unit's peak once a complete build has run here), the load of ``J`` jobs is
the worst case, the ``J`` heaviest units compiling at once, and ``jobs`` is the largest ``J`` whose
load fits in ``usable``. With no heavy units this is the formula above.

A build whose heaviest job does not fit in ``usable`` would not fit even at one job: it is
refused before it starts, saying how much memory it needs.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict, Field

from specrig.core import atomic, locks
from specrig.core.errors import BuildError, ConfigError
from specrig.host.machine import usable_cpus

__all__ = [
    "MemoryModel",
    "HostBudget",
    "JobCap",
    "plan_cap",
    "not_enough_memory",
    "host_budget",
    "measured_record_path",
    "load_measured",
    "load_measured_entry",
    "load_measured_units",
    "record_measured",
    "MEASURED_SAFETY",
]

MEASURED_SAFETY = 1.25
"""Margin put on a per-job peak measured by a build that did not finish (it may have missed the
heaviest units) before it caps a new build. A complete build's peak is the peak of every unit, and
is used as it is."""


class MemoryModel(BaseModel):
    """Memory facts of one buildable, from ``[memory]`` in its build definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gb_per_compile: float = Field(gt=0)
    """Peak GiB of one device compilation (one arch of one translation unit)."""
    reserve_gib: float = Field(8.0, ge=0)
    """Memory left to the system and the build driver (pip, ninja, linker)."""
    fraction: float = Field(0.85, gt=0, le=1)
    """Share of available memory the build may use at all."""
    source: str = ""
    """Where ``gb_per_compile`` comes from (a URL, a measurement)."""
    heavy_units: dict[str, float] = {}
    """Peak GiB of one device compilation of the units known to need more than ``gb_per_compile``,
    by source file name (measured)."""


@dataclass(frozen=True, kw_only=True)
class HostBudget:
    cores: int
    available_gib: float
    source: str
    """How the numbers were read: ``psutil``, ``cgroup``, ``--memory-gib``."""


@dataclass(frozen=True, kw_only=True)
class JobCap:
    """The decision, with every number that went into it (``--plan`` prints it)."""

    jobs: int
    nvcc_threads: int
    n_archs: int
    gb_per_job: float
    gb_per_job_source: str
    usable_gib: float
    budget: HostBudget
    memory_jobs: int
    """Jobs memory allows (before the core and unit limits)."""
    units: int | None
    limited_by: str
    """``memory``, ``cores``, ``units`` or ``--jobs``."""
    heaviest: tuple[tuple[str, float], ...] = ()
    """The units known to need more than ``gb_per_job``, heaviest first: (file name, GiB per job)."""
    peak_gib: float = 0.0
    """The estimated peak at ``jobs``: the ``jobs`` heaviest units at once."""

    @property
    def one_job_gib(self) -> float:
        """What the heaviest single job needs."""
        return max([self.gb_per_job, *(gb for _, gb in self.heaviest)])

    def explain(self) -> list[str]:
        b = self.budget
        lines = [
            f"host: {b.cores} cores, {b.available_gib:.1f} GiB available ({b.source})",
            f"per job: {self.gb_per_job:.2f} GiB = per-compile x min(nvcc_threads={self.nvcc_threads}, "
            f"archs={self.n_archs}) [{self.gb_per_job_source}]",
            f"usable: {self.usable_gib:.1f} GiB (available x fraction - reserve)",
            f"memory allows {self.memory_jobs} jobs; cores allow {b.cores}"
            + (f"; the build has {self.units} compile units" if self.units else ""),
            f"=> {self.jobs} parallel jobs (limited by {self.limited_by}); peak estimate {self.peak_gib:.1f} GiB"
            + (f" (the {self.jobs} heaviest units at once)" if self.heaviest else ""),
        ]
        if self.heaviest:
            top = ", ".join(f"{n} {gb:.1f}" for n, gb in self.heaviest[:4])
            more = f" and {len(self.heaviest) - 4} more" if len(self.heaviest) > 4 else ""
            lines.insert(2, f"heavier units (GiB per job): {top}{more}")
        return lines

    def as_dict(self) -> dict:
        d = asdict(self)
        d["budget"] = asdict(self.budget)
        return d


def _cgroup_limit_gib() -> float | None:
    """The memory limit of this process's cgroup (v2 or v1), if one is set."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 2**60:
            return int(raw) / 2**30
    return None


def host_budget(*, memory_gib: float | None = None, cores: int | None = None) -> HostBudget:
    """What this host offers now; ``memory_gib``/``cores`` override for planning another host."""
    if cores is not None and cores < 1:
        raise ConfigError(
            f"--cores must be at least 1, got {cores}", hint="give the number of CPU cores of the build host"
        )
    if memory_gib is not None and memory_gib <= 0:
        raise ConfigError(
            f"--memory-gib must be positive, got {memory_gib}", hint="give the build host's free memory in GiB"
        )
    n_cores = cores or usable_cpus()
    if memory_gib is not None:
        return HostBudget(cores=n_cores, available_gib=memory_gib, source="--memory-gib")
    avail = psutil.virtual_memory().available / 2**30
    source = "psutil MemAvailable"
    limit = _cgroup_limit_gib()
    if limit is not None and limit < avail:
        avail, source = limit, "cgroup memory limit"
    return HostBudget(cores=n_cores, available_gib=avail, source=source)


def _per_job(
    model: MemoryModel,
    scale: int,
    measured_gb_per_job: float | None,
    measured_complete: bool,
    measured_units: dict[str, float] | None,
) -> tuple[dict[str, float], float, str]:
    """(the named heavy units' GiB, GiB a job, where that figure comes from): a complete build's
    measurement first, then an unfinished one's with a safety factor, then the definition's."""
    named = {n: gb * scale for n, gb in model.heavy_units.items()}
    if measured_units and measured_complete:
        gb = statistics.median(measured_units.values())
        return (
            measured_units,
            gb,
            (
                f"measured here by a complete build, {len(measured_units)} units one by one: the median unit {gb:.2f} GiB"
            ),
        )
    if measured_gb_per_job is not None and measured_complete:
        return (
            named,
            measured_gb_per_job,
            (f"measured here by a complete build: {measured_gb_per_job:.2f} GiB, the peak of every unit"),
        )
    if measured_gb_per_job is not None:
        return (
            named,
            measured_gb_per_job * MEASURED_SAFETY,
            (f"measured here by an unfinished build {measured_gb_per_job:.2f} GiB x {MEASURED_SAFETY} safety"),
        )
    how = f"definition: {model.gb_per_compile} GiB per compile" + (f" ({model.source})" if model.source else "")
    return named, model.gb_per_compile * scale, how


def plan_cap(
    model: MemoryModel,
    budget: HostBudget,
    *,
    n_archs: int,
    nvcc_threads: int,
    units: int | None = None,
    jobs: int | None = None,
    measured_gb_per_job: float | None = None,
    measured_complete: bool = False,
    measured_units: dict[str, float] | None = None,
    refuse: bool = True,
) -> JobCap:
    """Decide the job count. ``jobs`` (``--jobs N``) is honoured only if memory allows it.
    ``measured_units``: every unit's peak GiB per job, from a complete build here.

    A build that does not fit even at one job raises :class:`BuildError`; with
    ``refuse=False`` (for ``--plan``) it returns a cap of 0 jobs instead."""
    if n_archs < 1:
        raise ConfigError("the arch list is empty", hint="give --arch, or set host.compute_capability in the recipe")
    if nvcc_threads < 1:
        raise ConfigError(f"--nvcc-threads must be at least 1, got {nvcc_threads}", hint="use 1 for a one-arch build")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs must be 'auto' or at least 1, got {jobs}", hint="use --jobs auto")
    named, gb_per_job, how = _per_job(
        model, min(nvcc_threads, n_archs), measured_gb_per_job, measured_complete, measured_units
    )
    heaviest = tuple(sorted(((n, gb) for n, gb in named.items() if gb > gb_per_job), key=lambda x: (-x[1], x[0])))
    heavy = [gb for _, gb in heaviest]
    usable = budget.available_gib * model.fraction - model.reserve_gib
    memory_jobs = _jobs_that_fit(usable, gb_per_job, heavy)
    if memory_jobs < 1:
        if not refuse:
            return JobCap(
                jobs=0,
                nvcc_threads=nvcc_threads,
                n_archs=n_archs,
                gb_per_job=gb_per_job,
                gb_per_job_source=how,
                usable_gib=usable,
                budget=budget,
                memory_jobs=0,
                units=units,
                limited_by="memory: does not fit at one job",
                heaviest=heaviest,
            )
        raise not_enough_memory(model, budget, max([gb_per_job, *heavy]))
    limits = {"memory": memory_jobs, "cores": budget.cores}
    if units:
        limits["units"] = units
    limited_by = min(limits, key=lambda k: limits[k])
    chosen = limits[limited_by]
    if jobs is not None:
        if jobs > memory_jobs:
            need = _load(jobs, gb_per_job, heavy)
            what = f"its {jobs} heaviest units at once" if heaviest else f"{jobs} x {gb_per_job:.1f} GiB"
            raise BuildError(
                f"--jobs {jobs} does not fit in memory: {what} = {need:.0f} GiB, "
                f"but only {usable:.1f} GiB is usable; memory allows {memory_jobs}",
                hint=f"use --jobs auto or --jobs {memory_jobs} or less",
            )
        chosen, limited_by = jobs, "--jobs"
    return JobCap(
        jobs=chosen,
        nvcc_threads=nvcc_threads,
        n_archs=n_archs,
        gb_per_job=gb_per_job,
        gb_per_job_source=how,
        usable_gib=usable,
        budget=budget,
        memory_jobs=memory_jobs,
        units=units,
        limited_by=limited_by,
        heaviest=heaviest,
        peak_gib=_load(chosen, gb_per_job, heavy),
    )


def _load(jobs: int, gb_per_job: float, heavy: list[float]) -> float:
    """GiB of ``jobs`` jobs at once in the worst case: the heaviest units first (``heavy``, sorted)."""
    return sum(heavy[:jobs]) + max(0, jobs - len(heavy)) * gb_per_job


def _jobs_that_fit(usable: float, gb_per_job: float, heavy: list[float]) -> int:
    """The most jobs whose worst-case load fits in ``usable`` (none if even one does not)."""
    if usable <= 0:
        return 0
    if _load(len(heavy), gb_per_job, heavy) <= usable:
        return len(heavy) + math.floor((usable - sum(heavy)) / gb_per_job)
    jobs = 0
    while jobs < len(heavy) and _load(jobs + 1, gb_per_job, heavy) <= usable:
        jobs += 1
    return jobs


def not_enough_memory(model: MemoryModel, budget: HostBudget, gb_per_job: float) -> BuildError:
    need = (gb_per_job + model.reserve_gib) / model.fraction
    return BuildError(
        f"this build does not fit in memory even at one job: one job needs about {gb_per_job:.1f} GiB, "
        f"and with the {model.reserve_gib:g} GiB reserve the host needs about {need:.1f} GiB available; "
        f"it has {budget.available_gib:.1f} GiB ({budget.source})",
        hint="free memory, lower --nvcc-threads, build fewer archs (--arch), or build on a larger host "
        "and copy the wheelhouse here",
    )


# --------------------------------------------------------------------------- measured figures


def measured_record_path(logs_dir: Path) -> Path:
    return logs_dir / "measured.json"


def _key(name: str, nvcc_threads: int, n_archs: int) -> str:
    return f"{name}/threads={nvcc_threads}/archs={n_archs}"


def load_measured(logs_dir: Path, name: str, *, nvcc_threads: int, n_archs: int) -> float | None:
    """The peak GiB per job the watchdog measured for this kind of build, if any."""
    entry = load_measured_entry(logs_dir, name, nvcc_threads=nvcc_threads, n_archs=n_archs)
    return entry[0] if entry else None


def load_measured_entry(logs_dir: Path, name: str, *, nvcc_threads: int, n_archs: int) -> tuple[float, bool] | None:
    """``(peak GiB per job, whether a complete build measured it)``, if any."""
    path = measured_record_path(logs_dir)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(_key(name, nvcc_threads, n_archs))
    return (float(entry["gb_per_job"]), bool(entry.get("complete", False))) if entry else None


def load_measured_units(logs_dir: Path, name: str, *, nvcc_threads: int, n_archs: int) -> dict[str, float] | None:
    """Every unit's peak GiB per job, as a complete build here measured them, if one did."""
    try:
        data = json.loads(measured_record_path(logs_dir).read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(_key(name, nvcc_threads, n_archs)) or {}
    units = entry.get("units") if entry.get("complete") else None
    return {str(n): float(gb) for n, gb in units.items()} if isinstance(units, dict) and units else None


def record_measured(
    logs_dir: Path,
    name: str,
    *,
    nvcc_threads: int,
    n_archs: int,
    gb_per_job: float,
    jobs_seen: int,
    complete: bool = False,
    units: dict[str, float] | None = None,
) -> None:
    """Store a measured peak GiB per job (atomically) for the next plan; a complete build also
    stores every unit's peak (``units``)."""
    path = measured_record_path(logs_dir)
    with locks.hold(path, "recording a build's measured memory"):  # read, add, write: no update lost
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data[_key(name, nvcc_threads, n_archs)] = {
            "gb_per_job": round(gb_per_job, 3),
            "jobs_seen": jobs_seen,
            "complete": complete,
            **({"units": {n: round(gb, 3) for n, gb in sorted(units.items())}} if units and complete else {}),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
