"""Environments from locks: exact, hash-checked, verified, reused; preflight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrig.core.errors import HashMismatchError, HostError, LockError
from specrig.env.make import make_env, preflight, verify_env
from specrig.host.machine import Host, probe
from specrig.lock.resolve import lock_recipe, read_lock
from specrig.recipe.schema import load_recipe


@pytest.mark.network
def test_env_is_made_exactly_then_reused(tiny_recipe: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    env = make_env(recipe, "main")
    assert not env.reused and env.python.exists()
    assert verify_env(env.path, lock, {}) == []
    stamp = json.loads((env.path / "specrig-env.json").read_text())
    assert stamp["lock_digest"] == lock.digest
    site = env.path / "lib" / "python3.11" / "site-packages"
    assert list((site / "__pycache__").glob("six.*.pyc"))  # installed with its bytecode: a start compiles nothing
    again = make_env(recipe, "main")
    assert again.reused
    # drift is noticed and repaired
    (site / "six.py").unlink()
    import subprocess

    subprocess.run(["uv", "pip", "uninstall", "--python", str(env.python), "tomli"], check=True, capture_output=True)
    repaired = make_env(recipe, "main")
    assert not repaired.reused and verify_env(repaired.path, lock, {}) == []


@pytest.mark.network
def test_altered_hash_is_refused(tiny_recipe: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    good = make_env(recipe, "main")  # a working environment that a bad lock must not destroy
    text = lock.path.read_text()
    six_hashes = [line for line in text.splitlines() if line.startswith('    "sha256:')]
    assert six_hashes
    first = six_hashes[0].split("sha256:")[1][:64]
    lock.path.write_text(text.replace(first, "0" * 64))
    with pytest.raises(HashMismatchError) as e:
        make_env(recipe, "main", force=True)
    assert "sha256" in str(e.value)
    envs = load_recipe(tiny_recipe).path.parent.parent / "cache" / "envs"
    assert not (envs / "tiny-main.partial").exists()  # nothing half-made left
    lock.path.write_text(text)
    assert verify_env(good.path, read_lock(lock.path), {}) == []  # the old environment is intact
    assert make_env(recipe, "main").reused


def test_lock_of_another_recipe_is_refused(tiny_recipe: Path) -> None:
    ROOT = Path(__file__).resolve().parents[1]

    with pytest.raises(LockError, match="is for cpu.vllm"):
        make_env(load_recipe(tiny_recipe), "main", lock_path=ROOT / "recipes" / "cpu.vllm.lock")


def test_preflight_refuses_a_gpu_recipe_on_this_host(tmp_path: Path) -> None:
    host = probe()
    if host.gpus:
        pytest.skip("this host has GPUs")
    with pytest.raises(HostError) as e:
        preflight(load_recipe("blackwell-sm120"), host, tmp_path / "env")
    msg = str(e.value)
    assert "needs 8 NVIDIA GPU(s) with compute capability 12.0" in msg
    assert "memory available, the recipe needs 600 GiB" in msg


def test_preflight_checks_gpu_kind_and_driver(tmp_path: Path) -> None:
    from specrig.host.machine import Gpu

    h200 = Host(
        cpus=16,
        memory_gib=1000,
        available_memory_gib=900,
        gpus=tuple(Gpu(i, "NVIDIA H200", "9.0", 139.8) for i in range(8)),
        driver="570.10",
    )
    with pytest.raises(HostError) as e:
        preflight(load_recipe("blackwell-sm120"), h200, tmp_path / "env")
    assert "compute capability 12.0; found NVIDIA H200 (cc 9.0)" in str(e.value)
    assert "driver 570.10 is older than the recipe's minimum 575.57.08" in str(e.value)


def test_a_missing_python_is_named_with_the_fix() -> None:
    """Not on the host: offline, the error says how to bring one; online, uv is asked for a
    managed one, and when it has none either, that is named too (no traceback)."""
    from specrig.core.errors import HostError
    from specrig.env.preflight import find_python

    with pytest.raises(HostError) as e:
        find_python("3.2")
    assert "Python 3.2 is not installed" in e.value.message and "uv python install 3.2" in (e.value.hint or "")
    with pytest.raises(HostError) as e:
        find_python("3.2", download=True)
    assert "uv could not provide one" in e.value.message
