"""Package sources: the recipe's [indexes] with URLs from the user's configuration, pip's and uv's
settings honoured, and no path of one machine anywhere in the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.core.errors import EnvError, LockError
from specrig.env.bundle import make_bundle
from specrig.env.make import make_env, verify_env
from specrig.lock import indexes
from specrig.lock.file import read_lock
from specrig.lock.resolve import lock_recipe
from specrig.recipe.schema import load_recipe

ROOT = Path(__file__).resolve().parents[1]

_VARS = (
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "SPECRIG_INDEX_PYTORCH_CPU",
    "SPECRIG_INDEX_LOCAL",
)


@pytest.fixture
def clean_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No index settings from this machine: an empty pip config file of the test's own."""
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    conf = tmp_path / "pip.conf"
    conf.write_text("")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    indexes.pip_config.cache_clear()
    yield conf
    indexes.pip_config.cache_clear()


def test_user_settings_are_honoured(clean_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recipe = load_recipe("cpu")
    s = indexes.sources_for(recipe, "vllm")
    # nothing configured: torch +cpu from the recipe's default, PyTorch's CPU wheel index, and only torch
    default = recipe.indexes["pytorch-cpu"].default
    assert default and [(i.name, i.url) for i in s.pinned_indexes] == [("pytorch-cpu", default)]
    assert s.uv_args(pin_recipe_indexes=True) == [] and not s.unconfigured
    assert any("the recipe's default" in o for o in s.origins)
    # a find-links folder that holds the pinned wheel comes first: the default is not used
    held = tmp_path / "held"
    held.mkdir()
    (held / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("PIP_FIND_LINKS", str(held))
    s = indexes.sources_for(recipe, "vllm")
    assert s.pinned_indexes == () and any(f"find-links {held}" in o for o in s.origins)
    monkeypatch.delenv("PIP_FIND_LINKS")
    # pip's config file (read through pip itself) and pip's variables, translated for uv
    clean_config.write_text(
        f"[global]\nfind-links = {tmp_path / 'wheels'}\nindex-url = https://mirror.invalid/simple\n"
    )
    indexes.pip_config.cache_clear()
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://extra.invalid/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "more"))
    s = indexes.sources_for(recipe, "vllm")
    assert s.uv_args(pin_recipe_indexes=True) == [
        "--index-url",
        "https://mirror.invalid/simple",
        "--extra-index-url",
        "https://extra.invalid/simple",
        "--find-links",
        str(tmp_path / "more"),
        "--find-links",
        str(tmp_path / "wheels"),
    ]
    # uv's own default index wins over pip's (uv reads it itself)
    monkeypatch.setenv("UV_INDEX_URL", "https://uv.invalid/simple")
    assert "--index-url" not in indexes.sources_for(recipe, "vllm").uv_args()
    # the recipe's index: from its variable, or from UV_INDEX=name=url
    monkeypatch.setenv("UV_INDEX", "pytorch-cpu=https://torch.invalid/cpu")
    s = indexes.sources_for(recipe, "vllm")
    assert [(i.name, i.url) for i in s.pinned_indexes] == [("pytorch-cpu", "https://torch.invalid/cpu")]
    assert "https://torch.invalid/cpu" in s.uv_args() and "https://torch.invalid/cpu" not in s.uv_args(
        pin_recipe_indexes=True
    )
    monkeypatch.setenv("SPECRIG_INDEX_PYTORCH_CPU", "https://var.invalid/cpu")
    assert indexes.sources_for(recipe, "vllm").pinned_indexes[0].url == "https://var.invalid/cpu"


def _simple_index(tmp_path: Path) -> Path:
    """A PEP 503 index on disk serving one wheel (a package no other index has)."""
    proj = tmp_path / "proj"
    (proj / "src" / "specrig_idx_probe").mkdir(parents=True)
    (proj / "src" / "specrig_idx_probe" / "__init__.py").write_text("X = 1\n")
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "specrig-idx-probe"\nversion = "1.0"\n'
        '[build-system]\nrequires = ["hatchling==1.33.0"]\nbuild-backend = "hatchling.build"\n'
    )
    dist = tmp_path / "dist"
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(dist), str(proj)], check=True, capture_output=True)
    wheel = next(dist.glob("*.whl"))
    pkg = tmp_path / "simple" / "specrig-idx-probe"
    pkg.mkdir(parents=True)
    shutil.copy(wheel, pkg / wheel.name)
    (pkg / "index.html").write_text(f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>\n')
    return tmp_path / "simple"


@pytest.mark.network
def test_recipe_index_from_the_users_variable(
    tiny_recipe: Path, tmp_path: Path, clean_config: Path, monkeypatch
) -> None:
    tiny_recipe.write_text(
        tiny_recipe.read_text().replace('"tomli==2.0.1"]', '"tomli==2.0.1", "specrig-idx-probe==1.0"]')
        + '\n[indexes.local]\npackages = ["specrig-idx-probe"]\nenv = "SPECRIG_INDEX_LOCAL"\nabout = "a test index"\n'
    )
    recipe = load_recipe(tiny_recipe)
    with pytest.raises(LockError) as e:  # not configured: the hint says how
        lock_recipe(recipe, "main")
    assert e.value.hint and "SPECRIG_INDEX_LOCAL=URL" in e.value.hint and 'UV_INDEX="local=URL"' in e.value.hint
    monkeypatch.setenv("SPECRIG_INDEX_LOCAL", _simple_index(tmp_path).as_uri())
    lock, _ = lock_recipe(recipe, "main")
    assert lock.versions() == {"six": "1.16.0", "specrig-idx-probe": "1.0", "tomli": "2.0.1"}
    assert "://" not in lock.path.read_text() and str(tmp_path) not in lock.path.read_text()
    # installed (and bundled) source by source: the probe only from its index, the rest from the default
    env = make_env(recipe, "main", skip_preflight=True)
    assert verify_env(env.path, lock, {}) == []
    made = make_bundle(recipe, "main", tmp_path / "bundle")
    assert {f.name for f in made.files} == {"six", "specrig-idx-probe", "tomli"}


def test_no_path_of_one_machine_in_the_repository() -> None:
    pattern = re.compile("/" + r"opt/|/" + r"root\b|/" + r"work\b")
    files = subprocess.run(
        ["git", "ls-files", "recipes", "docs", "tests", "studies", "src"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.is_file() and path.suffix not in (".png", ".whl", ".gguf"):
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not hits, "paths of one machine:\n" + "\n".join(hits)


@pytest.fixture
def served_index(tmp_path: Path):
    """The PEP 503 folder of ``_simple_index`` served over HTTP on 127.0.0.1 (a stand-in for a remote index)."""
    import functools
    import http.server

    from client_support import local_http

    root = _simple_index(tmp_path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root.parent))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    with local_http(handler) as url:
        yield f"{url}/simple", root


@pytest.mark.network
def test_a_recipe_default_source_serves_when_nothing_else_does(
    tiny_recipe: Path, tmp_path: Path, clean_config: Path, served_index, monkeypatch
) -> None:
    """The recipe's default (here a real index on 127.0.0.1, standing in for PyTorch's) serves a
    fresh machine with no find-links; the same wheel in a find-links folder is used instead when
    there, with the same hash in the lock; nowhere to be had, the error names the package, the
    sources tried and the two fixes."""
    url, root = served_index
    base = tiny_recipe.read_text().replace('"tomli==2.0.1"]', '"tomli==2.0.1", "specrig-idx-probe==1.0"]')
    tiny_recipe.write_text(
        base + f'\n[indexes.local]\npackages = ["specrig-idx-probe"]\nenv = "SPECRIG_INDEX_LOCAL"\ndefault = "{url}"\n'
    )
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    assert lock.versions()["specrig-idx-probe"] == "1.0" and "://" not in lock.path.read_text()
    probe_hash = next(p for p in lock.packages if p.name == "specrig-idx-probe").hashes
    env = make_env(recipe, "main", skip_preflight=True)
    assert verify_env(env.path, lock, {}) == []
    # the wheel in a find-links folder: used instead of the default, same hash
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    shutil.copy(next((root / "specrig-idx-probe").glob("*.whl")), wheels)
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    s = indexes.sources_for(recipe, "main")
    assert s.pinned_indexes == () and str(wheels) in s.uv_args()
    again, _ = lock_recipe(recipe, "main")
    assert next(p for p in again.packages if p.name == "specrig-idx-probe").hashes == probe_hash
    monkeypatch.delenv("PIP_FIND_LINKS")
    # a default that does not have it, nothing else configured: named, with both fixes
    empty = tmp_path / "empty-simple"
    (empty / "specrig-idx-probe").mkdir(parents=True)
    (empty / "specrig-idx-probe" / "index.html").write_text("<html><body></body></html>\n")
    tiny_recipe.write_text(
        base
        + f'\n[indexes.local]\npackages = ["specrig-idx-probe"]\nenv = "SPECRIG_INDEX_LOCAL"\ndefault = "{empty.as_uri()}"\n'
    )
    with pytest.raises(LockError) as e:
        lock_recipe(load_recipe(tiny_recipe), "main")
    assert "no source has specrig-idx-probe" in e.value.message and "tried:" in e.value.message
    assert (
        e.value.hint
        and "SPECRIG_INDEX_LOCAL=URL" in e.value.hint
        and 'UV_INDEX="local=URL"' in e.value.hint
        and "FIND_LINKS" in e.value.hint
    )


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_index_that_cannot_be_reached_names_the_locked_package_and_the_three_ways(
    clean_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cpu recipe's torch from [indexes.pytorch-cpu], whose URL here refuses connections (as a
    host this machine cannot reach): the error names the index, where its URL came from, uv's cause,
    the locked torch that needed it, and the three ways to give another source, its wheel file named.
    A source that is a missing folder: no source has torch, the same three ways."""
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))  # a fresh env: the shared one untouched
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # a refused connection fails at once
    recipe = load_recipe("cpu")
    torch = next(p for p in read_lock(recipe.lock_path("vllm")).packages if p.name == "torch")
    url = f"http://127.0.0.1:{_closed_port()}/"
    monkeypatch.setenv("SPECRIG_INDEX_PYTORCH_CPU", url)
    with pytest.raises(EnvError) as e:
        make_env(recipe, "vllm", skip_preflight=True)
    msg, hint = e.value.message, e.value.hint or ""
    assert f"cannot reach [indexes.pytorch-cpu] at {url} (from SPECRIG_INDEX_PYTORCH_CPU)" in msg
    assert "Connection refused" in msg and f"it is the source of torch {torch.version}" in msg
    assert hint.startswith(f"give torch {torch.version} another source, one of: SPECRIG_INDEX_PYTORCH_CPU=URL")
    assert 'UV_INDEX="pytorch-cpu=URL"' in hint and "PIP_FIND_LINKS / UV_FIND_LINKS" in hint
    assert torch.files[0].endswith(".whl") and f"a folder holding {torch.files[0]}" in hint
    monkeypatch.setenv("SPECRIG_INDEX_PYTORCH_CPU", (tmp_path / "no-such-folder").as_uri())
    with pytest.raises(EnvError) as e:
        make_env(recipe, "vllm", skip_preflight=True)
    assert f"no source has torch=={torch.version}" in e.value.message
    assert e.value.hint and "SPECRIG_INDEX_PYTORCH_CPU=URL" in e.value.hint and torch.files[0] in e.value.hint


def test_the_recipe_default_that_cannot_be_reached_is_named_as_the_default(clean_config: Path) -> None:
    """Nothing configured, so torch +cpu comes from the recipe's default; uv's words for a host that
    does not resolve (as on a machine without that network) name it as the recipe's default."""
    recipe = load_recipe("cpu")
    default = recipe.indexes["pytorch-cpu"].default
    assert default
    torch = next(p for p in read_lock(recipe.lock_path("vllm")).packages if p.name == "torch")
    uv_said = (
        f"error: Failed to fetch: {default}/torch/\n"
        f"  cause: error sending request for url ({default}/torch/)\n"
        "  cause: client error (Connect)\n  cause: dns error\n"
        "  cause: failed to lookup address information: Name or service not known\n"
    )
    got = indexes.missing_hint(uv_said, indexes.sources_for(recipe, "vllm"), [torch])
    assert got is not None
    msg, hint = got
    assert f"cannot reach [indexes.pytorch-cpu] at {default} (the recipe's default: PyTorch's CPU wheel index)" in msg
    assert "Name or service not known" in msg and f"torch {torch.version}" in msg
    assert "SPECRIG_INDEX_PYTORCH_CPU=URL" in hint and torch.files[0] in hint
    # while locking (no lock yet): the index's packages are named instead
    msg, hint = indexes.missing_hint(uv_said, indexes.sources_for(recipe, "vllm")) or ("", "")
    assert msg.endswith("it is the source of torch") and "the wheel of torch" in hint
