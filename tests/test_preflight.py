"""Launch preflight on this machine: who holds the memory, specrig's own
leftovers recognised by their marker, known start failures named."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from specrig.core.errors import EngineError
from specrig.serve.preflight import (
    MARKER,
    check_gpu_memory,
    check_host_memory,
    diagnose_log,
    gpu_holders,
    specrig_servers,
)


def test_host_memory_short_names_the_largest_processes() -> None:
    hog = subprocess.Popen([sys.executable, "-c", "b = bytearray(300 * 2**20); import time; time.sleep(60)"])
    try:
        # let it allocate
        for _ in range(50):
            if psutil.Process(hog.pid).memory_info().rss > 250 * 2**20:
                break
            time.sleep(0.1)
        need = psutil.virtual_memory().available / 2**30 + 1000
        with pytest.raises(EngineError) as ei:
            check_host_memory(need, "a test server")
        assert "GiB is available; the largest processes" in ei.value.message
        assert f"pid {os.getpid()}" in ei.value.message or "pid " in ei.value.message
        assert ei.value.hint and "VLLM_CPU_KVCACHE_SPACE" in ei.value.hint
        check_host_memory(0.01, "a small server")  # enough: no error
    finally:
        hog.kill()
        hog.wait()


def test_specrig_leftovers_are_recognised_by_their_marker() -> None:
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=os.environ | {MARKER: "12345 /tmp/results/x"},
        start_new_session=True,
    )
    try:
        mine = [h for h in specrig_servers() if h.pid == left.pid]
        assert mine and mine[0].specrig == "12345 /tmp/results/x"
        assert f"kill -TERM -{left.pid}" in mine[0].line()
        assert all(h.pid != os.getpid() for h in specrig_servers())  # this test process carries no marker
    finally:
        left.kill()
        left.wait()


def test_no_gpu_driver_means_no_gpu_check() -> None:
    if gpu_holders() is not None:
        pytest.skip("a GPU driver is present here")
    check_gpu_memory(0.99)  # nothing to check on a host without a driver: no error


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "ran out of memory"),
        ("OSError: [Errno 98] Address already in use", "port was taken"),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "kernel library"),
        ("ImportError: libcudart.so.13: cannot open shared object file: No such file or directory", "kernel library"),
        ("INFO all good\nERROR something new", None),
    ],
)
def test_known_start_failures_are_named(log: str, cause: str | None) -> None:
    got = diagnose_log(log)
    assert (got is None) if cause is None else (got is not None and cause in got)
