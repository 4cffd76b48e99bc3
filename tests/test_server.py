"""server.py against a fake engine (specrig.synthetic in a process of its own,
with a stand-in engine-core child): readiness, the process tree, an engine that
dies mid-run (named, with its log, within seconds), teardown without orphans, a
server that accepts connections and never answers (startup still ends at its deadline)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from client_support import run_openai
from specrig.core.errors import EngineError
from specrig.core.prompt import Prompt
from specrig.engine.base import LaunchPlan
from specrig.serve.server import Server, engine_errors, free_port
from specrig.serve.synthetic import Behaviour, command


def fake_server(tmp_path: Path, behaviour: Behaviour, argv: list[str] | None = None) -> Server:
    port = free_port()
    plan = LaunchPlan(argv=argv or command(behaviour, port), environment={}, base_url=f"http://127.0.0.1:{port}")
    return Server(
        plan=plan, log_path=tmp_path / "server.log", health_path="/health", served_name="m", startup_timeout_s=30
    )


def tree_pids(server: Server) -> list[int]:
    leader = psutil.Process(server.proc.pid)  # type: ignore[union-attr]
    return [leader.pid, *(c.pid for c in leader.children(recursive=True))]


def test_engine_core_killed_mid_run_ends_the_run_with_its_error(tmp_path: Path) -> None:
    with fake_server(tmp_path, Behaviour(engine_child=True, token_delay_s=0.005)) as server:
        server.start().wait_ready(poll_s=0.1)
        pids = tree_pids(server)
        assert len(pids) == 2
        threading.Timer(1.0, lambda: psutil.Process(pids[1]).kill()).start()
        t0 = time.monotonic()
        with pytest.raises(EngineError) as ei:
            run_openai(
                server.base_url,
                "m",
                prompts=[Prompt(f"p{i}", "x") for i in range(4)],
                max_tokens=5000,
                concurrency=4,
                watchdog=server.check_alive,
            )
        assert time.monotonic() - t0 < 6
    msg = str(ei.value)
    assert "during the benchmark" in msg
    assert (
        f"EngineCore (pid {pids[1]}) died unexpectedly (returncode -9)" in msg
    )  # the engine's own words, from the log
    assert "last lines of" in msg and "include_usage" not in msg
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_server_exiting_mid_stream_names_its_exit_code(tmp_path: Path) -> None:
    with fake_server(tmp_path, Behaviour(die_after_chunks=5, exit_on_die=True, token_delay_s=0.01)) as server:
        server.start().wait_ready(poll_s=0.1)
        with pytest.raises(EngineError, match="exited during the benchmark .*exit code 3"):
            run_openai(server.base_url, "m", prompts=[Prompt("a", "x")], max_tokens=100, watchdog=server.check_alive)


def test_server_dying_before_ready_shows_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('ValueError: no such flag --bogus', file=sys.stderr); sys.exit(2)"]
    with fake_server(tmp_path, Behaviour(), argv) as server, pytest.raises(EngineError) as ei:
        server.start().wait_ready(poll_s=0.1)
    msg = str(ei.value)
    assert "exited before it was ready" in msg and "exit code 2" in msg
    assert "ValueError: no such flag --bogus" in msg


def test_stop_leaves_no_orphans(tmp_path: Path) -> None:
    server = fake_server(tmp_path, Behaviour(engine_child=True))
    server.start().wait_ready(poll_s=0.1)
    pids = tree_pids(server)
    t0 = time.monotonic()
    server.stop(grace_s=5)
    assert time.monotonic() - t0 < 5
    assert not any(psutil.pid_exists(p) for p in pids)
    server.stop()  # twice is harmless


def test_engine_errors_picks_the_lines_that_say_why(tmp_path: Path) -> None:
    log = tmp_path / "log"
    # the shape of vLLM 0.32's log when its EngineCore is SIGKILLed (seen on the CPU default)
    p = "(APIServer pid=7) ERROR 11-30 22:02:43 [async_llm.py:906] "
    log.write_text(
        "(APIServer pid=7) INFO 11-30 22:00:33 [loggers.py:335] Engine 000: Running: 2 reqs\n"
        "(APIServer pid=7) WARNING 11-30 22:02:43 [core_client.py:817] [shutdown] MPClient: engine core exited "
        "unexpectedly; starting cleanup\n"
        f'{p}AsyncLLM output_handler failed.\n{p}Traceback (most recent call last):\n{p}  File "x.py", line 1\n'
        f"{p}vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        f"{p}vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\nINFO bye\n"
    )
    assert engine_errors(log) == [
        "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]


def test_wait_ready_on_a_server_that_accepts_tcp_but_never_answers_ends_at_its_deadline(tmp_path: Path) -> None:
    with fake_server(tmp_path, Behaviour(never_answer=True)) as server:
        server.startup_timeout_s = 2.0  # each health probe would wait its 5 s; the deadline cuts it short
        t0 = time.monotonic()
        with pytest.raises(EngineError) as ei:
            server.start().wait_ready(poll_s=0.1)
        took = time.monotonic() - t0
        server.check_alive()  # asks the processes, not HTTP: answers at once
        assert time.monotonic() - t0 - took < 1
    assert took < 4, took  # before: one 10 s probe held it long past its 2 s deadline
    msg = str(ei.value)
    assert "did not become healthy within 2 s (its last /health: no answer within" in msg


def test_a_server_does_not_outlive_a_launcher_killed_with_sigkill(tmp_path: Path) -> None:
    """No handler runs on SIGKILL: the kernel's parent-death signal ends the server anyway."""
    import json
    import subprocess
    import sys

    script = f"""
import json, os, signal, sys
from pathlib import Path
from specrig.engine.base import LaunchPlan
from specrig.serve.server import Server, free_port
from specrig.serve.synthetic import Behaviour, command
port = free_port()
plan = LaunchPlan(argv=command(Behaviour(), port), environment={{}}, base_url=f"http://127.0.0.1:{{port}}")
s = Server(plan=plan, log_path=Path({str(tmp_path / "server.log")!r}), health_path="/health", served_name="m", startup_timeout_s=30)
s.start().wait_ready(poll_s=0.1)
print(json.dumps({{"server": s.proc.pid}}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr[-2000:]
    pid = json.loads(proc.stdout.strip().splitlines()[-1])["server"]
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ):
        time.sleep(0.1)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if alive:
        psutil.Process(pid).kill()
    assert not alive, "the server outlived its SIGKILLed launcher"
