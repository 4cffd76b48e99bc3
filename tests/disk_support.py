"""A real small disk for full-disk tests: a tmpfs of a given size mounted on a folder (root
only; a test that cannot mount one skips, saying why). Writes there fail with the kernel's own
ENOSPC, in specrig's process and in every child it starts."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["small_disk"]


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` (made) as the mount point of a tmpfs of ``size`` (``200m``, ``4m``), unmounted after."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if os.geteuid() != 0 or not mount or not umount:
        pytest.skip("a small real disk needs root (mount -t tmpfs)")
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run([umount, "-l", str(folder)], capture_output=True)
