"""The CPUs specrig derives are the ones this process may use: its affinity mask, narrowed by its
cgroup's cpuset, written in the kernel's compact list form. Checked under a real ``taskset``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.host.cpus import cpu_list_text, parse_cpu_list, usable_cpu_list

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_is_written_compactly() -> None:
    assert cpu_list_text([1, 3, 4, 5]) == "1,3-5"
    assert cpu_list_text({0}) == "0"
    assert cpu_list_text([7, 0, 1, 2, 9, 8]) == "0-2,7-9"
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("") == set()
    assert parse_cpu_list(cpu_list_text([2, 4, 5, 6, 11])) == {2, 4, 5, 6, 11}


def _fake_cgroup(root: Path, v2: str | None = None, v1: str | None = None) -> Path:
    (root / "proc/self").mkdir(parents=True)
    lines = []
    if v1 is not None:
        lines.append("3:cpuset:/job")
        (root / "sys/fs/cgroup/cpuset/job").mkdir(parents=True)
        (root / "sys/fs/cgroup/cpuset/job/cpuset.effective_cpus").write_text(v1)
    if v2 is not None:
        lines.append("0::/slice/job")
        (root / "sys/fs/cgroup/slice/job").mkdir(parents=True)
        (root / "sys/fs/cgroup/slice/job/cpuset.cpus.effective").write_text(v2)
    (root / "proc/self/cgroup").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity mask on this OS")
def test_a_cgroup_cpuset_narrows_the_affinity(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    last = allowed[-1]
    assert usable_cpu_list(_fake_cgroup(tmp_path / "v2", v2=f"{last}\n")) == [last]
    assert usable_cpu_list(_fake_cgroup(tmp_path / "v1", v1=f"{last}\n")) == [last]
    # a cpuset wider than the affinity does not widen it; one that shares no CPU with it is another view
    assert usable_cpu_list(_fake_cgroup(tmp_path / "wide", v2=f"0-{last + 64}")) == allowed
    assert usable_cpu_list(_fake_cgroup(tmp_path / "other", v2=f"{last + 64}")) == allowed
    assert usable_cpu_list(tmp_path / "none") == allowed  # no /proc/self/cgroup to read


PROBE = """
from specrig.engine import get_engine
from specrig.host.machine import usable_cpus
from specrig.recipe.schema import load_recipe
launch = get_engine("vllm").launch(python="/x/bin/python", model_path="/m", served_name="m", port=1,
                                   recipe=load_recipe("cpu"), spec=None, drafter=None, extra_args=[])
print(launch.environment["VLLM_CPU_OMP_THREADS_BIND"], usable_cpus())
"""


@pytest.mark.skipif(not shutil.which("taskset"), reason="needs taskset (util-linux)")
@pytest.mark.parametrize("which", ["first", "last"])
def test_under_taskset_the_cpu_engine_binds_the_allowed_cpus(which: str) -> None:
    """The cpu recipe's ``{all_cpus}`` (vLLM's OpenMP thread binding) is the set taskset allows:
    on CPU 1 alone it is ``1``, not ``0-0`` (the first CPU of a count)."""
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[0] if which == "first" else allowed[-1]
    proc = subprocess.run(
        ["taskset", "-c", str(cpu), sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(cpu), "1"]
