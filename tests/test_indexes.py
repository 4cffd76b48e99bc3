"""Package sources: the recipe's [indexes] with URLs from the user's configuration, pip's and uv's
settings honoured, and no path of one machine anywhere in the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specrig.core.errors import LockError
from specrig.env.bundle import make_bundle
from specrig.env.make import make_env, verify_env
from specrig.lock import indexes
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
    assert s.uv_args() == [] and [i.name for i in s.unconfigured] == ["pytorch-cpu"]
    assert "SPECRIG_INDEX_PYTORCH_CPU=URL" in indexes.index_hint(
        s
    ) and "UV_INDEX=pytorch-cpu=URL" in indexes.index_hint(s)
    # pip's config file (read through pip itself) and pip's variables, translated for uv
    clean_config.write_text(
        f"[global]\nfind-links = {tmp_path / 'wheels'}\nindex-url = https://mirror.invalid/simple\n"
    )
    indexes.pip_config.cache_clear()
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://extra.invalid/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "more"))
    s = indexes.sources_for(recipe, "vllm")
    assert s.uv_args() == [
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
    assert e.value.hint and "set SPECRIG_INDEX_LOCAL=URL or UV_INDEX=local=URL" in e.value.hint
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
        ["git", "ls-files", "recipes", "docs", "tests", "src"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.is_file() and path.suffix not in (".png", ".whl", ".gguf"):
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not hits, "paths of one machine:\n" + "\n".join(hits)
