"""The kit: made here from real (small) wheels in split volumes, installed by its own stdlib
installer in a subprocess with no index; a missing volume and an altered byte refused by name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from specrig.env.kit import make_kit
from specrig.lock.resolve import lock_recipe
from specrig.recipe.schema import load_recipe

pytestmark = pytest.mark.network

# Like tests/conftest.py's tiny recipe, but as the GPU hosts are: both environments layered over
# the host's interpreter ($SPECRIG_HOST_PYTHON), which provides specrig's heavy dependencies; so
# the kit carries what the H200 image lacks too (pydantic and its three, tomli-w) plus uv.
PROVIDED = """\
    "rich", "markdown-it-py", "mdurl", "pygments", "httpx", "anyio", "certifi", "httpcore",
    "h11", "idna", "sniffio", "aiohttp", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist",
    "multidict", "propcache", "yarl", "prometheus-client", "matplotlib", "contourpy", "cycler",
    "fonttools", "kiwisolver", "numpy", "pillow", "pyparsing", "python-dateutil", "tzdata", "psutil",
    "packaging", "filelock", "nvidia-ml-py", "pip", "pytest", "iniconfig", "pluggy",
    "pytest-benchmark", "py-cpuinfo*", "typing-extensions"
"""
KIT_RECIPE = """
[recipe]
name = "tinykit"
description = "two small layered environments, one wheel shared, a small model package"
exclude_newer = "2026-11-29T00:00:00Z"

[host]
platform = "x86_64-manylinux_2_36"
python = "3.11"
min_memory_gib = 0.5
min_disk_gib = 0.5

[torch]
version = "2.13.0"
variant = "cpu"

[env.main]
python = "$SPECRIG_HOST_PYTHON"
requirements = ["six==1.16.0", "tomli==2.0.1"]
host_provides = [
PROVIDED
]

[env.other]
python = "$SPECRIG_HOST_PYTHON"
requirements = ["tomli==2.0.1"]
host_provides = [
PROVIDED
]

[model]
served_name = "none"
gguf_package = "toml==0.10.2"
gguf_package_hash = "sha256:806143ae5bfb6a3c6e736a764057db0e6a0e05e338b5630894a5f779cabb4f9b"
gguf_file = "toml/__init__.py"

[builds.flash-attn]
version = "2.8.3"
env = "main"

[engine.vllm]
env = "main"

[engine.sglang]
env = "other"
""".replace("PROVIDED", PROVIDED.strip())


SOURCE_SHA = "5e" * 32


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the kit, the cache) made once: the download and the uv build are the slow parts."""
    base = tmp_path_factory.mktemp("kit")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECRIG_CACHE_DIR", str(base / "cache"))
    mp.setenv("SPECRIG_HOST_PYTHON", sys.executable)
    try:
        (base / "recipes").mkdir()
        path = base / "recipes" / "tinykit.toml"
        path.write_text(KIT_RECIPE)
        recipe = load_recipe(path)
        for env in ("main", "other"):
            lock_recipe(recipe, env)
        archive = base / "flash-attn-source.tar.gz"  # stands for a build's pinned source archive
        archive.write_bytes(b"pinned source bytes\n" * 100)
        builds = {"flash-attn": ((f"flash-attn/{SOURCE_SHA}.tar.gz", archive),)}
        make_kit(recipe, ["vllm", "sglang"], base / "KIT", split_mb=8, sharegpt=False, builds=builds)
    finally:
        mp.undo()
    return base / "KIT", base / "cache"


