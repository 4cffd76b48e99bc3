"""Source cache (hash checks, offline), FetchContent parsing and the cross-check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specrig.builder.definition import Dependency, load_definition
from specrig.builder.execute import cross_check_dependencies
from specrig.builder.sources import Archive, SourceCache, fetchcontent_var, parse_fetchcontent, scan_fetchcontent
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


# --------------------------------------------------------------------------- pins by content


def _tree(root: Path) -> Path:
    """A small source tree: the folders a build reads, a script, a link, and one folder it does not read."""
    (root / "include" / "lib").mkdir(parents=True)
    (root / "include" / "lib" / "a.h").write_text("#define A 1\n")
    (root / "csrc").mkdir()
    (root / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (root / "tool.sh").write_text("#!/bin/sh\n")
    (root / "tool.sh").chmod(0o755)
    (root / "include" / "lib" / "alias.h").symlink_to("a.h")
    (root / "media").mkdir()
    (root / "media" / "big.png").write_bytes(b"\x89PNG" * 100)
    return root


def _archive(src: Path, dest: Path, top: str, *members: str) -> Path:
    """``git archive``-like: one top folder holding ``members`` of ``src`` (all of it by default)."""
    import tarfile

    with tarfile.open(dest, "w:gz") as tar:
        for m in members or [p.name for p in src.iterdir()]:
            tar.add(src / m, arcname=f"{top}/{m}")
    return dest


def test_a_tree_pin_accepts_any_archive_of_that_tree_and_refuses_another(tmp_path):
    from specrig.builder.sources import content_digest

    src = _tree(tmp_path / "src")
    paths = ("include", "csrc")
    pin = content_digest(src, paths)
    assert pin != content_digest(src)  # the paths narrow what the pin covers
    a = Archive(
        name="dep",
        url="https://example.invalid/x.tar.gz",
        sha256="",
        filename="x.tar.gz",
        tree_sha256=pin,
        tree_paths=paths,
    )
    # the whole repository's archive (as GitHub serves it) and one of the read folders only (as
    # `git archive COMMIT include csrc` makes from a snapshot missing large files) are both accepted
    whole = _archive(src, tmp_path / "whole.tar.gz", "dep-abc")
    part = _archive(src, tmp_path / "part.tar.gz", "dep-abc", "include", "csrc")
    assert whole.read_bytes() != part.read_bytes()
    for i, archive in enumerate((whole, part)):
        cache = SourceCache(tmp_path / f"cache{i}", offline=True)
        out = cache.import_archive(a, archive)
        assert (out / "include" / "lib" / "a.h").read_text() == "#define A 1\n"
        assert cache.status(a) == "unpacked" and out.name == pin
    # one changed byte in a read folder: refused, and neither the archive nor a tree is kept
    (src / "csrc" / "k.cu").write_text("__global__ void k() { }\n")
    changed = _archive(src, tmp_path / "changed.tar.gz", "dep-abc")
    cache = SourceCache(tmp_path / "cache-bad", offline=True)
    with pytest.raises(HashMismatchError, match="unpacks to another tree"):
        cache.import_archive(a, changed)
    assert cache.status(a) == "missing" and not list((tmp_path / "cache-bad" / "dep").iterdir())
    # a changed mode counts too (an executable bit), and a file outside the paths does not
    from specrig.builder.sources import content_digest as digest

    before, narrowed = digest(src), digest(src, paths)
    (src / "tool.sh").chmod(0o644)
    assert digest(src) != before
    (src / "media" / "big.png").write_bytes(b"other")
    assert digest(src, paths) == narrowed


def test_a_tree_pinned_source_names_its_subdir_and_the_cli_imports_it(tmp_path, capsys):
    from specrig.builder.sources import content_digest
    from specrig.cli import main

    src = _tree(tmp_path / "repo" / "project")
    d = load_definition("sglang-kernel")
    assert d.source.tree_sha256 and d.source.subdir == "sgl-kernel" and not d.source.sha256
    assert {dep.name for dep in d.dependencies if dep.fetch} == {"repo-cutlass", "repo-flashinfer"}
    # the CLI refuses an unknown name and a missing file by name, before anything is planned
    assert main(["build", "sglang-kernel", "--import-source", "repo-nope=x.tar.gz", "--plan"]) == 2
    assert "has no pinned source of that name" in capsys.readouterr().err
    assert main(["build", "sglang-kernel", "--import-source", f"repo-cutlass={tmp_path}/no.tar.gz", "--plan"]) == 2
    assert "no such file" in capsys.readouterr().err
    # a subdir pin is of that folder of the archive's top folder
    a = Archive(
        name="p",
        url="https://example.invalid/p.tar.gz",
        sha256="",
        filename="p.tar.gz",
        tree_sha256=content_digest(src),
        subdir="project",
    )
    archive = _archive(tmp_path / "repo", tmp_path / "p.tar.gz", "repo-123")
    out = SourceCache(tmp_path / "cache").import_archive(a, archive)
    assert (out / "project" / "csrc" / "k.cu").is_file()
