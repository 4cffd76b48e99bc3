"""Offline bundles: download -> (volumes) -> offline install, hash-checked; damaged or missing files refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import specrig.env.bundle as bundle
from specrig.core.errors import EnvError, HashMismatchError
from specrig.core.paths import env_dir
from specrig.env.make import make_env, verify_env
from specrig.lock.resolve import lock_recipe
from specrig.recipe.schema import load_recipe

pytestmark = pytest.mark.network


@pytest.fixture
def small_volumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Volumes of 10 kB per "MB", so the two small wheels (11 and 12.7 kB) are split into parts."""
    monkeypatch.setattr(bundle, "MB", 10_000)
    monkeypatch.setattr(bundle, "_RESERVE", 0)


def test_bundle_in_volumes_installs_offline(
    tiny_recipe: Path, tmp_path: Path, small_volumes: None, monkeypatch
) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    out = tmp_path / "bundle"
    manifest = bundle.make_bundle(recipe, "main", out, split_mb=1)
    text = (out / "bundle.toml").read_text()
    assert "://" not in text
    doc = tomllib.loads(text)
    assert {(f["name"], f["version"]) for f in doc["files"]} == {("six", "1.16.0"), ("tomli", "2.0.1")}
    assert all(len(f["parts"]) == 2 for f in doc["files"])  # both larger than a volume
    for vol in manifest.volumes:
        files = list((out / vol).iterdir())
        assert sum(f.stat().st_size for f in files if f.name != "bundle.toml") <= 10_000
        assert (out / vol / "bundle.toml").read_text() == text
    # offline: no index can be reached
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")
    env = make_env(recipe, "main", wheelhouse=out, offline=True, skip_preflight=True)
    assert verify_env(env.path, lock, {}) == []
    # volumes laid side by side in another folder layout still install
    flat = tmp_path / "flat"
    flat.mkdir()
    for part in out.rglob("*.part*"):
        (flat / part.name).write_bytes(part.read_bytes())
    (flat / "bundle.toml").write_text(text)
    assert make_env(recipe, "main", wheelhouse=flat, offline=True, skip_preflight=True, force=True)


def test_damaged_or_missing_bundle_files_are_refused(tiny_recipe: Path, tmp_path: Path, small_volumes: None) -> None:
    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    out = tmp_path / "bundle"
    manifest = bundle.make_bundle(recipe, "main", out, split_mb=1)
    six = next(f for f in manifest.files if f.name == "six")
    part = out / six.parts[1].path
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError) as e:
        make_env(recipe, "main", wheelhouse=out, offline=True, skip_preflight=True)
    assert part.name in str(e.value) and six.parts[1].sha256 in str(e.value)
    assert not env_dir(recipe.name, "main").exists()  # nothing installed
    part.unlink()
    with pytest.raises(EnvError) as e:
        make_env(recipe, "main", wheelhouse=out, offline=True, skip_preflight=True)
    assert f"six 1.16.0: {six.filename} ({six.parts[1].path})" in str(e.value)
    assert "lacks 1 file(s)" in str(e.value)


def test_plain_wheel_folder_installs_offline_and_names_what_is_missing(tiny_recipe: Path, tmp_path: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    out = tmp_path / "bundle"
    bundle.make_bundle(recipe, "main", out)
    plain = tmp_path / "wheels"
    plain.mkdir()
    six = next(out.glob("six-*.whl"))
    (plain / six.name).write_bytes(six.read_bytes())
    with pytest.raises(
        EnvError, match=r"lacks 1 file\(s\)[\s\S]*tomli 2\.0\.1: one of tomli-2\.0\.1-py3-none-any\.whl"
    ):
        make_env(recipe, "main", wheelhouse=plain, offline=True, skip_preflight=True)
    tomli = next(out.glob("tomli-*.whl"))
    (plain / tomli.name).write_bytes(tomli.read_bytes())
    assert make_env(recipe, "main", wheelhouse=plain, offline=True, skip_preflight=True).path.is_dir()
