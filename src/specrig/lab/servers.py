"""The lab's servers: at most one measured at a time, and (``launch_ahead`` N > 1,
a GPU host) the next N in the cases' order started together, each with 1/N of the
GPU memory the recipe gives one server and (vLLM) a fixed KV cache, so that
concurrent start-ups cannot size their caches from each other's allocations. A
batch is waited for as a whole before any of it is measured: start-ups overlap
each other, never a measurement. A server is stopped when its configuration is
done; a failed start is kept and raised when that configuration's turn comes.

A server whose port specrig picked (no ``--port``) and lost to another process
before the engine bound it is started again on a fresh port, :data:`PORT_STARTS`
starts in all, each said in the log; the user's ``--port`` is never changed."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from specrig.core.errors import EngineError
from specrig.core.log import log
from specrig.core.redact import log_tail
from specrig.engine.base import Engine, LaunchPlan
from specrig.lab.identity import ConfigId
from specrig.lab.plan import BenchPlan
from specrig.model.weights import weight_read
from specrig.recipe.schema import Recipe
from specrig.serve.preflight import MARKER, check_gpu_memory, check_host_memory, diagnose_log, port_taken
from specrig.serve.server import Server, free_port

__all__ = ["Servers", "PORT_STARTS"]

Key = tuple[ConfigId, int]
"""(configuration, repeat): one server."""

PORT_STARTS = 3
"""Starts of one server on ports specrig picked, while each is lost to another process before the engine binds it."""


class Servers:
    def __init__(self, plan: BenchPlan, recipe: Recipe, engine: Engine, results: Path) -> None:
        self.plan, self.recipe, self.engine, self.results = plan, recipe, engine, results
        self.active: Server | None = None
        self._serving: Key | None = None
        self._pool: dict[Key, Server] = {}
        self._failed: dict[Key, EngineError] = {}
        self.started_together: dict[Key, int] = {}
        self.pick_port: Callable[[], int] = free_port
        """Where a server's port comes from when the user gave none."""

    def url(self, key: Key, done: set[Key], on_ready: Callable[[ConfigId, int, Server], None]) -> str:
        """The base URL of ``key``'s server: the one being measured, a ready one started
        ahead, or a new batch (``done``: the keys already measured, never started again)."""
        if self._serving == key and self.active is not None:
            self.active.check_alive()
            return self.active.base_url
        self._stop_active()
        if key not in self._pool and key not in self._failed:
            self._launch_batch(key, done)
        if key in self._failed:
            raise self._failed.pop(key)
        server = self._pool.pop(key)
        self.active, self._serving = server, key
        on_ready(key[0], key[1], server)
        return server.base_url

    def _ahead(self, key: Key, done: set[Key]) -> list[Key]:
        """``key`` and the servers after it in the cases' order, up to the launch-ahead count."""
        order = list(dict.fromkeys((c.config, c.repeat) for c in self.plan.cases()))
        start = order.index(key) if key in order else len(order)
        later = [k for k in order[start + 1 :] if k not in done]
        return [key, *later][: self._share()[0]]

    def _share(self, wanted: int | None = None) -> tuple[int, list[str]]:
        """(servers at once, the server arguments that give each its share of the GPU) for
        ``wanted`` servers (default: the launch-ahead count), fewer where the GPU is too small."""
        n = min(self.plan.launch_ahead, wanted or self.plan.launch_ahead)
        gpus = self.plan.host.gpus
        if n <= 1 or not self.recipe.needs_gpu or not gpus:
            return 1, []
        args = [*self.recipe.engine[self.plan.engine].args, *self.plan.engine_args]
        util = self.engine.memory_share(args)
        declared = (self.plan.roofline.weight_gb_per_token or 0.0) * 1e9 / 2**30 if self.plan.roofline else 0.0
        weights = max(_weights_gib(self.plan.model_path), declared) / max(1, self.recipe.model.tensor_parallel)
        gib = min(g.memory_gib for g in gpus)
        while n > 1:
            each = util / n
            kv = each * gib - 1.2 * weights - 4.0  # activations, CUDA graphs and a drafter fit in 4 GiB here
            if kv >= 1.0:
                args = self.engine.shared_gpu_args(each, int(kv * 2**30))
                return (n, args) if args else (1, [])  # an engine that cannot share starts one at a time
            n -= 1
        return 1, []

    def _launch_batch(self, key: Key, done: set[Key]) -> None:
        """Start ``key``'s server and the next ones together; wait until every one is ready."""
        keys = self._ahead(key, done)
        n, share = self._share(len(keys))
        if len(keys) > 1:
            names = ", ".join(f"{c.name} r{r}" for c, r in keys)
            log.step(f"starting {len(keys)} servers together, each with 1/{n} of the GPU memory: {names}")
        started: list[tuple[Key, Server]] = []
        for k in keys:
            try:
                started.append((k, self._launch(*k, share)))
            except EngineError as exc:
                self._failed[k] = exc
        for k, server in started:
            self.started_together[k] = len(keys)
            try:
                self._pool[k] = self._ready(k, server, share)
            except EngineError as exc:
                self._failed[k] = exc

    def _ready(self, key: Key, server: Server, share: list[str]) -> Server:
        """``server`` once ready. One that lost the port specrig picked for it is started again on a
        fresh one (:data:`PORT_STARTS` starts in all); a failed start is raised with its likely cause."""
        user_port = self._user_port(share)
        for start in range(1, PORT_STARTS + 1):
            try:
                ready = server.wait_ready()
            except EngineError as exc:
                text = log_tail(server.log_path, 400)
                server.stop()
                if not user_port and start < PORT_STARTS and port_taken(text):
                    log.warn(
                        f"[{key[0].name} r{key[1]}] port {server.base_url.rsplit(':', 1)[-1]}, which specrig picked, was "
                        f"taken by another process before the server bound it: starting it again on another port "
                        f"(start {start + 1} of {PORT_STARTS})"
                    )
                    server = self._launch(*key, share)
                    continue
                cause = diagnose_log(text, user_port=user_port, starts=start)
                if cause:
                    exc.message = f"{exc.message}\nlikely cause: {cause}"
                raise
            log.step(f"[{key[0].name} r{key[1]}] ready after {ready:.0f} s")
            return server
        raise AssertionError("unreachable: the last start returns or raises")

    def _user_port(self, share: list[str]) -> bool:
        """Does a server started with ``share`` listen on the user's ``--port`` (servers started
        together each take a free one)?"""
        return bool(self.plan.port) and not share

    def _launch(self, config: ConfigId, repeat: int, share: list[str]) -> Server:
        cfg = self.plan.config(config)
        port = self.plan.port if self.plan.port and self._user_port(share) else self.pick_port()
        launch = self.engine.launch(
            python=str(self.plan.python),
            model_path=str(self.plan.model_path),
            served_name=self.plan.served_name,
            port=port,
            recipe=self.recipe,
            spec=cfg.spec,
            drafter=cfg.drafter,
            extra_args=[*self.plan.engine_args, *cfg.server_args, *share],
        )
        extra_env = {MARKER: f"{os.getpid()} {self.results}"}
        if self.plan.profile:
            argv, env = self.engine.profile_launch(str(self.results / "profiles" / config.name))
            launch = dataclasses.replace(launch, argv=[*launch.argv, *argv])
            extra_env |= env
        launch = dataclasses.replace(launch, environment=launch.environment | extra_env)
        self._preflight(launch)
        server = Server(
            plan=launch,
            log_path=self.results / "logs" / f"server-{config.name}-r{repeat}.log",
            health_path=self.engine.health_path,
            served_name=self.plan.served_name,
            startup_timeout_s=self.plan.startup_timeout_s,
            api_key=self.plan.api_key,
        )
        log.step(f"[{config.name} r{repeat}] starting {self.plan.engine} on {launch.base_url} (log: {server.log_path})")
        return server.start()

    def _preflight(self, launch: LaunchPlan) -> None:
        """Is the machine free for this server? Names who holds the memory when it is not."""
        if self.recipe.torch.variant == "cpu":
            kv = float(launch.environment.get("VLLM_CPU_KVCACHE_SPACE") or 4)
            model = sum(f.stat().st_size for f in Path(str(self.plan.model_path)).rglob("*") if f.is_file()) / 2**30
            check_host_memory(kv + 2 * model + 1.0, f"the {self.plan.engine} CPU server (KV cache {kv:g} GiB + model)")
            return
        check_gpu_memory(self.engine.memory_share(launch.argv), gpus=max(1, self.recipe.model.tensor_parallel))

    def _stop_active(self) -> None:
        if self.active is not None:
            self.active.stop()
        self.active = None
        self._serving = None

    def close(self) -> None:
        self._stop_active()
        for server in self._pool.values():
            server.stop()
        self._pool.clear()


def _weights_gib(model_path: str | None) -> float:
    """The served model's weights, GiB: its weight files, else (a dummy-weight shape) what its
    config.json makes the engine hold (a mixture of experts holds every expert, not the few a
    token reads)."""
    if not model_path:
        return 0.0
    files = sum(f.stat().st_size for f in Path(model_path).glob("*.safetensors"))
    if files:
        return files / 2**30
    w = weight_read(model_path)
    return w.total_bytes / 2**30 if w else 0.0
