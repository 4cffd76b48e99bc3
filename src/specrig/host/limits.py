"""This process's limits on connections: the open-file limit (``ulimit -n``, every
connection is one open file) and the local ports the kernel hands out for outgoing
connections (every connection to one server address takes one). Read, never changed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ConnectionLimits", "connection_limits"]

PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@dataclass(frozen=True)
class ConnectionLimits:
    open_files_soft: int | None
    """RLIMIT_NOFILE's soft limit: the files this process may have open (None: unlimited or unknown)."""
    open_files_hard: int | None
    """RLIMIT_NOFILE's hard limit: how far ``ulimit -n`` may raise the soft one without root."""
    open_now: int
    """Files this process has open now."""
    local_ports: tuple[int, int] | None
    """The kernel's ephemeral port range (``ip_local_port_range``), None where it cannot be read."""

    @property
    def local_port_count(self) -> int | None:
        return None if self.local_ports is None else self.local_ports[1] - self.local_ports[0] + 1


def _rlimit() -> tuple[int | None, int | None]:
    try:
        import resource
    except ImportError:  # not a Unix
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return (None if soft == unlimited else soft), (None if hard == unlimited else hard)


def _open_now() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def _port_range(path: Path) -> tuple[int, int] | None:
    try:
        lo, hi = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return (lo, hi) if 0 < lo <= hi else None


def connection_limits(port_range: Path = PORT_RANGE) -> ConnectionLimits:
    soft, hard = _rlimit()
    return ConnectionLimits(soft, hard, _open_now(), _port_range(port_range))
