"""Build definitions are typed: every shipped one loads, and a bad one is refused naming the
dotted key, what is wrong, and (for a misspelt key) the key that was meant."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from specrig.builder.backends import BACKENDS
from specrig.builder.definition import build_dir, known_definitions, load_definition
from specrig.core.errors import ConfigError

GOOD = """
[build]
name = "kern"
version = "1.0"
backend = "scikit-build-core"

[source]
kind = "archive"
url = "https://example.invalid/kern-1.0.tar.gz"
sha256 = ""

[memory]
gb_per_compile = 2.0

[[dependency]]
name = "repo-x"
url = "https://example.invalid/x.tar.gz"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "kern.toml"
    p.write_text(text)
    return p


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        load_definition(str(write(tmp_path, text)))
    assert exc.value.hint and "docs/builds.md" in exc.value.hint
    return str(exc.value)


@pytest.mark.parametrize("name", known_definitions())
def test_every_shipped_definition_loads_as_written(name):
    d = load_definition(name)
    raw = tomllib.loads((build_dir() / f"{name}.toml").read_text())
    assert (d.name, d.version, d.backend) == (raw["build"]["name"], raw["build"]["version"], raw["build"]["backend"])
    assert d.backend in BACKENDS
    assert [x.name for x in d.dependencies] == [x["name"] for x in raw.get("dependency", [])]
    assert len(d.rewrites) == len(raw.get("rewrite", []))
    assert d.path == (build_dir() / f"{name}.toml").resolve()


def test_defaults_fill_what_a_definition_leaves_out(tmp_path):
    d = load_definition(str(write(tmp_path, GOOD)))
    assert (d.units, d.valid_archs, d.uses_torch) == (None, (), True)
    assert d.cmake.arch_define == "CMAKE_CUDA_ARCHITECTURES" and d.memory.reserve_gib == 8.0
    assert d.source_archive().filename == "kern-1.0.tar.gz"
    assert d.dependencies[0].fetch and d.dependencies[0].archive().filename == "x.tar.gz"


def test_misspelt_keys_are_named_with_the_key_meant(tmp_path):
    msg = refusal(
        tmp_path,
        GOOD.replace('version = "1.0"', 'version = "1.0"\nunitz = 3').replace(
            'url = "https://example.invalid/x', 'shaa256 = ""\nurl = "https://example.invalid/x'
        ),
    )
    assert "build.unitz: unknown key; did you mean 'build.units'?" in msg
    assert "dependency.0.shaa256: unknown key; did you mean 'dependency.0.sha256'?" in msg


def test_wrong_values_are_named_by_their_dotted_key(tmp_path):
    msg = refusal(
        tmp_path,
        GOOD.replace("scikit-build-core", "scikit-build")
        .replace('sha256 = ""', 'sha256 = "abc"')
        .replace("gb_per_compile = 2.0", "gb_per_compile = 0\nfraction = 1.5"),
    )
    assert "build.backend: unknown backend 'scikit-build'; use one of setuptools-torch, scikit-build-core" in msg
    assert "source.sha256: not a sha256 (64 lowercase hex digits): 'abc'" in msg
    assert "memory.gb_per_compile: Input should be greater than 0 (got 0)" in msg
    assert "memory.fraction: Input should be less than or equal to 1 (got 1.5)" in msg


def test_missing_and_inconsistent_tables(tmp_path):
    msg = refusal(tmp_path, GOOD.replace("[memory]\ngb_per_compile = 2.0\n", ""))
    assert "memory: required key is missing" in msg
    msg = refusal(tmp_path, GOOD.replace('url = "https://example.invalid/kern-1.0.tar.gz"\n', ""))
    assert "source: kind = 'archive' needs url" in msg
    msg = refusal(tmp_path, GOOD + '\n[[dependency]]\nname = "repo-x"\nfetch = false\n')
    assert "dependency names must be unique; declared twice: repo-x" in msg
    msg = refusal(tmp_path, GOOD + "\n[[rewrite]]\nfile = 'CMakeLists.txt'\npattern = '(unclosed'\nreplacement = ''\n")
    assert "rewrite.0.pattern: not a regular expression" in msg
    arch_edit = "\n[[rewrite]]\nfile = 'CMakeLists.txt'\npattern = 'x'\nreplacement = 'y'\narchs = ['90', '100']\n"
    msg = refusal(
        tmp_path,
        GOOD.replace('backend = "scikit-build-core"', 'backend = "scikit-build-core"\nvalid_archs = ["90", "120"]')
        + arch_edit,
    )
    assert "rewrite.0.archs names 100, not in build.valid_archs" in msg
    msg = refusal(tmp_path, GOOD + "\n[extra]\nx = 1\n")
    assert "extra: unknown key; allowed here: build, source, memory, disk, env, cmake, dependency, rewrite" in msg


def test_unknown_build_names_the_close_one():
    with pytest.raises(ConfigError, match="unknown build 'flash-atn'") as exc:
        load_definition("flash-atn")
    assert "did you mean 'flash-attn'?" in exc.value.hint
