"""Source cache (hash checks, offline), FetchContent parsing and the cross-check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specrig.build.definition import Dependency, load_definition
from specrig.build.execute import cross_check_dependencies
from specrig.build.sources import Archive, SourceCache, fetchcontent_var, parse_fetchcontent, scan_fetchcontent
from specrig.core.errors import BuildError, ConfigError, HashMismatchError

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "build_deps" / "tinyhdr-0000000000000000000000000000000000000001.tar.gz"
TINY_SHA = "08ec6227e420f01b2b6388859770eed6d837ad0b8ac113c15749734066d1c011"

CMAKE = """
include(FetchContent)
# FetchContent_Declare(commented-out GIT_TAG nope)
FetchContent_Declare(
    repo-cutlass
    GIT_REPOSITORY https://github.com/NVIDIA/cutlass
    GIT_TAG        57e3cfb47a2d9e0d46eb6335c3dc411498efa198
    GIT_SHALLOW    OFF
)
FetchContent_Declare(repo-triton GIT_REPOSITORY "https://github.com/triton-lang/triton" GIT_TAG v3.5.1)
FetchContent_Declare(
  repo-fmt
  URL https://${GITHUB_ARTIFACTORY}/fmtlib/fmt/archive/553ec11e.tar.gz  # a comment (with parens)
  URL_HASH SHA256=AbC123
)
"""


def test_parse_fetchcontent_git_and_url_forms():
    decls = {d.name: d for d in parse_fetchcontent(CMAKE)}
    assert sorted(decls) == ["repo-cutlass", "repo-fmt", "repo-triton"]
    assert decls["repo-cutlass"].pin == "57e3cfb47a2d9e0d46eb6335c3dc411498efa198"
    assert decls["repo-triton"].git_repository == "https://github.com/triton-lang/triton"
    assert decls["repo-fmt"].url.endswith("553ec11e.tar.gz")
    assert decls["repo-fmt"].pin == "abc123"


def test_fetchcontent_var_keeps_hyphens():
    assert fetchcontent_var("repo-flash-attention") == "FETCHCONTENT_SOURCE_DIR_REPO-FLASH-ATTENTION"


def prefilled(tmp_path: Path) -> SourceCache:
    """An air-gapped host's cache: the archive copied in under its sha256."""
    d = tmp_path / "cache" / "repo-tinyhdr"
    d.mkdir(parents=True)
    shutil.copy(TINY, d / f"{TINY_SHA}.tar.gz")
    return SourceCache(tmp_path / "cache", offline=True)


def tiny(sha: str = TINY_SHA) -> Archive:
    return Archive(
        name="repo-tinyhdr",
        url="https://github.com/specrig-fixtures/tinyhdr/archive/x.tar.gz",
        sha256=sha,
        filename="x.tar.gz",
    )


def test_prefilled_cache_unpacks_offline(tmp_path):
    cache = prefilled(tmp_path)
    assert cache.status(tiny()) == "archived"
    top = cache.unpack(tiny())
    assert (top / "include" / "tinyhdr.h").is_file()
    assert cache.status(tiny()) == "unpacked"
    assert cache.unpack(tiny()) == top  # once


def test_tampered_archive_is_refused(tmp_path):
    cache = prefilled(tmp_path)
    path = cache.archive_path(tiny())
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(HashMismatchError) as exc:
        cache.fetch(tiny())
    assert "expected sha256 " + TINY_SHA in str(exc.value)


def test_offline_missing_source_says_how_to_fill_the_cache(tmp_path):
    cache = SourceCache(tmp_path / "empty", offline=True)
    with pytest.raises(BuildError, match="--offline") as exc:
        cache.fetch(tiny("0" * 64))
    assert "--fetch-only" in str(exc.value)


def test_unpinned_source_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no pinned sha256"):
        SourceCache(tmp_path).fetch(tiny(""))


def test_fixture_dependencies_match_its_cmakelists():
    d = load_definition(str(FIXTURES / "cuda_ext" / "build.toml"))
    cross_check_dependencies(d, d.local_path())  # no error
    decls = {x.name: x for x in scan_fetchcontent(d.local_path())}
    assert sorted(decls) == ["repo-tinygit", "repo-tinyhdr"]
    assert decls["repo-tinygit"].git_tag == "0000000000000000000000000000000000000002"


def test_cross_check_names_every_difference():
    d = load_definition(str(FIXTURES / "cuda_ext" / "build.toml"))
    wrong = d.model_copy(
        update={
            "dependency": (
                d.dependencies[0].model_copy(update={"cmake_pin": "f" * 64}),
                Dependency(name="repo-extra", commit="abc", fetch=False),
            )
        }
    )
    with pytest.raises(ConfigError) as exc:
        cross_check_dependencies(wrong, d.local_path())
    msg = str(exc.value)
    assert "repo-tinyhdr: CMake pins" in msg
    assert "repo-extra: in the build definition but not declared" in msg


@pytest.mark.network
def test_flash_attn_sdist_from_the_index_matches_the_pin(tmp_path):
    """The real sdist, downloaded once into the specrig cache, has the pinned sha256."""
    from specrig.core.paths import subdir

    d = load_definition("flash-attn")
    cache = SourceCache(subdir("sources"))
    path = cache.fetch(d.source_archive())
    assert path.stat().st_size > 8_000_000
    top = cache.unpack(d.source_archive())
    assert (top / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").is_file()
    assert not (top / ".git").exists()
