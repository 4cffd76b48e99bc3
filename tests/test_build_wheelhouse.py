"""Wheelhouse: fingerprints, atomic store, verified lookup."""

from __future__ import annotations

import zipfile

import pytest

from specrig.builder.wheelhouse import find_wheel, fingerprint, read_manifest, store_wheel
from specrig.core.errors import HashMismatchError


def make_wheel(tmp_path, name="demo-1.0+sm120-py3-none-any.whl"):
    p = tmp_path / name
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("demo/__init__.py", "x = 1\n")
    return p


def test_fingerprint_is_stable_and_sensitive():
    a = {"archs": ["120"], "torch": "2.9.1+cu128", "source_sha256": "ab"}
    assert fingerprint(a) == fingerprint(dict(reversed(list(a.items()))))
    assert fingerprint(a) != fingerprint({**a, "archs": ["90"]})
    assert fingerprint(a) != fingerprint({**a, "torch": "2.9.1+cu130"})


def test_store_then_find(tmp_path):
    wh = tmp_path / "wh"
    w = make_wheel(tmp_path)
    stored = store_wheel(w, wh, "fp1", {"k": 1})
    assert stored == wh / "fp1" / w.name
    assert find_wheel(wh, "fp1", w.name) == stored
    assert find_wheel(wh, "fp1", "other.whl") is None
    assert find_wheel(wh, "nope", w.name) is None
    assert read_manifest(wh, "fp1")["inputs"] == {"k": 1}
    assert not [p for p in wh.iterdir() if p.name.startswith(".")]  # no temp left


def test_damaged_entry_is_refused(tmp_path):
    wh = tmp_path / "wh"
    stored = store_wheel(make_wheel(tmp_path), wh, "fp1", {})
    stored.write_bytes(stored.read_bytes() + b"junk")
    with pytest.raises(HashMismatchError, match="damaged"):
        find_wheel(wh, "fp1", stored.name)


def test_copied_wheelhouse_works_elsewhere(tmp_path):
    import shutil

    wh = tmp_path / "wh"
    stored = store_wheel(make_wheel(tmp_path), wh, "fp1", {})
    shutil.copytree(wh, tmp_path / "airgapped")
    assert find_wheel(tmp_path / "airgapped", "fp1", stored.name).is_file()


def test_replacing_an_entry_is_atomic(tmp_path):
    wh = tmp_path / "wh"
    store_wheel(make_wheel(tmp_path), wh, "fp1", {"v": 1})
    store_wheel(make_wheel(tmp_path), wh, "fp1", {"v": 2})
    assert read_manifest(wh, "fp1")["inputs"] == {"v": 2}
    assert sorted(p.name for p in wh.iterdir()) == ["fp1"]
