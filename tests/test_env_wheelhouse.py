"""`env` installs wheels specrig built from the wheelhouse, by fingerprint and hash, without rebuilding."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from specrig.build.wheelhouse import fingerprint, sha256_file, store_wheel
from specrig.env import make_env
from specrig.errors import EnvError, HashMismatchError
from specrig.lock import BuiltWheel, lock_recipe, record_built_wheel
from specrig.recipe import load_recipe

pytestmark = pytest.mark.network


def _tiny_wheel(tmp_path: Path) -> Path:
    """A real wheel built by uv from a one-module project (stands in for a kernel wheel)."""
    proj = tmp_path / "proj"
    (proj / "src" / "kernelish").mkdir(parents=True)
    (proj / "src" / "kernelish" / "__init__.py").write_text("ARCH = 'sm_120'\n")
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "kernelish"\nversion = "1.0+sm120"\n'
        '[build-system]\nrequires = ["hatchling==1.33.0"]\nbuild-backend = "hatchling.build"\n'
    )
    out = tmp_path / "dist"
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(out), str(proj)], check=True, capture_output=True)
    return next(out.glob("*.whl"))


def test_env_installs_built_wheel_from_wheelhouse(tiny_recipe: Path, tmp_path: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    wheel = _tiny_wheel(tmp_path)
    inputs = {"source": "kernelish 1.0", "arch": ["120"], "torch": "2.9.1+cu128"}
    fp = fingerprint(inputs)
    wheelhouse = tmp_path / "wheelhouse"
    stored = store_wheel(wheel, wheelhouse, fp, inputs)
    record_built_wheel(lock.path, BuiltWheel("kernelish", "1.0+sm120", stored.name, sha256_file(stored), fp))

    env = make_env(recipe, "main", wheelhouse=wheelhouse)
    out = subprocess.run([str(env.python), "-c", "import kernelish; print(kernelish.ARCH)"], capture_output=True, text=True)
    assert out.stdout.strip() == "sm_120"
    assert make_env(recipe, "main", wheelhouse=wheelhouse).reused

    # a wheelhouse without that fingerprint: a clear refusal naming the build command
    with pytest.raises(EnvError, match="not in the wheelhouse") as e:
        make_env(recipe, "main", wheelhouse=tmp_path / "empty", force=True)
    assert "nox -s build_kernelish" in str(e.value) or "--wheelhouse" in str(e.value)

    # a damaged copy is refused by hash
    with zipfile.ZipFile(stored, "a") as z:
        z.writestr("kernelish/extra.py", "x = 1\n")
    with pytest.raises((HashMismatchError, EnvError)):
        make_env(recipe, "main", wheelhouse=wheelhouse, force=True)
