"""specrig.core.atomic: nothing half-written. A writer killed just before its rename leaves
the destination's old bytes; a folder is published whole, and without ``replace`` the first
publisher wins (a second conversion of the same thing neither fails nor mixes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.core import atomic

ROOT = Path(__file__).resolve().parents[1]

KILLED_WRITER = """
import os, sys
from specrig.core import atomic

def killed(*args, **kwargs):
    os._exit(9)  # the process dies between writing the temp file and renaming it

os.replace = killed
atomic.write_text(sys.argv[1], "new " * 100_000)
"""


def test_write_text_killed_before_its_rename_leaves_the_old_content(tmp_path: Path) -> None:
    dest = tmp_path / "result.json"
    dest.write_bytes(b"old content\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(dest)], env=env, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert dest.read_bytes() == b"old content\n"  # intact: the new bytes only ever went to a temp file
    # a kill may leave the temp file (named beside it, never the destination's name)
    assert all(p.name.startswith(".result.json.") for p in tmp_path.iterdir() if p != dest)


def test_write_replaces_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "out.txt"
    atomic.write_text(dest, "one")
    atomic.write_text(dest, "two")
    atomic.write_bytes(tmp_path / "sub" / "mode.bin", b"x", mode=0o640)
    assert dest.read_text() == "two" and (tmp_path / "sub" / "mode.bin").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in dest.parent.iterdir()) == ["mode.bin", "out.txt"]


def test_atomic_path_keeps_the_old_file_when_the_writer_fails(tmp_path: Path) -> None:
    dest = tmp_path / "plot.png"
    dest.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic.atomic_path(dest, suffix=".png") as tmp:
        tmp.write_bytes(b"half")  # the temp file itself, not the destination
        raise RuntimeError("the writer died")
    assert dest.read_bytes() == b"old" and list(tmp_path.iterdir()) == [dest]


def _staged(final: Path, content: str) -> Path:
    staging = atomic.staging_dir(final)
    atomic.write_text(staging / "config.json", content)
    return staging


def test_publish_dir_first_publisher_wins_without_replace(tmp_path: Path) -> None:
    final = tmp_path / "model"
    first, second = _staged(final, "first"), _staged(final, "second")
    assert first != second  # unique staging folders: two processes never share one
    assert atomic.publish_dir(first, final) == final
    assert atomic.publish_dir(second, final) == final  # no OSError [Errno 39]: the finished folder wins
    assert (final / "config.json").read_text() == "first"
    assert not first.exists() and not second.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_publish_dir_with_replace_swaps_the_folder(tmp_path: Path) -> None:
    final = tmp_path / "env"
    atomic.publish_dir(_staged(final, "old"), final)
    atomic.publish_dir(_staged(final, "new"), final, replace=True)
    assert (final / "config.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["env"]  # the old folder moved aside was removed


def test_written_files_and_published_folders_keep_the_usual_modes(tmp_path: Path) -> None:
    import os
    import stat

    from specrig.core import atomic

    old = os.umask(0o022)
    try:
        f = atomic.write_text(tmp_path / "a.txt", "x")
        d = atomic.staging_dir(tmp_path / "folder")
        atomic.publish_dir(d, tmp_path / "folder")
    finally:
        os.umask(old)
    assert stat.S_IMODE(f.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o755
