"""The journaled apply: a kill between two target files leaves a journal, ``status``
says ``partial``, ``apply`` refuses, ``revert`` restores the released bytes (checked
against RECORD). No network: a site-packages with two small distributions (real
dist-info METADATA and RECORD) and two patch sets for them, made in tmp_path."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.core.errors import ConfigError, HashMismatchError, PatchError
from specrig.patches import apply as ops
from specrig.patches import transaction
from specrig.patches.model import load_patch_set
from specrig.patches.record import bytes_hash, file_hash, find_dist
from specrig.patches.stamp import GUARD_DIST_INFO, GUARD_PACKAGE, read_stamp
from specrig.patches.state import Action, GuardChange, State
from specrig.patches.which_sets import family_status

RELEASED = {
    "alpha": (
        "1.0",
        {
            "alpha/one.py": "def one():\n    return 1\n",
            "alpha/two.py": "def two():\n    return 2\n",
            "alpha/sub/three.py": "THREE = 3\n",
        },
    ),
    "beta": ("2.0", {"beta/core.py": "def core():\n    return 'core'\n", "beta/util.py": "X = 1\n"}),
}
UNTOUCHED = {"alpha/__init__.py": "", "alpha/sub/__init__.py": "", "beta/__init__.py": ""}


def _patched(text: str) -> str:
    return text.replace("1", "10").replace("2", "20").replace("3", "30").replace("'core'", "'patched core'")


def _diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    """(site-packages, patches root): alpha 1.0 and beta 2.0 installed, one set each."""
    return make_fake(tmp_path)


def make_fake(tmp_path: Path) -> tuple[Path, Path]:
    site, root = tmp_path / "site", tmp_path / "patches"
    for name, (version, files) in RELEASED.items():
        members = {**{r: t for r, t in UNTOUCHED.items() if r.startswith(f"{name}/")}, **files}
        info = f"{name}-{version}.dist-info"
        members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        for rel, text in members.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        record = [f"{rel},{bytes_hash(t.encode())},{len(t.encode())}" for rel, t in members.items()]
        (site / info / "RECORD").write_text("\n".join([*record, f"{info}/RECORD,,"]) + "\n")
        folder = root / name / version
        folder.mkdir(parents=True)
        base = "\n".join(f'"{rel}" = "{bytes_hash(t.encode())}"' for rel, t in files.items())
        (folder / "set.toml").write_text(f'[set]\ndistribution = "{name}"\nversion = "{version}"\n\n[base]\n{base}\n')
        header = f"Subject: {name}: bigger numbers\nDescription: a test patch\nOrigin: tests\nApplied-Upstream: no\n\n"
        diff = "".join(_diff(rel, text, _patched(text)) for rel, text in files.items())
        (folder / "0001-bigger.patch").write_text(header + diff)
        (folder / "series").write_text("0001-bigger.patch\n")
    (site / "alpha/one.py").chmod(0o755)
    return site, root


def snapshot(site: Path) -> dict[str, str | None]:
    return {p.relative_to(site).as_posix(): file_hash(p) for p in sorted(site.rglob("*")) if p.is_file()}


def record_matches(site: Path, name: str) -> bool:
    record = find_dist(site, (name,)).record()
    return all(file_hash(site / rel) == record[rel] for rel in RELEASED[name][1])


def cli(fake: tuple[Path, Path], *argv: str) -> list[str]:
    site, root = fake
    return ["patch", *argv, "--site-packages", str(site), "--patches-dir", str(root)]


def main(fake, *argv: str) -> int:
    return specrig_main(cli(fake, *argv))


def killed_apply(fake, after: int, *argv: str) -> subprocess.CompletedProcess:
    """``specrig patch apply`` in a child that the test hook kills after ``after`` target files."""
    env = dict(os.environ, **{transaction.KILL_HOOK: str(after)})
    argv = [sys.executable, "-m", "specrig.cli", *cli(fake, "apply", *argv)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)


def journal_dir(site: Path) -> Path:
    return site / f"{GUARD_PACKAGE}.journal"


@pytest.mark.parametrize("after", [1, 0, 3])
def test_kill_between_target_files_is_partial_until_revert_restores_record(fake, after, capsys):
    site, root = fake
    before = snapshot(site)
    released = {rel: (site / rel).read_bytes() for rel in RELEASED["alpha"][1]}

    child = killed_apply(fake, after, "--set", "alpha")
    assert child.returncode == 9, child.stderr
    targets = list(RELEASED["alpha"][1])
    assert [file_hash(site / rel) != bytes_hash(released[rel]) for rel in targets] == [
        i < after for i in range(len(targets))
    ]
    journal = json.loads((journal_dir(site) / "journal.json").read_text())
    assert journal["phase"] == "committing" and journal["sets"] == {"alpha": "1.0"}
    assert [f["path"] for f in journal["files"]] == targets
    assert all((journal_dir(site) / "originals" / rel).read_bytes() == released[rel] for rel in targets)
    assert not read_stamp(site).sets, "the stamp is written after the targets"

    st = family_status("alpha", site, root=root)
    assert st.state is State.PARTIAL
    assert f"after {after} of 3 target files were written" in st.detail
    assert "run `nox -s patch -- revert` to restore the released files" in st.detail
    assert [d.path for d in st.drift] == [site / rel for rel in targets[:after]]
    assert family_status("beta", site, root=root).state is State.NOT_APPLIED
    capsys.readouterr()
    assert main(fake, "status") == 0
    out = capsys.readouterr().out
    assert "partial" in out and f"nox -s patch -- revert --site-packages {site}`" in out

    # apply and check refuse (PatchError: exit 8) with the hint, and write nothing
    during = snapshot(site)
    for command in ("apply", "check"):
        assert main(fake, command) == 8
        err = capsys.readouterr().err
        # the hint repeats the target it was given: followed literally, it reverts this site-packages
        assert "was interrupted" in err and f"run `nox -s patch -- revert --site-packages {site}` to restore" in err
        assert "Traceback" not in err
    with pytest.raises(PatchError, match="was interrupted"):
        ops.apply([load_patch_set("beta", "2.0", root)], site)
    assert snapshot(site) == during

    assert main(fake, "revert") == 0
    out = capsys.readouterr().out
    assert "alpha 1.0 (alpha 1.0): interrupted apply undone from its journal" in out
    assert out.count("hashed again: matches RECORD") == 3
    assert snapshot(site) == before, "revert restores every file byte for byte and removes journal and guard"
    assert record_matches(site, "alpha") and not journal_dir(site).exists()
    assert (site / "alpha/one.py").stat().st_mode & 0o777 == 0o755
    assert family_status("alpha", site, root=root).state is State.NOT_APPLIED

    # and the environment is usable again
    assert main(fake, "apply") == 0
    assert set(read_stamp(site).sets) == {"alpha", "beta"} and not journal_dir(site).exists()
    assert (site / "alpha/one.py").stat().st_mode & 0o777 == 0o755
    assert main(fake, "revert") == 0
    assert snapshot(site) == before


def test_kill_keeps_an_earlier_applied_set(fake, capsys):
    site, root = fake
    before = snapshot(site)
    ops.apply([load_patch_set("beta", "2.0", root)], site)
    beta_applied = snapshot(site)

    assert killed_apply(fake, 1, "--set", "alpha").returncode == 9
    assert family_status("alpha", site, root=root).state is State.PARTIAL
    assert family_status("beta", site, root=root).state is State.APPLIED

    run = ops.revert(["alpha"], site)
    assert [(s.family, s.action) for s in run.sets] == [("alpha", Action.RECOVERED)]
    assert run.guard is GuardChange.UPDATED
    assert all(f.record_verified and not f.edited_after_apply for f in run.sets[0].restored)
    assert snapshot(site) == beta_applied, "beta stays applied, guard and stamp as they were"
    assert family_status("beta", site, root=root).state is State.APPLIED
    assert ops.revert(["alpha", "beta"], site).guard is GuardChange.REMOVED
    assert snapshot(site) == before


def test_killed_after_the_stamp_before_the_journal_was_removed(fake, monkeypatch):
    site, root = fake
    before = snapshot(site)
    ops.apply([load_patch_set("beta", "2.0", root)], site)
    monkeypatch.setattr(transaction, "remove_journal", lambda site: None)  # as if killed right before
    ops.apply([load_patch_set("alpha", "1.0", root)], site)
    monkeypatch.undo()
    assert set(read_stamp(site).sets) == {"alpha", "beta"}
    assert family_status("alpha", site, root=root).state is State.PARTIAL
    assert "after 3 of 3 target files were written" in family_status("alpha", site, root=root).detail

    run = ops.revert(["alpha", "beta"], site)  # the journal first, then the stamped beta
    assert [(s.family, s.action) for s in run.sets] == [("alpha", Action.RECOVERED), ("beta", Action.REVERTED)]
    assert run.guard is GuardChange.REMOVED
    assert snapshot(site) == before


def test_interrupted_while_saving_the_originals(fake):
    site, root = fake
    before = snapshot(site)
    pset = load_patch_set("alpha", "1.0", root)
    files = [
        transaction.JournalFile(family="alpha", path=rel, distribution="alpha", original=h, patched=h)
        for rel, h in pset.base.items()
    ]
    journal = transaction.Journal(phase="saving", started_at="now", pid=1, sets={"alpha": "1.0"}, files=files)
    transaction.write_atomic(journal_dir(site) / "journal.json", journal.to_json())  # killed after this write
    st = family_status("alpha", site, root=root)
    assert st.state is State.PARTIAL and "before any target was written" in st.detail and not st.drift
    run = ops.revert(["alpha", "beta"], site)
    assert [(s.family, s.action) for s in run.sets] == [("alpha", Action.RECOVERED), ("beta", Action.NOT_APPLIED)]
    assert run.guard is GuardChange.UNCHANGED
    assert snapshot(site) == before


def test_write_error_puts_every_file_back_and_removes_the_journal(fake, monkeypatch, capsys):
    site, root = fake
    before = snapshot(site)
    real = transaction.write_atomic
    calls = {"n": 0}

    def flaky(path, data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (injected)")
        real(path, data)

    monkeypatch.setattr(transaction, "write_atomic", flaky)
    with pytest.raises(PatchError, match="injected") as err:
        ops.apply([load_patch_set("alpha", "1.0", root)], site)
    assert "every file already written was put back" in err.value.message and err.value.hint
    assert snapshot(site) == before and not journal_dir(site).exists()
    calls["n"] = 0
    capsys.readouterr()
    assert main(fake, "apply") == 8
    assert "Traceback" not in capsys.readouterr().err
    assert snapshot(site) == before


def test_failed_rollback_keeps_the_journal_for_revert(fake, monkeypatch):
    site, root = fake
    before = snapshot(site)
    real = transaction.write_atomic
    calls = {"n": 0}

    def broken(path, data):
        calls["n"] += 1
        if calls["n"] >= 2:  # the second target, and every write of the rollback
            raise OSError("disk gone (injected)")
        real(path, data)

    monkeypatch.setattr(transaction, "write_atomic", broken)
    with pytest.raises(PatchError, match="putting the files back failed too") as err:
        ops.apply([load_patch_set("alpha", "1.0", root)], site)
    assert err.value.hint == transaction.REVERT_HINT
    monkeypatch.undo()
    assert (journal_dir(site) / "journal.json").is_file()
    assert family_status("alpha", site, root=root).state is State.PARTIAL
    assert ops.revert(["alpha", "beta"], site).sets[0].action is Action.RECOVERED
    assert snapshot(site) == before


def test_a_journal_folder_without_journal_json_is_a_leftover(fake):
    site, root = fake
    before = snapshot(site)
    (journal_dir(site) / "originals" / "alpha").mkdir(parents=True)
    (journal_dir(site) / "originals" / "alpha" / "one.py").write_text("half")
    assert family_status("alpha", site, root=root).state is State.NOT_APPLIED
    ops.apply([load_patch_set("alpha", "1.0", root)], site)
    assert not journal_dir(site).exists()
    ops.revert(["alpha"], site)
    assert snapshot(site) == before


def test_a_damaged_journal_is_a_config_error(fake, capsys):
    site, root = fake
    journal_dir(site).mkdir()
    (journal_dir(site) / "journal.json").write_text('{"format": 1, "phase": "somewhere"}')
    st = family_status("alpha", site, root=root)
    assert st.state is State.PARTIAL and "damaged patch journal" in st.detail and "phase" in st.detail
    with pytest.raises(ConfigError, match="damaged patch journal"):
        ops.revert(["alpha"], site)
    capsys.readouterr()
    for command in ("apply", "revert"):
        assert main(fake, command) == 2
        err = capsys.readouterr().err
        assert "damaged patch journal" in err and "hint" in err and "Traceback" not in err


def test_a_saved_original_that_is_not_the_record_bytes_is_refused(fake):
    site, root = fake
    assert killed_apply(fake, 2, "--set", "alpha").returncode == 9
    saved = journal_dir(site) / "originals" / "alpha/one.py"
    saved.write_text("not what was installed\n")
    with pytest.raises(HashMismatchError, match="the journal's copy of alpha/one.py is not its RECORD bytes") as err:
        ops.revert(["alpha"], site)
    assert "reinstall alpha==1.0" in err.value.hint
    assert (journal_dir(site) / "journal.json").is_file(), "nothing was changed"


def test_guard_is_registered_last(fake, monkeypatch):
    site, root = fake
    order: list[str] = []
    real = transaction.write_atomic

    def spy(path, data):
        order.append(path.relative_to(site).as_posix())
        real(path, data)

    monkeypatch.setattr(transaction, "write_atomic", spy)
    ops.apply([load_patch_set("alpha", "1.0", root)], site)
    assert order[:3] == list(RELEASED["alpha"][1])
    stamp_at = order.index(f"{GUARD_PACKAGE}/stamp.json")
    assert all(not p.startswith(GUARD_DIST_INFO) for p in order[:stamp_at])
    assert all(p.startswith(GUARD_DIST_INFO) for p in order[stamp_at + 1 :])
