"""specrig.core.locks: one lock per shared thing, across real processes (the second waits,
names the first, and their critical sections never overlap; a killed holder frees the lock);
and what the environment's lock relies on: a patched environment is reused, not rebuilt."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import psutil
import pytest

from specrig.core import locks

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import os, sys, time
from specrig.core.locks import hold

name, log, hold_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
with hold(name, "testing the lock"):
    with open(log, "a") as f:
        f.write(f"enter {os.getpid()} {time.time()}\\n")
    time.sleep(hold_s)
    with open(log, "a") as f:
        f.write(f"leave {os.getpid()} {time.time()}\\n")
"""


def _start(
    tmp_path: Path, name: str, log: Path, hold_s: float, stderr: IO[str] | int = subprocess.PIPE
) -> subprocess.Popen[str]:
    env = os.environ | {
        "SPECRIG_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "250",
    }
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, name, str(log), str(hold_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def _wait_for(log: Path, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and line in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{line!r} not in {log} after {timeout} s")


def _events(log: Path) -> dict[tuple[str, int], float]:
    return {(kind, int(pid)): float(t) for kind, pid, t in (line.split() for line in log.read_text().splitlines())}


def test_second_process_waits_names_the_first_and_never_overlaps(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    first = _start(tmp_path, "shared-thing", log, 2.0)
    try:
        _wait_for(log, f"enter {first.pid} ")  # the first holds the lock (and has named itself)
        second = _start(tmp_path, "shared-thing", log, 0.1)
        _, err2 = second.communicate(timeout=120)
        _, err1 = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert f"waiting for specrig pid {first.pid}, which is testing the lock" in err2
    assert "waiting" not in err1
    ev = _events(log)
    assert ev[("enter", first.pid)] < ev[("leave", first.pid)] <= ev[("enter", second.pid)] < ev[("leave", second.pid)]


def test_different_things_do_not_wait_for_each_other(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    first = _start(tmp_path, "thing-a", log, 5.0)
    try:
        _wait_for(log, f"enter {first.pid} ")
        second = _start(tmp_path, "thing-b", log, 0.0)
        _, err2 = second.communicate(timeout=120)
        assert second.returncode == 0 and "waiting" not in err2
        ev = _events(log)
        assert ("leave", first.pid) not in ev  # the second came and went while the first still held its own
    finally:
        first.kill()
        first.communicate()


def test_a_killed_holder_frees_the_lock(tmp_path: Path) -> None:
    """The second process waits: it has said whom it waits for, it is alive, and it has not entered; it
    enters only after the holder is killed (SIGKILL: no cleanup runs, the kernel drops the flock)."""
    log, err = tmp_path / "events.log", tmp_path / "second.err"
    first = _start(tmp_path, "shared-thing", log, 600)
    second = None
    try:
        _wait_for(log, f"enter {first.pid} ")
        with err.open("w") as err_file:
            second = _start(tmp_path, "shared-thing", log, 0.0, stderr=err_file)
        # started, tried the lock, found it held and named its holder (not: not started yet)
        _wait_for(err, f"waiting for specrig pid {first.pid}, which is testing the lock")
        waiter = psutil.Process(second.pid)
        assert waiter.is_running() and waiter.status() != psutil.STATUS_ZOMBIE  # still waiting, not gone
        assert f"enter {second.pid} " not in log.read_text()  # and not in
        killed_at = time.time()
        first.kill()
        first.communicate()
        second.communicate(timeout=120)
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert second.returncode == 0, err.read_text()
    ev = _events(log)
    assert ("leave", first.pid) not in ev  # the holder never let go: it was killed holding the lock
    assert killed_at <= ev[("enter", second.pid)] <= ev[("leave", second.pid)]  # the second got in after the kill


def test_reentrant_in_a_process_and_one_file_per_thing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    with locks.hold("env-x", "outer"), locks.hold("env-x", "inner"):
        holder = locks.lock_path("env-x").with_name("env-x.lock.holder")
        assert holder.read_text().split()[0] == str(os.getpid())
        assert "outer" in holder.read_text()  # the outermost hold names what is going on
    assert not holder.exists()  # released: nobody is named
    a, b = locks.lock_path(tmp_path / "one" / "model"), locks.lock_path(tmp_path / "two" / "model")
    assert a != b and a.parent == b.parent == tmp_path / "cache" / "locks"
    assert a.name.startswith("model-") and locks.lock_path(tmp_path / "one" / "model") == a


def test_threads_of_one_process_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    spans: list[tuple[float, float]] = []

    def work() -> None:
        with locks.hold("shared", "a thread's turn"):
            t0 = time.monotonic()
            time.sleep(0.2)
            spans.append((t0, time.monotonic()))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_clear_leftovers_removes_only_what_killed_makers_of_that_folder_left(tmp_path: Path) -> None:
    from specrig.core import atomic

    final = tmp_path / "env[1]"
    stale = [atomic.staging_dir(final), tmp_path / ".env[1].old-4242"]
    stale[1].mkdir()
    kept = [atomic.staging_dir(tmp_path / "env[1]-other"), tmp_path / "env[1]"]
    kept[1].mkdir()
    locks.clear_leftovers(final)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_patch_guard_is_not_drift_from_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched environment holds the guard's dist-info; verify_env must not call it extra
    (else make_env, after waiting on the lock, would rebuild a patched env instead of reusing it)."""
    from packaging.utils import canonicalize_name

    from specrig.env import make
    from specrig.env.provided import PATCH_GUARD
    from specrig.lock.file import Lock, LockedPackage
    from specrig.patches.stamp import GUARD_PACKAGE

    assert canonicalize_name(GUARD_PACKAGE) == PATCH_GUARD
    lock = Lock(
        path=Path("x.lock"),
        recipe="r",
        env="e",
        inputs_digest="",
        target={},
        packages=(LockedPackage(name="six", version="1.16.0", hashes=()),),
    )
    monkeypatch.setattr(make, "installed", lambda python: {"six": "1.16.0", PATCH_GUARD: "1.0"})
    assert make.verify_env(Path("/nowhere"), lock, {}) == []
    monkeypatch.setattr(make, "installed", lambda python: {"six": "1.16.0", "tomli": "2.0.1"})
    assert make.verify_env(Path("/nowhere"), lock, {}) == ["extra tomli==2.0.1"]
