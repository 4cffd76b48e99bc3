"""A file shipped inside a hash-pinned package, fetched once, and used again only
while it has the bytes its package's RECORD lists: a cached file changed on disk
is fetched again (real package from the index: six 1.16.0's wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specrig.lock.packaged import packaged_file

pytestmark = pytest.mark.network

SIX = "six==1.16.0"
SIX_HASH = "sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"


def test_a_changed_cached_file_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    f = packaged_file(SIX, SIX_HASH, "six.py", tmp_path / "pk", what="six", hint="the test pins six")
    good = f.read_bytes()
    assert b"__version__" in good
    assert packaged_file(SIX, SIX_HASH, "six.py", tmp_path / "pk", what="six", hint="-") == f  # reused
    f.write_bytes(good + b"\n# changed on disk\n")
    again = packaged_file(SIX, SIX_HASH, "six.py", tmp_path / "pk", what="six", hint="-")
    assert again.read_bytes() == good
