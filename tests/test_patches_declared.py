"""Patch sets as part of an environment, end to end with a real environment:
a recipe declares ``patches = ["six"]``; `specrig env` makes the env and applies
the set; made again it is reused (the guard is no drift), still patched; an
interpreter specrig must not modify, with the set reverted, is refused with
the fix; a bench-style check on the patched env passes."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specrig.patches.record import bytes_hash

pytestmark = pytest.mark.network


def _six_wheel(tmp_path: Path) -> Path:
    d = tmp_path / "dl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(d),
            "six==1.16.0",
        ],
        check=True,
        capture_output=True,
    )
    return next(d.glob("six-1.16.0-*.whl"))


def _patch_root(tmp_path: Path, six_py: str) -> Path:
    """A checkout root (SPECRIG_ROOT) whose patches/ holds one set for six 1.16.0."""
    root = tmp_path / "root"
    shutil.copytree(Path(__file__).resolve().parents[1] / "recipes", root / "recipes")
    folder = root / "patches" / "six" / "1.16.0"
    folder.mkdir(parents=True)
    (folder / "set.toml").write_text(
        f'[set]\ndistribution = "six"\nversion = "1.16.0"\n\n[base]\n"six.py" = "{bytes_hash(six_py.encode())}"\n'
    )
    new = six_py.replace('__version__ = "1.16.0"', '__version__ = "1.16.0"\nSPECRIG_PATCHED = True')
    diff = "".join(difflib.unified_diff(six_py.splitlines(True), new.splitlines(True), "a/six.py", "b/six.py"))
    head = "Subject: six: mark as patched\nDescription: a test patch\nOrigin: tests\nApplied-Upstream: no\n\n"
    (folder / "0001-mark.patch").write_text(head + diff)
    (folder / "series").write_text("0001-mark.patch\n")
    return root


def _specrig(env: dict, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specrig.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )


def test_declared_patches_are_applied_kept_and_required(tiny_recipe: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(_six_wheel(tmp_path)) as z:
        six_py = z.read("six.py").decode()
    root = _patch_root(tmp_path, six_py)
    tiny_recipe.write_text(
        tiny_recipe.read_text().replace('"tomli==2.0.1"]\n', '"tomli==2.0.1"]\npatches = ["six"]\n', 1)
    )
    env = os.environ | {"SPECRIG_ROOT": str(root), "SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    lock = _specrig(env, "lock", "--recipe", str(tiny_recipe))
    assert lock.returncode == 0, lock.stderr[-3000:]

    made = _specrig(env, "env", "--recipe", str(tiny_recipe), "--skip-preflight")
    out = made.stdout + made.stderr
    assert made.returncode == 0, out[-3000:]
    assert "patch set six-1.16.0: applied" in out
    venv = Path(made.stdout.strip().splitlines()[-1])
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import six; print(six.SPECRIG_PATCHED)"]
    assert subprocess.run(check, capture_output=True, text=True).stdout.strip() == "True"

    again = _specrig(env, "env", "--recipe", str(tiny_recipe), "--skip-preflight")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert "rebuilding" not in out and "drifted" not in out, out[-2000:]  # the guard's dist-info is no drift
    assert "patch set six-1.16.0: already applied" in out
    assert subprocess.run(check, capture_output=True, text=True).stdout.strip() == "True"

    # the bench's check on this environment: applied, nothing to do
    from specrig.patches.declared import require
    from specrig.patches.record import purelib_of
    from specrig.recipe.schema import load_recipe

    os.environ["SPECRIG_ROOT"] = str(root)
    try:
        recipe = load_recipe(tiny_recipe)
        require(recipe, "main", purelib_of(py))
    finally:
        del os.environ["SPECRIG_ROOT"]

    # reverted by hand, then used as a provided interpreter (never modified): refused, with the fix
    site = purelib_of(py)
    rev = _specrig(env, "patch", "revert", "--site-packages", str(site), "--patches-dir", str(root / "patches"))
    assert rev.returncode == 0, (rev.stdout + rev.stderr)[-3000:]
    provided = _specrig(env, "env", "--recipe", str(tiny_recipe), "--skip-preflight", "--python", str(py))
    out = provided.stdout + provided.stderr
    assert provided.returncode not in (0, 1) and "Traceback" not in out, out[-3000:]
    assert "declares patch sets that are not applied" in out and "nox -s patch -- apply" in out
