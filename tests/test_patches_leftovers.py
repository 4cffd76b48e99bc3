"""What an interrupted patch apply leaves, and the way back from it: the hints repeat
the target they were given (followed literally, they act on that site-packages),
and the next revert or apply clears a killed write's temporary files beside the
targets and killed applies' staging folders in the temp folder, never a running
one's. Same small site-packages as tests/test_patches_journal.py (no network)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.cli.patch import with_target
from specrig.patches import apply as ops
from specrig.patches import transaction
from specrig.patches.model import load_patch_set
from specrig.patches.stamp import GUARD_PACKAGE, read_stamp
from test_patches_journal import journal_dir, killed_apply, main, make_fake, record_matches, snapshot


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    return make_fake(tmp_path)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """specrig's cache, its environments and the system temp folder in tmp_path: a hint that
    lost its target finds no environment to act on instead of the real default one."""
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path / "no-envs"))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def killed_write(path: Path) -> Path:
    """What a write through specrig.core.atomic leaves when its process dies before the rename."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.write(fd, b"half a file")
    os.close(fd)
    return Path(name)


def holder(temp: Path) -> subprocess.Popen[str]:
    """A process inside a real staging folder (as an apply is while ``git apply`` runs)."""
    code = (
        "import sys, time\n"
        "from specrig.patches.transaction import _staging_folder\n"
        "with _staging_folder() as folder:\n"
        "    print(folder, flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = dict(os.environ, TMPDIR=str(temp))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the holder did not start"
    proc.folder = Path(line)  # type: ignore[attr-defined]
    return proc


def test_the_hint_followed_literally_reverts_the_site_it_was_given(fake, capsys):
    site, root = fake
    before = snapshot(site)
    assert killed_apply(fake, 1, "--set", "alpha").returncode == 9
    capsys.readouterr()
    assert main(fake, "apply") == 8
    err = " ".join(capsys.readouterr().err.split())
    command = re.search(r"`nox -s patch -- (revert[^`]*)`", err)
    assert command, err
    assert command.group(1) == f"revert --site-packages {site}"
    assert main(fake, "status") == 0
    assert f"`nox -s patch -- revert --site-packages {site}`" in capsys.readouterr().out

    # exactly what the hint says (plus the test's patch folder)
    assert specrig_main(["patch", *shlex.split(command.group(1)), "--patches-dir", str(root)]) == 0
    assert "interrupted apply undone from its journal" in capsys.readouterr().out
    assert snapshot(site) == before and record_matches(site, "alpha")


def test_hints_repeat_recipe_and_env_as_given():
    hint = "revert first (nox -s patch -- revert), then apply; or `nox -s patch -- status`"
    assert with_target(hint, "--recipe cpu --env vllm") == (
        "revert first (nox -s patch -- revert --recipe cpu --env vllm), then apply; "
        "or `nox -s patch -- status --recipe cpu --env vllm`"
    )
    assert with_target(hint, "") == hint  # nothing given: the default recipe's env, the same as the hint's
    done = "nox -s patch -- revert --site-packages /x"
    assert with_target(done, "--site-packages /x") == done  # never twice


def test_revert_clears_a_killed_writes_temporary_files(fake):
    site, _ = fake
    before = snapshot(site)
    assert killed_apply(fake, 1, "--set", "alpha").returncode == 9
    # the apply died inside the atomic write of the second target, and of the stamp
    left = [killed_write(site / "alpha/two.py"), killed_write(site / "alpha/sub/three.py")]
    (site / GUARD_PACKAGE).mkdir(exist_ok=True)
    left.append(killed_write(site / GUARD_PACKAGE / "stamp.json"))
    assert main(fake, "revert") == 0
    assert not any(p.exists() for p in left)
    assert snapshot(site) == before, "nothing of the killed apply is left in site-packages"


def test_the_next_apply_clears_them_too(fake):
    site, _ = fake
    before = snapshot(site)
    left = killed_write(site / "beta/core.py")  # a revert killed mid-write: no journal, no stamp
    assert main(fake, "apply", "--set", "beta") == 0
    assert not left.exists() and set(read_stamp(site).sets) == {"beta"}
    assert main(fake, "revert") == 0
    assert snapshot(site) == before


def test_staging_folders_of_killed_applies_go_a_running_ones_stay(fake, isolated):
    """Through the library: the command's own exit stops every process this test process
    started, the running holder included."""
    site, root = fake
    sets = [load_patch_set("alpha", "1.0", root), load_patch_set("beta", "2.0", root)]
    killed, running = holder(isolated), holder(isolated)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert killed.folder.is_dir(), "a killed process leaves its staging folder"  # type: ignore[attr-defined]
        old = isolated / "specrig-patch-abc123"  # one made before owner files, long ago
        old.mkdir()
        os.utime(old, (0, 0))
        young = isolated / "specrig-patch-def456"  # one without an owner file, made just now
        young.mkdir()

        ops.revert(["alpha", "beta"], site)
        assert not killed.folder.exists() and not old.exists()  # type: ignore[attr-defined]
        assert running.folder.is_dir() and young.is_dir()  # type: ignore[attr-defined]

        ops.apply(sets, site)  # stages in a folder of its own, and leaves none behind
        assert running.folder.is_dir()  # type: ignore[attr-defined]
        assert sorted(p.name for p in isolated.iterdir()) == sorted([running.folder.name, young.name])  # type: ignore[attr-defined]
        ops.revert(["alpha", "beta"], site)
    finally:
        for proc in (killed, running):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    assert transaction.clear_stale_staging(isolated) == [running.folder]  # type: ignore[attr-defined]
    assert not journal_dir(site).exists()
