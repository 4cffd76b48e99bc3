"""``specrig bench --compare`` end to end: real benches (``--endpoint`` attached to the synthetic
SSE server, in a process of its own) store their runs in pytest-benchmark's real storage through
specrig's plugin, and later runs compare with them (pytest-benchmark's table, specrig's verdict).

* machine info is stored as plain data (the host as a dict, never ``UNSERIALIZABLE[...]``);
* a faster run compared with a stored one passes; a slower one fails its ``--compare-fail``
  threshold with exit 11, naming the test, the figure, the stored run and how the noise was judged
  (one repeat on each side: not at all, said so; ``--repeat 3``: the intervals separate), with no
  traceback; the failed run is stored but is no baseline: the next ``--compare latest`` passes over it;
* ``--compare latest`` passes over a stored run that measured nothing (what older specrig stored);
* a run that measured nothing (a stall) is not stored, keeps its folder marked INCOMPLETE, draws
  no plot, and its message counts the one request that was sent;
* a refused bench leaves no results folder; ``--results`` naming a file is refused up front.

Each bench takes a few seconds (no engine, no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.utils import get_machine_id

from specrig.host.machine import usable_cpus
from specrig.lab.folder import incomplete
from specrig.serve.synthetic import Behaviour, serve_in_process

FAST = Behaviour(token_delay_s=0.001)
SLOW = Behaviour(token_delay_s=0.03)  # 8 tokens x 5 prompts: about 1.2 s against about 0.05 s


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with (
        serve_in_process(FAST) as fast,
        serve_in_process(SLOW) as slow,
        serve_in_process(Behaviour(stall_after_chunks=2)) as stall,
    ):
        yield {"fast": fast.base_url, "slow": slow.base_url, "stall": stall.base_url}


def bench(cache: Path, endpoint: str, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", "bench", "--recipe", "cpu", "--endpoint", endpoint]
        + ["--memory-bandwidth", "10", "--max-tokens", "8", "--warmup", "0", "--results", str(results), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"SPECRIG_CACHE_DIR": str(cache), "COLUMNS": "200"},
    )


def stored(cache: Path) -> list[Path]:
    return sorted((cache / "benchmarks" / get_machine_id()).glob("*.json"))


def test_two_stored_runs_compared_and_a_regression_fails(tmp_path: Path, servers: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    first = bench(cache, servers["slow"], tmp_path / "a")
    assert first.returncode == 0, first.stdout + first.stderr
    [a] = stored(cache)
    saved = json.loads(a.read_text())
    host = saved["machine_info"]["specrig"]["host"]
    assert isinstance(host, dict) and host["cpus"] == usable_cpus(), host  # the CPUs it may use
    assert saved["specrig_results"] == str((tmp_path / "a").resolve()) and len(saved["benchmarks"]) == 1
    assert incomplete(tmp_path / "a") is None and (tmp_path / "a" / "throughput.png").is_file()
    # what an older specrig stored for a run that measured nothing: passed over by --compare latest
    empty = a.with_name("0002_unversioned_measured-nothing.json")
    empty.write_text(
        json.dumps(saved | {"benchmarks": [], "machine_info": {"specrig": {"host": "UNSERIALIZABLE[..]"}}})
    )

    faster = bench(cache, servers["fast"], tmp_path / "b", "--compare", "latest")
    assert faster.returncode == 0, faster.stdout + faster.stderr
    said = " ".join(faster.stderr.split())
    assert f"compared with the stored run {a}" in said
    # the storage is not below the working directory: pytest-benchmark's own note on a different machine_info
    # fails there (ValueError); specrig says what differs (the endpoint: another server)
    assert "the stored run was measured on another machine or setup: specrig.model differ" in said
    table = (tmp_path / "b" / "logs" / "pytest.log").read_text()  # pytest's report: in the run's log
    assert "(NOW)" in table and "(0001_" in table and "(NOW)" not in faster.stdout  # pytest-benchmark's table
    b = stored(cache)[-1]
    assert b.name.startswith("0003_")

    slower = bench(cache, servers["slow"], tmp_path / "c", "--compare", "latest", "--compare-fail", "mean:50%")
    assert slower.returncode == 11, slower.stdout + slower.stderr
    err = " ".join(slower.stderr.split())
    assert f"regression against the stored run {b}: test_decode.py::test_decode[baseline-c1]: mean +" in err
    assert "one repeat on each side: no spread to judge the noise by, the tolerance alone decides" in err
    assert "Traceback" not in slower.stdout + slower.stderr and "INTERNALERROR" not in slower.stdout
    assert (tmp_path / "c" / "summary.json").is_file() and incomplete(tmp_path / "c") is None
    # the failed run is stored, with its verdict, but it is no baseline: latest is still the run that passed
    c = stored(cache)[-1]
    verdict = json.loads(c.read_text())["specrig_verdict"]
    assert c.name.startswith("0004_") and verdict["passed"] is False
    assert verdict["problems"][0].startswith(f"regression against the stored run {b}: ")
    again = bench(cache, servers["fast"], tmp_path / "d", "--compare", "latest")
    assert again.returncode == 0, again.stdout + again.stderr
    said = " ".join(again.stderr.split())
    assert f"compared with the stored run {b}" in said and f"passed over {c.name}: it failed its gates" in said
    assert json.loads(stored(cache)[-1].read_text())["specrig_verdict"] == {"passed": True, "problems": []}


def test_repeated_runs_are_compared_by_their_intervals(tmp_path: Path, servers: dict[str, str]) -> None:
    """--repeat 3 on both sides: each gets a 95% interval, and a regression is one where they separate."""
    cache = tmp_path / "cache"
    first = bench(cache, servers["fast"], tmp_path / "a", "--repeat", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    [a] = stored(cache)
    assert len(json.loads(a.read_text())["benchmarks"]) == 3
    slower = bench(cache, servers["slow"], tmp_path / "b", "--repeat", "3", "--compare", "latest")
    assert slower.returncode == 11, slower.stdout + slower.stderr
    err = " ".join(slower.stderr.split())
    assert f"regression against the stored run {a}: test_decode.py::test_decode[baseline-c1]: mean +" in err
    assert "(95% CI " in err and "n=3) against " in err and "the intervals separate" in err
    assert "one repeat" not in err


def test_a_run_that_measured_nothing_is_not_stored(tmp_path: Path, servers: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    run = tmp_path / "stalled"
    proc = bench(cache, servers["stall"], run, "--stall-timeout", "1")
    assert proc.returncode == 10, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "1 of 5 requests failed (4 not sent: the run stops at the first failure)" in err
    assert "this run is not stored for --compare: it measured nothing" in err
    assert stored(cache) == []
    assert incomplete(run) == "it measured nothing; summary.json records why"
    assert not list(run.glob("*.png")) and "No artists" not in proc.stdout + proc.stderr
    compare = bench(cache, servers["fast"], tmp_path / "next", "--compare", "latest")
    assert compare.returncode == 2 and "--compare latest: no stored run to compare with" in compare.stderr
    assert not (tmp_path / "next").exists()  # refused before anything was prepared


def test_the_results_folder_is_checked_first_and_made_last(tmp_path: Path, servers: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    proc = bench(cache, servers["fast"], a_file / "run")
    assert proc.returncode == 2 and f"the results folder: {a_file / 'run'} is not a folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    # refused after the folder was named (the recipe has no such model): no folder, no empty logs/
    refused = bench(cache, servers["fast"], tmp_path / "refused", "--model", "no-such-model")
    assert refused.returncode == 2 and "recipe 'cpu' has no model 'no-such-model'" in refused.stderr
    assert not (tmp_path / "refused").exists()
