"""Start an inference server as its own process group, wait until it really
serves (health endpoint, then one real completion), keep its log, and always
tear the whole process tree down. Or attach to one that is already running.

A server that dies, or never gets healthy within its timeout, ends with an
EngineError carrying the tail of its log: never a hang. Once ready, the
server's process tree (front-end, engine core, workers; found with psutil) is
remembered: :meth:`Server.check_alive` (the client's watchdog during a run)
fails as soon as the front-end or one of its direct children is gone, naming it, the front-end's
exit code, the engine's own error lines from the log, and the log's tail.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from specrig.core import atomic
from specrig.core.errors import ConfigError, EngineError
from specrig.core.log import log
from specrig.core.redact import MASK, excerpt, log_tail, redact_argv
from specrig.engine.base import LaunchPlan
from specrig.serve.auth import KEY_HINT, auth_headers, unauthorized

__all__ = ["Server", "attach", "check_port_free", "engine_errors", "free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    """Refuse a ``--port`` a server could not bind, naming why: taken (and by which process), or
    one this user may not bind. Bound as the engines' servers bind (SO_REUSEADDR), so connections
    still closing on it do not count."""
    import errno

    from specrig.serve.preflight import port_holders

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise ConfigError(
                    f"port {port} on 127.0.0.1 cannot be bound by this user ({exc.strerror})",
                    hint="pick a --port of 1024 or above, or omit --port to use a free one",
                ) from None
            holders = port_holders(port)
            held = (
                f": held by {'; '.join(holders)}" if holders else " (no process listens on it: a socket is bound there)"
            )
            raise ConfigError(
                f"port {port} on 127.0.0.1 is already in use{held}",
                hint="stop what listens there, pick another --port, or omit --port to use a free one; "
                f"to measure that server instead, pass --endpoint http://127.0.0.1:{port}",
            ) from None


# Lines of an engine's log that say why it died: an exception's last line (vLLM's
# "EngineDeadError: EngineCore encountered an issue"), "engine core exited unexpectedly",
# a death, a kill; SGLang: "Received sigquit".
_ERROR_LINE = re.compile(r"(\w(Error|Exception)\b:|exited unexpectedly|died|dead\b|fatal|FATAL|Killed|sigquit)")
_LOG_PREFIX = re.compile(r"^.*?\[[\w.]+:\d+\] ")  # vLLM's "(APIServer pid=N) ERROR date [file.py:line] "


def engine_errors(path: Path, lines: int = 400, keep: int = 6) -> list[str]:
    """The last ``keep`` distinct lines among the log's last ``lines`` that say what went wrong."""
    out: dict[str, None] = {}
    for ln in log_tail(path, lines).splitlines():
        if _ERROR_LINE.search(ln):
            out.pop(text := _LOG_PREFIX.sub("", ln.strip()), None)
            out[text] = None
    return list(out)[-keep:]


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


@dataclass(frozen=True)
class _Member:
    """One process of the server's tree, as seen when it became ready."""

    pid: int
    name: str
    create_time: float
    direct: bool
    """A direct child of the front-end (vLLM's EngineCore, SGLang's scheduler): watched
    during runs. Deeper helpers (compile workers) may come and go; a dead worker takes
    its engine core down with it, which is then seen."""


