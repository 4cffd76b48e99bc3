"""The cap model: jobs from cores and memory, refusals that say what is needed."""

from __future__ import annotations

import pytest

from specrig.builder.cap import (
    MEASURED_SAFETY,
    HostBudget,
    MemoryModel,
    host_budget,
    load_measured,
    load_measured_entry,
    load_measured_units,
    plan_cap,
    record_measured,
)
from specrig.core.errors import BuildError, ConfigError

FLASH = MemoryModel(gb_per_compile=5.0, reserve_gib=8.0, fraction=0.85)


def budget(gib: float, cores: int = 128) -> HostBudget:
    return HostBudget(cores=cores, available_gib=gib, source="test")


@pytest.mark.parametrize(("gib", "jobs"), [(24, 2), (128, 20), (256, 41), (512, 73)])
def test_flash_attn_sm120_jobs_by_memory(gib, jobs):
    cap = plan_cap(FLASH, budget(gib), n_archs=1, nvcc_threads=1, units=73)
    assert cap.jobs == jobs
    assert cap.jobs * cap.gb_per_job <= gib * 0.85 - 8.0 + 1e-9


def test_threads_only_cost_memory_up_to_the_arch_count():
    one = plan_cap(FLASH, budget(128), n_archs=1, nvcc_threads=4)
    four = plan_cap(FLASH, budget(128), n_archs=4, nvcc_threads=4)
    assert one.gb_per_job == 5.0  # one arch: --threads 4 runs one device compile at a time
    assert four.gb_per_job == 20.0
    assert four.jobs == 5  # the original story: 4 archs x 4 threads fits only ~5 jobs in 128 GiB


def test_cores_and_units_limit():
    assert plan_cap(FLASH, budget(512, cores=2), n_archs=1, nvcc_threads=1).limited_by == "cores"
    cap = plan_cap(FLASH, budget(512), n_archs=1, nvcc_threads=1, units=73)
    assert (cap.jobs, cap.limited_by) == (73, "units")


def test_refuses_before_starting_when_one_job_does_not_fit():
    with pytest.raises(BuildError) as exc:
        plan_cap(FLASH, budget(12), n_archs=1, nvcc_threads=1)
    msg = str(exc.value)
    assert "does not fit in memory even at one job" in msg
    assert "15.3 GiB" in msg  # (5 + 8) / 0.85


def test_explicit_jobs_over_memory_is_refused_with_the_limit():
    with pytest.raises(BuildError, match="memory allows 2"):
        plan_cap(FLASH, budget(24), n_archs=1, nvcc_threads=1, jobs=16)
    cap = plan_cap(FLASH, budget(24), n_archs=1, nvcc_threads=1, jobs=1)
    assert (cap.jobs, cap.limited_by) == (1, "--jobs")


def test_bad_values_are_config_errors():
    with pytest.raises(ConfigError):
        plan_cap(FLASH, budget(24), n_archs=0, nvcc_threads=1)
    with pytest.raises(ConfigError):
        host_budget(memory_gib=-1)


def test_measured_figure_replaces_the_estimate(tmp_path):
    assert load_measured(tmp_path, "flash-attn", nvcc_threads=1, n_archs=1) is None
    record_measured(tmp_path, "flash-attn", nvcc_threads=1, n_archs=1, gb_per_job=2.0, jobs_seen=3)
    got = load_measured(tmp_path, "flash-attn", nvcc_threads=1, n_archs=1)
    assert got == 2.0
    cap = plan_cap(FLASH, budget(128), n_archs=1, nvcc_threads=1, measured_gb_per_job=got)
    assert cap.gb_per_job == pytest.approx(2.0 * MEASURED_SAFETY)
    assert "unfinished" in cap.gb_per_job_source
    # a complete build saw the peak of every unit: its figure caps the next build as it is
    record_measured(tmp_path, "flash-attn", nvcc_threads=1, n_archs=1, gb_per_job=2.0, jobs_seen=73, complete=True)
    assert load_measured_entry(tmp_path, "flash-attn", nvcc_threads=1, n_archs=1) == (2.0, True)
    cap = plan_cap(FLASH, budget(128), n_archs=1, nvcc_threads=1, measured_gb_per_job=2.0, measured_complete=True)
    assert cap.gb_per_job == pytest.approx(2.0) and "complete build" in cap.gb_per_job_source
    assert load_measured(tmp_path, "flash-attn", nvcc_threads=2, n_archs=1) is None


