"""Start an inference server as its own process group, wait until it really
serves (health endpoint, then one real completion), keep its log, and always
tear the whole group down. Or attach to one that is already running.

A server that dies, or never gets healthy within its timeout, ends with an
EngineError carrying the tail of its log: never a hang.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from .engines.base import LaunchPlan
from .errors import ConfigError, EngineError
from .log import log

__all__ = ["Server", "free_port", "check_port_free", "attach", "log_tail"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ConfigError(
                f"port {port} on 127.0.0.1 is already in use",
                hint="stop what listens there, pick another --port, or omit --port to use a free one; "
                "to measure that server instead, pass --endpoint http://127.0.0.1:%d" % port,
            ) from None


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip()
    except OSError:
        return "(no log)"


@dataclass
class Server:
    """A launched server. Use as a context manager: exit always tears it down."""

    plan: LaunchPlan
    log_path: Path
    health_path: str
    served_name: str
    startup_timeout_s: float
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_after_s: float | None = None
    _log_file: object = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return self.plan.base_url

    def start(self) -> "Server":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "wb")
        self._log_file.write(("+ " + " ".join(self.plan.argv) + "\n").encode())  # type: ignore[attr-defined]
        self._log_file.flush()  # type: ignore[attr-defined]
        env = os.environ | self.plan.environment
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                self.plan.argv, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise EngineError(f"could not start {self.plan.argv[0]}: {exc}", hint="is the engine environment made?") from None
        return self

    def _died(self, what: str) -> EngineError:
        rc = self.proc.poll() if self.proc else None
        return EngineError(
            f"the server {what} (exit code {rc}); last lines of {self.log_path}:\n{log_tail(self.log_path)}",
            hint=f"full log: {self.log_path}",
        )

    def wait_ready(self, *, poll_s: float = 2.0) -> float:
        """Block until /health answers 200 and one real completion succeeds."""
        assert self.proc is not None
        deadline = self.started_at + self.startup_timeout_s
        last_note = 0.0
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while True:
                if self.proc.poll() is not None:
                    raise self._died("exited before it was ready")
                try:
                    if client.get(self.health_path).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                now = time.monotonic()
                if now > deadline:
                    raise EngineError(
                        f"the server did not become healthy within {self.startup_timeout_s:.0f} s; "
                        f"last lines of {self.log_path}:\n{log_tail(self.log_path)}",
                        hint="raise [engine.X].startup_timeout_s in the recipe if it is only slow",
                    )
                if now - last_note > 30:
                    log.info(f"waiting for {self.base_url}{self.health_path} ({now - self.started_at:.0f} s)")
                    last_note = now
                time.sleep(poll_s)
            # healthy is not enough: prove a forward pass works
            remaining = max(30.0, deadline - time.monotonic())
            try:
                r = client.post(
                    "/v1/completions",
                    json={"model": self.served_name, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
                    timeout=remaining,
                )
            except httpx.HTTPError as exc:
                if self.proc.poll() is not None:
                    raise self._died("died on its first completion") from None
                raise EngineError(f"the first completion failed: {exc}; log: {self.log_path}") from None
            if r.status_code != 200:
                if self.proc.poll() is not None:
                    raise self._died("died on its first completion")
                raise EngineError(
                    f"the first completion returned HTTP {r.status_code}: {r.text[:500]}",
                    hint=f"server log: {self.log_path}",
                )
        self.ready_after_s = time.monotonic() - self.started_at
        return self.ready_after_s

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise self._died("exited during the benchmark")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the whole process group, SIGKILL what is left after grace_s."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:  # children (engine core, workers) may outlive the leader
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        self.proc = None

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def attach(base_url: str, health_path: str, timeout_s: float = 10.0) -> str:
    """Check that a running server answers; returns the normalised base URL."""
    url = base_url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    try:
        r = httpx.get(url + health_path, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EngineError(
            f"cannot reach --endpoint {url} ({type(exc).__name__}: {exc})",
            hint="check the URL and that the server is running (e.g. curl it), or omit --endpoint to launch one",
        ) from None
    if r.status_code != 200:
        raise EngineError(f"--endpoint {url}{health_path} answered HTTP {r.status_code}", hint="is the server healthy?")
    return url
