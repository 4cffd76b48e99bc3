"""Launch preflight on this machine: who holds the memory, specrig's own
leftovers recognised by their marker, known start failures named."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from specrig.core.errors import ConfigError, EngineError
from specrig.serve.preflight import (
    MARKER,
    check_gpu_memory,
    check_host_memory,
    diagnose_log,
    gpu_holders,
    port_holders,
    specrig_servers,
)
from specrig.serve.server import check_port_free


def test_host_memory_short_names_the_largest_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The error lists the processes by their real pid, largest first; a leftover specrig server is named
    with the command that stops it. Only the hog and this process are listed (whatever else runs on the
    machine: CI jobs, other tests), so the order and the pids are known."""
    hog = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(300 * 2**20); import time; time.sleep(60)"],
        env=os.environ | {MARKER: "4242 /tmp/results/hog"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30  # until it has allocated (bounded)
        while psutil.Process(hog.pid).memory_info().rss < 300 * 2**20:
            assert time.monotonic() < deadline, "the hog did not allocate its 300 MiB"
            time.sleep(0.05)
        assert psutil.Process().memory_info().rss < 300 * 2**20  # this process is the smaller one
        every = psutil.process_iter
        ours = {hog.pid, os.getpid()}
        monkeypatch.setattr(psutil, "process_iter", lambda *a, **kw: [p for p in every(*a, **kw) if p.pid in ours])
        need = psutil.virtual_memory().available / 2**30 + 1000
        with pytest.raises(EngineError) as ei:
            check_host_memory(need, "a test server")
        head, _, listed = ei.value.message.partition("; the largest processes:\n")
        assert head.startswith("a test server needs about") and "GiB is available" in head
        lines = listed.splitlines()
        assert [int(ln.split()[1].rstrip(":")) for ln in lines] == [hog.pid, os.getpid()]  # largest first
        assert "bytearray(300 * 2**20)" in lines[0] and "holds 0.3 GiB" in lines[0]
        assert f"specrig launched: 4242 /tmp/results/hog; stop it with `kill -TERM -{hog.pid}`" in lines[0]
        assert "specrig launched" not in lines[1]  # this process carries no marker
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


def test_no_gpu_driver_means_no_gpu_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a driver (neither NVML nor nvidia-smi answers) nothing is checked; with one, the same call
    refuses a GPU that is short and names the process holding it by its pid."""
    from specrig.serve import preflight

    monkeypatch.setattr(preflight, "_nvml", lambda: None)
    monkeypatch.setattr(preflight, "_nvidia_smi", lambda: None)
    assert gpu_holders() is None
    check_gpu_memory(0.99)  # nothing to check on a host without a driver: no error
    # the same host with a driver that reports GPU 0: 80 GiB, 10 free, 70 held by this process
    monkeypatch.setattr(preflight, "_nvidia_smi", lambda: [(0, 80.0, 10.0, [(os.getpid(), 70.0)])])
    with pytest.raises(EngineError) as ei:
        check_gpu_memory(0.5)
    assert "GPU 0: 10.0 of 80.0 GiB free, the server asks for 40.0 GiB" in ei.value.message
    assert f"  pid {os.getpid()}: " in ei.value.message and "holds 70.0 GiB" in ei.value.message
    assert ei.value.hint and "--gpu-memory-utilization" in ei.value.hint
    check_gpu_memory(0.1)  # 8 GiB asked, 10 free: no error


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


def _listening(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A real process of its own listening on a free port (its pid and command line are known)."""
    script = tmp_path / "port-holder.py"
    script.write_text(
        "import socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_a_taken_port_names_the_process_listening_there(tmp_path: Path) -> None:
    holder, port = _listening(tmp_path)
    try:
        with pytest.raises(ConfigError) as ei:
            check_port_free(port)
        said = ei.value.message
        assert said.startswith(f"port {port} on 127.0.0.1 is already in use: held by pid {holder.pid}: ")
        assert f"{sys.executable} {tmp_path / 'port-holder.py'}" in said
        assert f"--endpoint http://127.0.0.1:{port}" in (ei.value.hint or "")
    finally:
        holder.kill()
        holder.wait()
    check_port_free(port)  # free again: its closed connections do not count


def test_a_port_holder_is_found_where_the_system_table_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading every socket may be refused (psutil.AccessDenied, as on macOS or a hardened /proc):
    each visible process's own sockets name it; a socket whose owner is hidden is said so."""
    holder, port = _listening(tmp_path)
    try:

        def refused(kind: str = "inet") -> list:
            raise psutil.AccessDenied(pid=None, msg="refused")

        monkeypatch.setattr(psutil, "net_connections", refused)
        [line] = port_holders(port)
        assert line.startswith(f"pid {holder.pid}: ") and "port-holder" in line
        # the system table as another user reads it: the socket is there, its process is not said
        hidden = SimpleNamespace(status=psutil.CONN_LISTEN, laddr=SimpleNamespace(ip="127.0.0.1", port=port), pid=None)
        monkeypatch.setattr(psutil, "net_connections", lambda kind="inet": [hidden])
        assert port_holders(port) == [
            f"a process this user may not see (another user's: `sudo ss -ltnp 'sport = :{port}'` names it)"
        ]
    finally:
        holder.kill()
        holder.wait()