def test_host_budget_reads_this_host():
    """The budget is this process's CPUs and the memory psutil reports available now
    (or the cgroup limit, where that is lower); overrides replace both."""
    import psutil

    from specrig.host.machine import usable_cpus

    before = psutil.virtual_memory().available / 2**30
    b = host_budget()
    after = psutil.virtual_memory().available / 2**30
    assert b.cores == usable_cpus()
    if b.source.startswith("psutil"):
        assert min(before, after) - 0.5 <= b.available_gib <= max(before, after) + 0.5
    else:
        assert b.source.startswith("cgroup") and b.available_gib <= max(before, after) + 0.5
    assert host_budget(memory_gib=64, cores=8) == HostBudget(cores=8, available_gib=64, source="--memory-gib")


MIXED = MemoryModel(gb_per_compile=2.0, reserve_gib=8.0, fraction=0.85, heavy_units={"gemm.cu": 10.0, "moe.cu": 8.0})


def test_heavy_units_count_as_the_worst_case_the_heaviest_at_once():
    # usable 40 x 0.85 - 8 = 26 GiB: 10 + 8 for the heavy pair leaves 8 GiB, 4 plain jobs: 6 in all
    cap = plan_cap(MIXED, budget(40), n_archs=1, nvcc_threads=1, units=50)
    assert (cap.jobs, cap.limited_by) == (6, "memory")
    assert cap.peak_gib == pytest.approx(26.0) and cap.one_job_gib == 10.0
    assert cap.heaviest == (("gemm.cu", 10.0), ("moe.cu", 8.0))
    text = "\n".join(cap.explain())
    assert "heavier units (GiB per job): gemm.cu 10.0, moe.cu 8.0" in text
    assert "peak estimate 26.0 GiB (the 6 heaviest units at once)" in text
    # the same figures without the names: 13 jobs of 2 GiB, which the two heavy units would overrun
    plain = plan_cap(FLASH.model_copy(update={"gb_per_compile": 2.0}), budget(40), n_archs=1, nvcc_threads=1, units=50)
    assert plain.jobs == 13 and plain.heaviest == ()
    # two archs at two threads: every figure doubles, and only the heaviest unit fits
    two = plan_cap(MIXED, budget(40), n_archs=2, nvcc_threads=2, units=50)
    assert two.jobs == 1 and two.one_job_gib == 20.0
    # memory for less than the heaviest unit: refused, naming what that one job needs
    with pytest.raises(BuildError, match="one job needs about 10.0 GiB"):
        plan_cap(MIXED, budget(20), n_archs=1, nvcc_threads=1, units=50)
    assert plan_cap(MIXED, budget(20), n_archs=1, nvcc_threads=1, units=50, refuse=False).jobs == 0
    # --jobs past what fits is refused with the worst case's figure
    with pytest.raises(BuildError, match=r"--jobs 8 does not fit in memory: its 8 heaviest units at once = 30 GiB"):
        plan_cap(MIXED, budget(40), n_archs=1, nvcc_threads=1, units=50, jobs=8)


def test_a_complete_build_keeps_every_units_peak_for_the_next_plan(tmp_path):
    peaks = {"gemm.cu": 12.0, "moe.cu": 6.0, **{f"u{i}.cu": 2.0 for i in range(20)}}
    # an unfinished build keeps no unit figures: it may have missed the heaviest
    record_measured(tmp_path, "k", nvcc_threads=1, n_archs=1, gb_per_job=12.0, jobs_seen=5, units=peaks)
    assert load_measured_units(tmp_path, "k", nvcc_threads=1, n_archs=1) is None
    record_measured(tmp_path, "k", nvcc_threads=1, n_archs=1, gb_per_job=12.0, jobs_seen=22, complete=True, units=peaks)
    got = load_measured_units(tmp_path, "k", nvcc_threads=1, n_archs=1)
    assert got == peaks and load_measured_units(tmp_path, "k", nvcc_threads=2, n_archs=1) is None
    cap = plan_cap(
        MIXED,
        budget(40),
        n_archs=1,
        nvcc_threads=1,
        units=22,
        measured_gb_per_job=12.0,
        measured_complete=True,
        measured_units=got,
    )
    # 12 + 6 + 4 x 2 = 26: 6 jobs, where the peak per job alone (12 GiB) would allow 2
    assert cap.jobs == 6 and cap.gb_per_job == 2.0 and "22 units one by one" in cap.gb_per_job_source
    alone = plan_cap(
        MIXED, budget(40), n_archs=1, nvcc_threads=1, units=22, measured_gb_per_job=12.0, measured_complete=True
    )
    assert alone.jobs == 2