def _install(kit: Path, into: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "SPECRIG_", "PYTHONPATH"))}
    env |= {"SPECRIG_CACHE_DIR": str(cache), "UV_OFFLINE": "1", "UV_NO_INDEX": "1", "PIP_NO_INDEX": "1"}
    env |= {"UV_INDEX_URL": "http://127.0.0.1:9/simple", "UV_CACHE_DIR": str(into.parent / "uv-cache")}
    cmd = [sys.executable, str(kit / "vol-001" / "install.py"), "--into", str(into), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_kit_in_volumes_installs_offline_with_its_own_installer(kit: tuple[Path, Path], tmp_path: Path) -> None:
    out, cache = kit
    text = (out / "vol-001" / "kit.toml").read_text()
    assert "://" not in text
    doc = tomllib.loads(text)
    vols = sorted(p.name for p in out.iterdir())
    assert len(vols) >= 3 and vols[0] == "vol-001"
    for vol in vols:
        assert sum(p.stat().st_size for p in (out / vol).iterdir()) <= 8 * 10**6
        assert (out / vol / "kit.toml").read_text() == text
        assert (out / vol / "install.py").read_bytes() == (out / "vol-001" / "install.py").read_bytes()
    by_name = {f["name"]: f for f in doc["files"]}
    kinds = {f["kind"] for f in doc["files"]}
    assert kinds == {"locked", "start", "specrig", "model", "root", "source"}
    assert doc["builds"] == ["flash-attn"] and by_name["flash-attn"]["filename"] == f"{SOURCE_SHA}.tar.gz"
    assert by_name["tomli"]["envs"] == ["main", "other"]  # one file, both environments
    assert [f["name"] for f in doc["files"]].count("tomli") == 1
    assert len(by_name["uv"]["parts"]) >= 2  # larger than a volume: split, joined on the host
    assert {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "tomli-w"} <= set(by_name)
    assert "rich" not in by_name  # the host provides it
    assert by_name["toml"]["kind"] == "model" and doc["engines"] == {"sglang": "other", "vllm": "main"}

    into = tmp_path / "host"
    proc = _install(out, into, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    launcher = into / "specrig"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECRIG_", "PYTHONPATH"))}
    env["SPECRIG_CACHE_DIR"] = str(cache)
    where = subprocess.run(
        [str(launcher), "env", "--recipe", "tinykit", "--engine", "sglang", "--check"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert where.returncode == 0, where.stdout + where.stderr
    assert "help" in subprocess.run([str(launcher), "--help"], capture_output=True, text=True, env=env).stdout
    # specrig and pydantic come from the kit's own venv, not from this interpreter's installs; the
    # launcher sets no PYTHONPATH, which every engine process it starts would inherit
    probe = "import specrig, pydantic, tomli_w; print(specrig.__file__, pydantic.__file__)"
    got = subprocess.run([str(into / "venv" / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    assert got.stdout.split() and all(p.startswith(str(into / "venv")) for p in got.stdout.split()), got
    assert not [ln for ln in launcher.read_text().splitlines() if "PYTHONPATH=" in ln]
    venv = cache / "envs" / "tinykit-main" / "bin" / "python"
    assert subprocess.run([str(venv), "-c", "import six, tomli"]).returncode == 0
    assert (into / "wheels" / "toml-0.10.2-py2.py3-none-any.whl").is_file()  # found by UV_FIND_LINKS
    # the build's source, where `specrig build flash-attn --offline` looks: the launcher's source cache
    placed = into / "sources" / "flash-attn" / f"{SOURCE_SHA}.tar.gz"
    assert placed.read_bytes() == b"pinned source bytes\n" * 100
    assert 'export SPECRIG_SOURCE_CACHE="${SPECRIG_SOURCE_CACHE:-$D/sources}"' in launcher.read_text()
    assert "build flash-attn --recipe tinykit --offline" in proc.stdout


def test_missing_volume_and_altered_byte_are_refused_by_name(kit: tuple[Path, Path], tmp_path: Path) -> None:
    src, cache = kit
    out = tmp_path / "KIT"
    shutil.copytree(src, out)
    doc = tomllib.loads((out / "vol-001" / "kit.toml").read_text())
    part = next(p for f in doc["files"] if f["name"] == "uv" for p in f["parts"] if not p["path"].startswith("vol-001"))
    data = bytearray((out / part["path"]).read_bytes())
    data[1000] ^= 0x01
    (out / part["path"]).write_bytes(bytes(data))
    proc = _install(out, tmp_path / "host", cache)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{part['path']} is altered: sha256" in proc.stderr and part["sha256"] in proc.stderr
    assert "copy the file(s) named above again" in proc.stderr
    assert not (tmp_path / "host" / "specrig").exists()
    last = sorted(p.name for p in out.iterdir())[-1]
    shutil.rmtree(out / last)
    proc = _install(out, tmp_path / "host", cache)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"volume {last} is missing from {out}" in proc.stderr and "copy the volume(s)" in proc.stderr


def test_a_start_package_an_engine_also_locks_stays_a_start_package(tmp_path: Path) -> None:
    """pydantic is in specrig's start set and in both engines' locks: carried once, installed into
    specrig's venv (the first kit made for the H200 dropped it from there)."""
    from specrig.env.kit import KitFile, _dedupe

    def f(kind: str, envs: list[str]) -> tuple[KitFile, Path]:
        sha = "ab" * 32
        return KitFile(
            name="pydantic", version="2", filename="p.whl", sha256=sha, size=1, kind=kind, envs=envs, parts=[]
        ), tmp_path

    for order in (
        [f("locked", ["vllm"]), f("start", []), f("locked", ["sglang"])],
        [f("start", []), f("locked", ["vllm"])],
    ):
        [(kept, _)] = _dedupe(order)
        assert kept.kind == "start" and set(kept.envs) == {e for k, _ in order for e in k.envs}


def test_a_kit_with_nothing_to_carry_or_an_unknown_build_is_refused(tmp_path: Path, monkeypatch) -> None:
    from specrig.core.errors import ConfigError

    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "recipes").mkdir()
    path = tmp_path / "recipes" / "tinykit.toml"
    path.write_text(KIT_RECIPE)
    recipe = load_recipe(path)
    with pytest.raises(ConfigError, match="no engine and no build"):
        make_kit(recipe, [], tmp_path / "KIT", split_mb=8)
    with pytest.raises(ConfigError, match="pins no build sgl-kernel") as exc:
        make_kit(recipe, [], tmp_path / "KIT", split_mb=8, builds={"sgl-kernel": ()})
    assert "flash-attn" in exc.value.hint
    assert not (tmp_path / "KIT").exists()
