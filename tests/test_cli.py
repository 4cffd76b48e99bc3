"""Every front-door command answers --help; errors end with their exit code and a hint."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ["lock", "env", "bench", "report", "build", "patch", "drafter-check"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "specrig.cli", command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_unknown_command_and_recipe() -> None:
    proc = subprocess.run([sys.executable, "-m", "specrig.cli", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "commands:" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "specrig.cli", "env", "--recipe", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown recipe 'nope'" in proc.stderr and "hint:" in proc.stderr
