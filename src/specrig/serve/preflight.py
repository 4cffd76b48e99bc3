"""Before a server starts: is the machine free for it, and if not, who holds it.

The port must be free (when it is not, the error names the process listening there: pid and
command line, or that its owner is hidden from this user); a GPU engine needs ``total x gpu_memory_utilization`` of
every GPU it uses free (NVML, through ``nvidia-ml-py``; ``nvidia-smi`` when the
library finds no driver), a CPU engine its KV cache plus the model in host
memory. When short, the error names the processes holding the memory (pid,
command line, memory) and, when they are servers specrig launched (each carries
the marker :data:`MARKER` in its environment), how to stop them. After a server
failed to start, :func:`diagnose_log` names a known cause from its log (out of
memory, a port in use, a missing kernel) before the log tail is shown."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import psutil

from specrig.core.errors import EngineError

__all__ = [
    "MARKER",
    "Holder",
    "gpu_holders",
    "check_gpu_memory",
    "check_host_memory",
    "diagnose_log",
    "port_taken",
    "specrig_servers",
    "port_holders",
]

MARKER = "SPECRIG_LAUNCHED_BY"
"""Environment variable set on every server specrig launches (value: the launching pid and results folder)."""


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    memory_gib: float
    specrig: str | None = None
    """The marker's value when specrig launched it (a leftover), else None."""

    def line(self) -> str:
        who = (
            f" (a server specrig launched: {self.specrig}; stop it with `kill -TERM -{_pgid(self.pid)}`)"
            if self.specrig
            else ""
        )
        return f"pid {self.pid}: {self.command[:160]} holds {self.memory_gib:.1f} GiB{who}"


def _pgid(pid: int) -> int:
    import os

    try:
        return os.getpgid(pid)
    except OSError:
        return pid


