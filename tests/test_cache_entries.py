"""Cache entries are checked before they are reused (specrig.model.entry): a safetensors
file cut short is found by its header (and the real safetensors library agrees, where
the cpu environment is made); an entry specrig can make again is made again, saying
why (a drafter copied for another engine); one it cannot (a trained drafter) is
refused by name with the folder to remove; an entry made before manifests is checked
as far as its files allow and adopted. A model folder the recipe names whose weights
are cut short is refused before a server starts. An environment's installed files
are checked against their RECORD sizes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from safetensors_support import TARGET, drafter_tensors, library_reads, write_safetensors
from specrig.core.errors import ConfigError, HashMismatchError
from specrig.drafter.export import drafter_config, register, trained_drafter, write_drafter
from specrig.env.record import damaged_files
from specrig.model import entry
from specrig.model.folder import _user_folder, for_engine


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECRIG_MODELS_DIR", raising=False)
    return tmp_path / "cache"


def truncate(path: Path) -> None:
    """Half the file, as a full disk or a killed copy leaves it (in place: every hard link sees it;
    only for files this test made)."""
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def replace_truncated(path: Path) -> None:
    """Half the file as a new file at the same name (a hard-linked source keeps its bytes)."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[: len(data) // 2])


def drafter(tmp_path: Path, name: str = "eagle3-test") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    weights = write_safetensors(tmp_path / "w.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    cfg = drafter_config(TARGET, aux=[2, 15, 27], draft_vocab=16, facts={"pipeline_key": "k"})
    return write_drafter(tmp_path / name, weights, cfg)


def test_a_truncated_safetensors_file_is_found_by_its_header(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    assert entry.safetensors_problem(path) is None
    truncate(path)
    problem = entry.safetensors_problem(path)
    assert problem and "model.safetensors is" in problem and "truncated" in problem
    (tmp_path / "short.safetensors").write_bytes(b"\x10\x00")
    assert "too short" in (entry.safetensors_problem(tmp_path / "short.safetensors") or "")
    (tmp_path / "huge.safetensors").write_bytes((10**9).to_bytes(8, "little") + b"{}")
    assert "header claims" in (entry.safetensors_problem(tmp_path / "huge.safetensors") or "")


def test_the_real_library_agrees_with_the_header_check(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    if library_reads(path) is None:
        pytest.skip("no cpu environment with the safetensors library on this machine")
    assert library_reads(path) is True
    truncate(path)
    assert entry.safetensors_problem(path) is not None
    assert library_reads(path) is False


def test_manifest_sizes_and_hashes(tmp_path: Path) -> None:
    folder = tmp_path / "entry"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    (folder / "config.json").write_text("{}")
    manifest = entry.write_manifest(folder)
    assert set(manifest.files) == {"model.safetensors", "config.json"}
    assert all(f.sha256 for f in manifest.files.values())
    assert entry.check_entry(folder).ok
    (folder / "offline_eval.json").write_text("{}")  # derived figures are bound on their own
    assert entry.check_entry(folder).ok
    (folder / "config.json").write_text('{"x": 1}')  # same size class, other bytes
    check = entry.check_entry(folder)
    assert not check.ok and "config.json" in check.reason
    (folder / "config.json").write_text("{}")
    truncate(folder / "model.safetensors")
    check = entry.check_entry(folder)
    assert not check.ok and "model.safetensors is" in check.reason and "when it was made" in check.reason
    (folder / entry.MANIFEST).write_text("{not json")
    assert "damaged" in entry.check_entry(folder).reason


def test_large_files_are_checked_by_size_and_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "HASH_LIMIT", 100)
    folder = tmp_path / "entry"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    (folder / "config.json").write_text("{}")
    manifest = entry.write_manifest(folder)
    assert manifest.files["model.safetensors"].sha256 is None and manifest.files["config.json"].sha256
    assert entry.check_entry(folder).ok


def test_an_entry_made_before_manifests_is_checked_and_adopted(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    (folder / "config.json").write_text("{}")
    check = entry.check_entry(folder)
    assert check.ok and check.adopted and (folder / entry.MANIFEST).is_file()
    assert entry.check_entry(folder) == entry.EntryCheck(True)

    broken = tmp_path / "old-broken"
    shutil.copytree(folder, broken)
    (broken / entry.MANIFEST).unlink()
    truncate(broken / "model.safetensors")
    check = entry.check_entry(broken)
    assert not check.ok and not (broken / entry.MANIFEST).exists()
    assert "truncated" in check.reason


def test_a_trained_drafter_damaged_in_the_cache_is_refused_by_name(cache: Path, tmp_path: Path) -> None:
    good = drafter(tmp_path / "d")
    shifted = drafter(tmp_path / "d", "eagle3-test-shifted")
    register("cpu", good, shifted, quick=True)
    assert trained_drafter("cpu") == good
    truncate(good / "model.safetensors")
    with pytest.raises(HashMismatchError) as err:
        trained_drafter("cpu")
    assert str(good) in err.value.message and "model.safetensors is" in err.value.message
    assert f"remove {good}" in (err.value.hint or "") and "--quick" in (err.value.hint or "")


def test_a_trained_drafter_from_before_manifests_is_adopted(cache: Path, tmp_path: Path, capsys) -> None:
    good = drafter(tmp_path / "d")
    (good / entry.MANIFEST).unlink()
    register("cpu", good, good, quick=False)
    assert trained_drafter("cpu") == good
    assert (good / entry.MANIFEST).is_file() and "manifest written" in capsys.readouterr().err


def test_a_damaged_engine_copy_is_made_again(cache: Path, tmp_path: Path, capsys) -> None:
    """A real cache entry (the drafter with SGLang's aux ids, made through the same path as a
    converted model or a random drafter): damaged, it is made again, and the log says why."""
    src = drafter(tmp_path / "d")
    copy = Path(for_engine(str(src), "sglang"))
    assert copy != src and entry.check_entry(copy).ok
    capsys.readouterr()
    assert for_engine(str(src), "sglang") == str(copy)
    assert "damaged" not in capsys.readouterr().err
    replace_truncated(copy / "model.safetensors")
    assert for_engine(str(src), "sglang") == str(copy)
    err = " ".join(capsys.readouterr().err.split())
    assert f"{copy.name} is damaged (model.safetensors is" in err and "making it again" in err
    assert entry.check_entry(copy).ok and entry.safetensors_problem(copy / "model.safetensors") is None
    assert (copy / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()


def test_a_recipe_folder_with_weights_cut_short_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    write_safetensors(folder / "model.safetensors", drafter_tensors(hidden=8, vocab=64, draft_vocab=16))
    _user_folder(folder, "model folder")
    truncate(folder / "model.safetensors")
    with pytest.raises(ConfigError, match="model folder .* is broken: model.safetensors is"):
        _user_folder(folder, "model folder")


def test_an_environments_files_are_checked_against_their_record_sizes(tmp_path: Path) -> None:
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg/__init__.py").write_text("X = 1\n")
    (site / "pkg/big.so").write_bytes(b"\x7fELF" + bytes(100))
    (site / "pkg/__pycache__").mkdir()  # a wheel's own bytecode, compiled again at install: derived, not checked
    (site / "pkg/__pycache__/tool.cpython-311.pyc").write_bytes(bytes(90))
    (site / "pkg-1.0.dist-info/RECORD").write_text(
        "pkg/__init__.py,sha256=x,6\npkg/big.so,sha256=y,104\npkg/__pycache__/tool.cpython-311.pyc,sha256=z,80\n"
        "pkg/__pycache__/gone.cpython-311.pyc,sha256=w,80\npkg-1.0.dist-info/RECORD,,\n"
    )
    venv = tmp_path / "venv"
    assert damaged_files(venv) == []
    truncate(site / "pkg/big.so")
    assert damaged_files(venv) == ["damaged: pkg/big.so is 52 bytes, its RECORD says 104"]
    os.remove(site / "pkg/__init__.py")
    assert "damaged: pkg/__init__.py is missing (pkg-1.0.dist-info)" in damaged_files(venv)
    # a file a patch set replaced on purpose is the stamp's business, not a damage
    (site / "specrig_patch_guard").mkdir()
    (site / "specrig_patch_guard/stamp.json").write_text(json.dumps({"sets": {"p": {"files": {"pkg/big.so": {}}}}}))
    assert damaged_files(venv) == ["damaged: pkg/__init__.py is missing (pkg-1.0.dist-info)"]


@pytest.mark.network
def test_an_environment_with_a_file_cut_short_is_made_again(tiny_recipe: Path, capsys) -> None:
    """The version check sees nothing wrong with a truncated module; the RECORD sizes do."""
    from specrig.env.make import make_env
    from specrig.lock.resolve import lock_recipe
    from specrig.recipe.schema import load_recipe

    recipe = load_recipe(tiny_recipe)
    lock_recipe(recipe, "main")
    env = make_env(recipe, "main")
    assert make_env(recipe, "main").reused
    six = next(env.path.glob("lib/python3*/site-packages/six.py"))
    whole = six.read_bytes()
    replace_truncated(six)  # never in place: uv hard-links installed files to its cache
    capsys.readouterr()
    again = make_env(recipe, "main")
    err = " ".join(capsys.readouterr().err.split())
    assert not again.reused and "damaged: six.py is" in err and "rebuilding it" in err
    assert six.read_bytes() == whole and damaged_files(env.path) == []