@dataclass
class Server:
    """A launched server. Use as a context manager: exit always tears it down."""

    plan: LaunchPlan
    log_path: Path
    health_path: str
    served_name: str
    startup_timeout_s: float
    probe_timeout_s: float = 5.0
    """The most one health probe may take: a server that accepts TCP and never
    answers HTTP costs a probe this long, never more (the startup deadline holds)."""
    api_key: str | None = field(default=None, repr=False)
    """Sent with every probe (the server was started with ``--api-key``); masked in its log when it stops."""
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_after_s: float | None = None
    _log_file: object = field(default=None, repr=False)
    _tree: list[_Member] = field(default_factory=list, repr=False)

    @property
    def base_url(self) -> str:
        return self.plan.base_url

    def start(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 (closed by stop())
        self._log_file.write(("+ " + " ".join(redact_argv(self.plan.argv)) + "\n").encode())  # type: ignore[attr-defined]
        self._log_file.flush()  # type: ignore[attr-defined]
        env = os.environ | self.plan.environment
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                self.plan.argv,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise EngineError(
                f"could not start {self.plan.argv[0]}: {exc}", hint="is the engine environment made?"
            ) from None
        return self

    def _died(self, what: str, detail: str = "") -> EngineError:
        rc = self.proc.poll() if self.proc else None
        errors = engine_errors(self.log_path)
        said = ("\nthe engine's error lines:\n  " + "\n  ".join(errors)) if errors else ""
        return EngineError(
            f"the server {what} ({detail}{'; ' if detail else ''}server process: {_describe_exit(rc)}){said}\n"
            f"last lines of {self.log_path}:\n{log_tail(self.log_path)}",
            hint=f"full log: {self.log_path}",
        )

    def wait_ready(self, *, poll_s: float = 2.0) -> float:
        """Block until /health answers 200 and one real completion succeeds,
        within ``startup_timeout_s`` (each health probe within ``probe_timeout_s``,
        so a server that accepts connections but never answers cannot hold it past
        the deadline by more than that; the completion's wait ends at the deadline,
        and is at least 30 s)."""
        assert self.proc is not None
        deadline = self.started_at + self.startup_timeout_s
        last_note = 0.0
        last_probe = "no answer yet"
        with httpx.Client(
            base_url=self.base_url, timeout=self.probe_timeout_s, headers=auth_headers(self.api_key)
        ) as client:
            while True:
                if self.proc.poll() is not None:
                    raise self._died("exited before it was ready")
                left = max(0.2, min(self.probe_timeout_s, deadline - time.monotonic()))
                try:
                    r = client.get(self.health_path, timeout=left)
                    if r.status_code == 200:
                        break
                    last_probe = f"HTTP {r.status_code}"
                except httpx.TimeoutException as exc:
                    last_probe = f"no answer within {left:.1f} s ({type(exc).__name__})"
                except httpx.HTTPError as exc:
                    last_probe = f"{type(exc).__name__}: {exc or 'no detail'}"
                now = time.monotonic()
                if now > deadline:
                    raise EngineError(
                        f"the server did not become healthy within {self.startup_timeout_s:.0f} s "
                        f"(its last {self.health_path}: {last_probe}); "
                        f"last lines of {self.log_path}:\n{log_tail(self.log_path)}",
                        hint="raise [engine.X].startup_timeout_s in the recipe if it is only slow",
                    )
                if now - last_note > 30:
                    log.info(f"waiting for {self.base_url}{self.health_path} ({now - self.started_at:.0f} s)")
                    last_note = now
                time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
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
                if r.status_code in (401, 403):
                    raise EngineError(
                        unauthorized("the first completion (POST /v1/completions)", r.status_code, bool(self.api_key)),
                        hint=KEY_HINT,
                    )
                raise EngineError(
                    f"the first completion returned HTTP {r.status_code}: {excerpt(r.text, 500)}",
                    hint=f"server log: {self.log_path}",
                )
        self.ready_after_s = time.monotonic() - self.started_at
        self._tree = self._snapshot()
        return self.ready_after_s

    def _processes(self) -> list[psutil.Process]:
        """The server's process tree now (leader first)."""
        if self.proc is None:
            return []
        try:
            leader = psutil.Process(self.proc.pid)
            return [leader, *leader.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _snapshot(self) -> list[_Member]:
        out = []
        leader = self.proc.pid if self.proc else None
        for p in self._processes():
            with contextlib.suppress(psutil.Error):
                out.append(_Member(p.pid, p.name(), p.create_time(), p.ppid() == leader))
        return out

    def check_alive(self) -> None:
        """Raise EngineError if the server, or any of its direct child processes
        at readiness (e.g. vLLM's EngineCore), is gone. It asks the processes,
        never the server over HTTP, so it cannot hang on a server that stopped
        answering (the client's stall limits see that); it is quick enough to be
        called on the client's event loop every half second."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            raise self._died("exited during the benchmark")
        for m in self._tree[1:]:
            if not m.direct:
                continue
            try:
                p = psutil.Process(m.pid)
                gone = p.create_time() != m.create_time or p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            if gone:
                time.sleep(1.0)  # let the front-end notice and log it, perhaps exit
                raise self._died("lost its engine during the benchmark", f"process {m.name!r} (pid {m.pid}) is gone")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's front-end (it stops its own children) and wait up to
        ``grace_s``; then whatever of its process tree is left (engine cores and
        workers may outlive the front-end) gets SIGTERM, then SIGKILL."""
        if self.proc is None:
            return
        procs = self._processes()
        known = {p.pid for p in procs}
        for m in self._tree:  # processes orphaned by a dead front-end are no longer its children
            if m.pid not in known:
                try:
                    p = psutil.Process(m.pid)
                    if p.create_time() == m.create_time:
                        procs.append(p)
                except psutil.NoSuchProcess:
                    pass
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        procs = [p for p in procs if p.pid != self.proc.pid]
        for sig in ("terminate", "kill"):
            _, alive = psutil.wait_procs(procs, timeout=0.5 if sig == "terminate" else 5.0)
            for p in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    getattr(p, sig)()
            procs = alive
        psutil.wait_procs(procs, timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
            self._mask_key_in_log()
        self.proc = None

    def _mask_key_in_log(self) -> None:
        """The server's own log, with the API key masked wherever the engine printed it."""
        if not self.api_key:
            return
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return
        key = self.api_key.encode()
        if key in data:
            atomic.write_bytes(self.log_path, data.replace(key, MASK.encode()))

    def __enter__(self) -> Server:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def attach(base_url: str, health_path: str, timeout_s: float = 10.0, *, api_key: str | None = None) -> str:
    """Check that a running server answers, healthy, and speaks the OpenAI API (``GET /v1/models``
    lists its models, with the key when given); returns the normalised base URL. specrig keeps no
    log of a server it attached to, so no error points at one."""
    url = base_url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    with httpx.Client(timeout=timeout_s, headers=auth_headers(api_key)) as client:
        try:
            health = client.get(url + health_path)
            models = client.get(url + "/v1/models")
        except httpx.HTTPError as exc:
            raise EngineError(
                f"cannot reach --endpoint {url} ({type(exc).__name__}: {exc})",
                hint="check the URL and that the server is running (e.g. curl it), or omit --endpoint to launch one",
            ) from None
    if models.status_code in (401, 403):
        raise EngineError(
            unauthorized(f"--endpoint {url}: GET /v1/models", models.status_code, bool(api_key)), hint=KEY_HINT
        )
    if not _lists_models(models):
        raise EngineError(
            f"--endpoint {url} does not speak the OpenAI API: GET /v1/models answered HTTP {models.status_code}"
            f"{_type(models)}, first bytes: {excerpt(models.content)!r}",
            hint="point --endpoint at the base URL of an OpenAI-compatible server (vLLM, SGLang: "
            "http://HOST:PORT, e.g. the URL `vllm serve` prints), or omit --endpoint to launch one",
        )
    if health.status_code != 200:
        raise EngineError(
            f"--endpoint {url}{health_path} answered HTTP {health.status_code}{_type(health)}, "
            f"first bytes: {excerpt(health.content)!r}",
            hint="the server is not healthy (still starting, or its engine failed): see its own log, "
            "and run again once it answers 200",
        )
    return url


def _lists_models(r: httpx.Response) -> bool:
    """An OpenAI model list: 200, a JSON object whose ``data`` is a list."""
    if r.status_code != 200:
        return False
    try:
        body = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), list)


def _type(r: httpx.Response) -> str:
    ctype = r.headers.get("content-type")
    return f" ({ctype.split(';')[0]})" if ctype else ""


def _libc() -> object | None:
    """glibc, loaded in the parent (a forked child must not import or load libraries)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _die_with_parent() -> None:
    """In the child, before exec: have the kernel send it SIGTERM when specrig dies, even by
    SIGKILL (Linux ``PR_SET_PDEATHSIG`` = 1), so no server outlives the process that launched it."""
    if _LIBC is not None:
        _LIBC.prctl(1, 15, 0, 0, 0)  # type: ignore[attr-defined]