def _marker(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get(MARKER)
    except (psutil.Error, OSError):
        return None


def _command(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def _nvml() -> list[tuple[int, float, float, list[tuple[int, float]]]] | None:
    """Per GPU: (index, total GiB, free GiB, [(pid, GiB used)]); None without NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            procs = [(p.pid, (p.usedGpuMemory or 0) / 2**30) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            out.append((i, mem.total / 2**30, mem.free / 2**30, procs))
        return out
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi() -> list[tuple[int, float, float, list[tuple[int, float]]]] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        gpus = subprocess.run(
            [exe, "--query-gpu=index,memory.total,memory.free,uuid", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        apps = subprocess.run(
            [exe, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    by_uuid: dict[str, list[tuple[int, float]]] = {}
    for line in apps.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit():
            by_uuid.setdefault(parts[0], []).append((int(parts[1]), float(parts[2] or 0) / 1024))
    out = []
    for line in gpus.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 4:
            out.append((int(parts[0]), float(parts[1]) / 1024, float(parts[2]) / 1024, by_uuid.get(parts[3], [])))
    return out


def gpu_holders() -> list[tuple[int, float, float, list[Holder]]] | None:
    """Per GPU: (index, total GiB, free GiB, the processes holding its memory); None without a GPU driver."""
    raw = _nvml() or _nvidia_smi()
    if raw is None:
        return None
    return [
        (i, total, free, [Holder(pid, _command(pid), gib, _marker(pid)) for pid, gib in procs])
        for i, total, free, procs in raw
    ]


def check_gpu_memory(utilization: float, gpus: int = 1) -> None:
    """Refuse to launch when the first ``gpus`` GPUs lack ``utilization`` of their memory, naming who holds it."""
    info = gpu_holders()
    if not info:
        return
    short = [(i, total, free, holders) for i, total, free, holders in info[:gpus] if free < total * utilization]
    if not short:
        return
    lines = []
    for i, total, free, holders in short:
        lines.append(f"GPU {i}: {free:.1f} of {total:.1f} GiB free, the server asks for {total * utilization:.1f} GiB")
        lines += [f"  {h.line()}" for h in holders] or ["  (no process listed: another container may hold it)"]
    leftovers = [h for *_, hs in short for h in hs if h.specrig]
    hint = (
        "these are servers an earlier specrig run launched and left: stop them as shown, then run again"
        if leftovers
        else "stop the processes above, or lower --gpu-memory-utilization in the recipe's [engine.*] args"
    )
    raise EngineError("not enough free GPU memory to start the server:\n" + "\n".join(lines), hint=hint)


def check_host_memory(need_gib: float, what: str) -> None:
    """Refuse to launch a CPU engine when the host has less than ``need_gib`` available."""
    avail = psutil.virtual_memory().available / 2**30
    if avail >= need_gib:
        return
    top = sorted(
        psutil.process_iter(["pid", "memory_info"]),
        key=lambda p: -(p.info["memory_info"].rss if p.info["memory_info"] else 0),
    )[:5]
    lines = [
        Holder(
            p.pid, _command(p.pid), (p.info["memory_info"].rss if p.info["memory_info"] else 0) / 2**30, _marker(p.pid)
        ).line()
        for p in top
    ]
    raise EngineError(
        f"{what} needs about {need_gib:.1f} GiB of memory, {avail:.1f} GiB is available; the largest processes:\n"
        + "\n".join(f"  {x}" for x in lines),
        hint="stop what holds the memory, or lower VLLM_CPU_KVCACHE_SPACE in the recipe's [engine.vllm.environment]",
    )


def specrig_servers() -> list[Holder]:
    """Every running process that carries specrig's launch marker."""
    out = []
    for p in psutil.process_iter(["pid"]):
        mark = _marker(p.pid)
        if mark:
            try:
                rss = p.memory_info().rss / 2**30
            except psutil.Error:
                rss = 0.0
            out.append(Holder(p.pid, _command(p.pid), rss, mark))
    return out


def _listeners(port: int) -> list[int | None]:
    """The pids of the TCP sockets listening on ``port`` (None: a socket whose process this user may
    not see). The system's table first; where reading it is refused, each visible process's own."""
    found: list[int | None] = []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        conns = None
    if conns is not None:
        return [c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    for proc in psutil.process_iter(["pid"]):
        try:
            mine = proc.net_connections(kind="tcp")
        except (psutil.Error, OSError):  # another user's process, or gone
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in mine):
            found.append(proc.pid)
    return found


def port_holders(port: int) -> list[str]:
    """Who listens on ``port``, one line each: ``pid N: COMMAND`` (a server specrig launched is
    said so, with the command that stops it), or a process this user may not see. Empty when no
    process listens (the port is bound, or held by connections still closing)."""
    lines = []
    for pid in dict.fromkeys(_listeners(port)):
        if pid is None:
            lines.append(
                f"a process this user may not see (another user's: `sudo ss -ltnp 'sport = :{port}'` names it)"
            )
            continue
        mark = _marker(pid)
        who = f" (a server specrig launched: {mark}; stop it with `kill -TERM -{_pgid(pid)}`)" if mark else ""
        lines.append(f"pid {pid}: {' '.join(_command(pid).split())[:160]}{who}")
    return lines


PORT_TAKEN = re.compile(r"Address already in use|EADDRINUSE", re.I)
"""What an engine's log says when its port was bound by another process first."""

_KNOWN = [
    (
        re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory|Not enough memory|insufficient memory", re.I),
        "the engine ran out of memory while starting",
        "free the GPU (or host) memory, lower --gpu-memory-utilization or max-model-len",
    ),
    (PORT_TAKEN, "the server's port was taken", "{port_fix}"),
    (
        re.compile(
            r"no kernel image is available|undefined symbol|cannot open shared object file|No module named '?[\w.]+_C'?",
            re.I,
        ),
        "a compiled kernel library is missing or does not match this GPU/torch",
        "check the environment against its lock: `nox -s env -- --check`",
    ),
    (
        re.compile(r"NCCL error|ncclSystemError|ncclUnhandledCudaError", re.I),
        "NCCL (multi-GPU communication) failed",
        "try NCCL_P2P_DISABLE=1, check the GPUs' topology, or run with tensor_parallel = 1",
    ),
]


def port_taken(text: str) -> bool:
    """Does the server's log say its port was taken (another process bound it first)?"""
    return PORT_TAKEN.search(text) is not None


def diagnose_log(text: str, *, user_port: bool = False, starts: int = 1) -> str | None:
    """A known cause of a failed start, read from the server's log (None: not recognised).
    ``user_port``: the port was the user's ``--port`` (the fix is another one); else specrig
    picked it, ``starts`` times, and lost it each time."""
    port_fix = (
        "pass another --port, or stop what listens there"
        if user_port
        else f"specrig picked a free port {starts} time(s) and lost it each time before the server bound it: "
        "another process on this host takes ports as they free up; run again once it is done"
    )
    for pattern, cause, fix in _KNOWN:
        m = pattern.search(text)
        if m:
            line = next((ln.strip() for ln in text.splitlines() if m.group(0) in ln), m.group(0))
            return f"{cause} (log: {line[:200]}); {fix.format(port_fix=port_fix)}"
    return None
