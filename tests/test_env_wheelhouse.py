"""`env` installs the wheels specrig built (the built-wheel record, beside the lock) from the
wheelhouse, by fingerprint and hash, on top of an environment it keeps: a build never changes
the lock, so it never forces an environment rebuild."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from specrig.builder.wheelhouse import fingerprint, store_wheel
from specrig.core.digest import sha256_file
from specrig.core.errors import EnvError, HashMismatchError
from specrig.env.make import make_env
from specrig.lock.built import BuiltWheel, add_wheel, read_record, record_path
from specrig.lock.resolve import lock_recipe
from specrig.recipe.schema import load_recipe

pytestmark = pytest.mark.network


def _tiny_wheel(tmp_path: Path, version: str) -> Path:
    """A real wheel built by uv from a one-module project (stands in for a kernel wheel)."""
    proj = tmp_path / f"proj-{version}"
    (proj / "src" / "kernelish").mkdir(parents=True)
    (proj / "src" / "kernelish" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (proj / "pyproject.toml").write_text(
        f'[project]\nname = "kernelish"\nversion = "{version}"\n'
        '[build-system]\nrequires = ["hatchling==1.33.0"]\nbuild-backend = "hatchling.build"\n'
    )
    out = tmp_path / f"dist-{version}"
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(out), str(proj)], check=True, capture_output=True)
    return next(out.glob("*.whl"))


def _store(wheel: Path, wheelhouse: Path, version: str) -> BuiltWheel:
    inputs = {"name": "kernelish", "source": version, "archs": ["120"]}
    fp = fingerprint(inputs)
    stored = store_wheel(wheel, wheelhouse, fp, inputs)
    return BuiltWheel(
        name="kernelish",
        version=version,
        filename=stored.name,
        sha256=sha256_file(stored),
        fingerprint=fp,
        archs=("120",),
        cuda="13.0.88",
        torch="",
        python_tag="py3",
        definition="kernelish.toml",
        source_sha256="0" * 64,
    )


def _kernelish(env) -> str:
    out = subprocess.run(
        [str(env.python), "-c", "import kernelish; print(kernelish.VERSION)"], capture_output=True, text=True
    )
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def test_built_wheels_are_added_to_the_env_without_rebuilding_it(tiny_recipe: Path, tmp_path: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    wheelhouse = tmp_path / "wheelhouse"
    env = make_env(recipe, "main", wheelhouse=wheelhouse)
    assert not env.reused and env.built == ()
    sentinel = env.path / "made-once"  # survives only if the environment is kept
    sentinel.write_text("")
    lock_bytes = lock.path.read_bytes()

    # a build records its wheel beside the lock; the lock is untouched
    record = record_path(lock.path)
    first = _store(_tiny_wheel(tmp_path, "1.0+sm120"), wheelhouse, "1.0+sm120")
    add_wheel(record, first)
    assert lock.path.read_bytes() == lock_bytes
    assert record.name == "tiny.main.built.toml"

    env = make_env(recipe, "main", wheelhouse=wheelhouse)
    assert (env.reused, env.added) == (True, ("kernelish",))
    assert sentinel.exists()
    assert _kernelish(env) == "1.0+sm120"
    stamp = json.loads((env.path / "specrig-env.json").read_text())
    assert stamp["lock_digest"] == lock.digest and stamp["built"] == {"kernelish": first.sha256}

    # nothing new: plain reuse
    assert (lambda e: (e.reused, e.added))(make_env(recipe, "main", wheelhouse=wheelhouse)) == (True, ())

    # a rebuild with other inputs replaces the installed wheel, still without a new environment
    second = _store(_tiny_wheel(tmp_path, "1.0+sm90"), wheelhouse, "1.0+sm90")
    add_wheel(record, second)
    assert [w.version for w in read_record(record).wheel] == ["1.0+sm90"]
    env = make_env(recipe, "main", wheelhouse=wheelhouse)
    assert (env.reused, env.added) == (True, ("kernelish",)) and sentinel.exists()
    assert _kernelish(env) == "1.0+sm90"
    # what a bench records as served: the built wheel by name, version and hash
    assert env.built == (f"kernelish 1.0+sm90 sha256:{second.sha256[:12]}",)

    # a fresh environment (--force) installs lock and built wheels in one hash-checked sync
    env = make_env(recipe, "main", wheelhouse=wheelhouse, force=True)
    assert (
        not env.reused and not sentinel.exists() and env.built == (f"kernelish 1.0+sm90 sha256:{second.sha256[:12]}",)
    )
    assert _kernelish(env) == "1.0+sm90"


def test_missing_or_damaged_built_wheels_are_refused_and_the_env_kept(tiny_recipe: Path, tmp_path: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    wheelhouse = tmp_path / "wheelhouse"
    env = make_env(recipe, "main", wheelhouse=wheelhouse)
    wheel = _store(_tiny_wheel(tmp_path, "1.0+sm120"), wheelhouse, "1.0+sm120")
    add_wheel(record_path(lock.path), wheel)

    # a wheelhouse without that fingerprint: a clear refusal naming the build and the option
    with pytest.raises(EnvError, match="not in the wheelhouse") as e:
        make_env(recipe, "main", wheelhouse=tmp_path / "empty")
    assert "nox -s build_kernelish" in str(e.value) and "--wheelhouse" in e.value.hint

    # a damaged copy is refused by its hash, before anything is installed
    stored = wheelhouse / wheel.fingerprint / wheel.filename
    with zipfile.ZipFile(stored, "a") as z:
        z.writestr("kernelish/extra.py", "x = 1\n")
    with pytest.raises(HashMismatchError, match="is damaged"):
        make_env(recipe, "main", wheelhouse=wheelhouse)
    assert "No module named 'kernelish'" in _kernelish(env)
    assert json.loads((env.path / "specrig-env.json").read_text())["built"] == {}
