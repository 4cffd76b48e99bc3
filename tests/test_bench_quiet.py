"""``specrig bench`` speaks for itself: pytest's own report (``1 passed in 1.4s`` printed just before
a regression failure, ``no tests ran in 108 s`` and the ``Interrupted`` banner after an interrupted
measurement, the warnings summary, pytest-benchmark's table) stays out of the console and is kept
in the run's ``logs/pytest.log``. Real benches, ``--endpoint`` attached to the synthetic SSE
server; a few seconds each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from specrig.lab.folder import incomplete
from specrig.serve.synthetic import Behaviour, serve_in_process

PYTEST_WORDS = ("passed", "no tests ran", "warnings summary", "Interrupted", "Performance has regressed", "Legend")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with (
        serve_in_process(Behaviour(token_delay_s=0.001)) as fast,
        serve_in_process(Behaviour(token_delay_s=0.03)) as slow,
    ):
        yield {"fast": fast.base_url, "slow": slow.base_url}


def argv(endpoint: str, results: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specrig.cli",
        "bench",
        "--recipe",
        "cpu",
        "--endpoint",
        endpoint,
        "--warmup",
        "0",
    ] + [
        "--memory-bandwidth",
        "10",
        "--results",
        str(results),
        *args,
    ]


def env(tmp_path: Path) -> dict[str, str]:
    return os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


def test_a_regression_is_said_once_by_specrig(tmp_path: Path, servers: dict[str, str]) -> None:
    first = subprocess.run(
        argv(servers["fast"], tmp_path / "a", "--max-tokens", "8"), capture_output=True, text=True, env=env(tmp_path)
    )
    assert first.returncode == 0, first.stdout + first.stderr
    slower = subprocess.run(
        argv(servers["slow"], tmp_path / "b", "--max-tokens", "8", "--compare", "latest", "--compare-fail", "mean:50%"),
        capture_output=True,
        text=True,
        env=env(tmp_path),
    )
    console = slower.stdout + slower.stderr
    assert slower.returncode == 11, console
    assert "regression against the stored run" in console and "decode tok/s" in slower.stdout  # specrig's own
    assert not [w for w in PYTEST_WORDS if w in console], console
    log = (tmp_path / "b" / "logs" / "pytest.log").read_text()
    assert "1 passed" in log and "(NOW)" in log  # pytest's summary line, pytest-benchmark's table
    assert f"pytest-benchmark's table: {tmp_path / 'b' / 'logs' / 'pytest.log'}" in " ".join(slower.stderr.split())


def test_an_interrupted_measurement_is_said_once_by_specrig(tmp_path: Path, servers: dict[str, str]) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        argv(servers["slow"], run, "--max-tokens", "2000"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(tmp_path),
        start_new_session=True,
    )
    lines: list[str] = []
    measuring = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "] measuring" in line:
                measuring.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert measuring.wait(300), "".join(lines)
        tree = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130, "".join(lines)
        reader.join(timeout=10)
        console = "".join(lines)
        assert "interrupted (SIGINT): every process specrig started is stopped" in console
        assert not [w for w in PYTEST_WORDS if w in console], console
        assert "Traceback" not in console
        log = (run / "logs" / "pytest.log").read_text()
        assert "Interrupted: SIGINT" in log and " in " in log.splitlines()[-1]  # pytest's summary line
        assert incomplete(run) == "interrupted (SIGINT)"
        assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
