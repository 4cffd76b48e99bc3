"""A launched server's port: one specrig picked and lost to another process before the server bound
it is picked again (bounded, said in the log); the user's ``--port`` is never changed, and only then
does the error say "pass another --port". Real server processes (specrig's synthetic one, through an
engine adapter that launches it), a real socket holding the port; no engine, a few seconds each."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specrig.core.errors import EngineError
from specrig.core.log import log
from specrig.engine.base import LaunchPlan
from specrig.lab.plan import BenchPlan, ConfigId, ConfigPlan
from specrig.lab.results import Workload
from specrig.lab.servers import PORT_STARTS, Servers
from specrig.recipe.schema import load_recipe
from specrig.serve.server import free_port
from specrig.serve.synthetic import Behaviour, command


class SyntheticEngine:
    """An engine adapter whose server is specrig's synthetic one, on the port it is given."""

    name = "vllm"
    health_path = "/health"
    starts: list[int]

    def __init__(self) -> None:
        self.starts = []

    def launch(self, *, port: int, **_: object) -> LaunchPlan:
        self.starts.append(port)
        # no KV cache to reserve: the CPU preflight asks for 1 GiB of free memory only
        env = {"VLLM_CPU_KVCACHE_SPACE": "0"}
        return LaunchPlan(argv=command(Behaviour(), port), environment=env, base_url=f"http://127.0.0.1:{port}")


@pytest.fixture
def held() -> Iterator[int]:
    """A port another process holds (listening), as one that won the race would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _servers(tmp_path: Path, port: int | None = None) -> tuple[Servers, SyntheticEngine]:
    recipe = load_recipe("cpu")
    (tmp_path / "model").mkdir(exist_ok=True)
    plan = BenchPlan(
        recipe="cpu",
        recipe_path=str(recipe.path),
        engine="vllm",
        results_dir=str(tmp_path),
        configs=[ConfigPlan(name="baseline")],
        workload=Workload(stall_timeout_s=60.0, first_token_timeout_s=60.0),
        python="/unused/python",
        model_path=str(tmp_path / "model"),
        served_name="smollm2",
        port=port,
        startup_timeout_s=60,
    )
    engine = SyntheticEngine()
    return Servers(plan, recipe, engine, tmp_path), engine  # type: ignore[arg-type]


def _picks(*ports: int) -> Callable[[], int]:
    """The ports specrig's pick returns, in order: these first, then free ones."""
    queue = list(ports)
    return lambda: queue.pop(0) if queue else free_port()


def _url(servers: Servers) -> tuple[str, str]:
    """The baseline's server URL, and what the log said meanwhile (on one line)."""
    with log.console.capture() as captured:
        url = servers.url((ConfigId(), 0), set(), lambda *_: None)
    return url, " ".join(captured.get().split())


def test_a_picked_port_lost_to_a_race_is_picked_again(tmp_path: Path, held: int) -> None:
    servers, engine = _servers(tmp_path)
    servers.pick_port = _picks(held)
    try:
        url, said = _url(servers)
    finally:
        servers.close()
    assert engine.starts[0] == held and len(engine.starts) == 2 and url.endswith(f":{engine.starts[1]}")
    assert f"port {held}, which specrig picked, was taken by another process" in said
    assert f"start 2 of {PORT_STARTS}" in said


def test_picked_ports_lost_every_time_end_after_a_bounded_number_of_starts(tmp_path: Path, held: int) -> None:
    servers, engine = _servers(tmp_path)
    servers.pick_port = lambda: held
    with pytest.raises(EngineError) as ei:
        _url(servers)
    servers.close()
    assert engine.starts == [held] * PORT_STARTS
    message = ei.value.message
    assert "likely cause: the server's port was taken" in message
    assert f"picked a free port {PORT_STARTS} time(s)" in message and "--port" not in message


def test_the_users_port_is_not_changed_and_the_hint_names_it(tmp_path: Path, held: int) -> None:
    servers, engine = _servers(tmp_path, port=held)
    servers.pick_port = lambda: pytest.fail("the user's --port is never replaced by a picked one")
    with pytest.raises(EngineError) as ei:
        _url(servers)
    servers.close()
    assert engine.starts == [held]
    assert "likely cause: the server's port was taken" in ei.value.message
    assert "pass another --port" in ei.value.message
