"""The CUDA fixture (scikit-build-core + CMake + ninja, six .cu files, one
FetchContent dependency) built for sm_120 through the same machinery as
flash-attn and sgl-kernel: real nvcc, real wheel, real lock entry."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main


def main(argv: list[str]) -> int:
    return specrig_main(["build", *argv])
from specrig.build.fatbin import ptx_archs, sass_archs
from specrig.build.wheelhouse import find_wheel, read_manifest

pytestmark = [pytest.mark.nvcc, pytest.mark.network]

FIXTURES = Path(__file__).parent / "fixtures"
DEFINITION = FIXTURES / "cuda_ext" / "build.toml"
# the build environment: the fixture's build requirements, no build isolation
BUILD_REQUIREMENTS = ["scikit-build-core==0.11.6", "cmake==4.1.2", "ninja==1.13.0"]


@pytest.fixture(scope="module")
def build_python(tmp_path_factory) -> Path:
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not on PATH")
    uv = shutil.which("uv")
    if not uv:
        pytest.skip("uv is not installed")
    venv = tmp_path_factory.mktemp("buildenv") / "venv"
    subprocess.run([uv, "venv", "-q", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}", str(venv)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *BUILD_REQUIREMENTS], check=True)
    return venv / "bin" / "python"


@pytest.fixture()
def dirs(tmp_path) -> dict[str, Path]:
    """A pre-filled source cache (the air-gapped case), an empty wheelhouse, a lock."""
    from specrig.build.definition import load_definition

    cache = tmp_path / "sources"
    for dep in load_definition(str(DEFINITION)).dependencies:
        (cache / dep.name).mkdir(parents=True)
        archive = FIXTURES / "build_deps" / f"{dep.name.removeprefix('repo-')}-{dep.commit}.tar.gz"
        shutil.copy(archive, cache / dep.name / f"{dep.sha256}.tar.gz")
    lock = tmp_path / "fixture.lock"
    write_empty_lock(lock)
    return {"cache": cache, "wheelhouse": tmp_path / "wh", "logs": tmp_path / "logs", "lock": lock}


def write_empty_lock(path: Path) -> None:
    from specrig.lock import Lock, write_lock

    write_lock(
        Lock(path=path, recipe="blackwell-sm120", env="fixture", recipe_digest="sha256:0", inputs_digest="sha256:0",
             target={}, packages=())
    )  # fmt: skip


def args(python: Path, d: dict[str, Path], *extra: str) -> list[str]:
    return [
        str(DEFINITION), "--python", str(python), "--source-cache", str(d["cache"]), "--wheelhouse", str(d["wheelhouse"]),
        "--log-dir", str(d["logs"]), "--lock", str(d["lock"]), "--offline", *extra,
    ]  # fmt: skip


def only_wheel(wheelhouse: Path) -> Path:
    wheels = list(wheelhouse.glob("*/*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_fixture_builds_for_sm120_into_wheelhouse_and_lock(build_python, dirs, tmp_path, capsys):
    assert main(args(build_python, dirs, "--jobs", "1")) == 0
    wheel = only_wheel(dirs["wheelhouse"])
    assert "+sm120.cu" in wheel.name  # the local tag names arch and CUDA

    # the arch reached nvcc: the library holds sm_120 SASS, one cubin per .cu, and nothing else
    with zipfile.ZipFile(wheel) as z:
        so = next(n for n in z.namelist() if n.endswith(".so"))
        z.extract(so, tmp_path / "x")
    lib = tmp_path / "x" / so
    assert sass_archs(lib) == {120: 6}
    assert not ptx_archs(lib)

    # the job cap reached ninja: with --jobs 1 never more than one compile at once
    manifest = read_manifest(dirs["wheelhouse"], wheel.parent.name)
    assert manifest["build"]["jobs"] == 1
    assert manifest["build"]["peak_parallel_jobs"] == 1
    assert manifest["inputs"]["archs"] == ["120"]
    log = Path(manifest["build"]["log"]).read_text()
    assert "FETCHCONTENT_FULLY_DISCONNECTED=ON" in log
    assert "arch=compute_120,code=[sm_120]" in log
    assert "[6/7]" in log or "[7/7]" in log

    # recorded in the lock with name, sha256 and fingerprint
    from specrig.lock import read_lock

    built = read_lock(dirs["lock"]).built
    assert [(b.name, b.filename, b.fingerprint) for b in built] == [("specrig-cuda-ext", wheel.name, wheel.parent.name)]
    assert find_wheel(dirs["wheelhouse"], built[0].fingerprint, built[0].filename) == wheel
    assert built[0].sha256 == manifest["sha256"]

    # a second run reuses the stored wheel without building
    capsys.readouterr()
    t0 = time.monotonic()
    assert main(args(build_python, dirs)) == 0
    assert "reusing" in capsys.readouterr().err
    assert time.monotonic() - t0 < 20
    assert only_wheel(dirs["wheelhouse"]) == wheel

    # a different arch is a different fingerprint; --reuse-only refuses to build it and says what differs
    capsys.readouterr()
    assert main(args(build_python, dirs, "--arch", "90", "--reuse-only")) == 7
    err = capsys.readouterr().err
    assert "--reuse-only refuses to build" in err and "archs: ['120'] -> ['90']" in err
    assert only_wheel(dirs["wheelhouse"]) == wheel


def test_two_jobs_run_in_parallel(build_python, dirs):
    assert main(args(build_python, dirs, "--jobs", "2", "--arch", "90")) == 0
    wheel = only_wheel(dirs["wheelhouse"])
    assert "+sm90.cu" in wheel.name
    manifest = read_manifest(dirs["wheelhouse"], wheel.parent.name)
    assert manifest["build"]["peak_parallel_jobs"] == 2
    measured = (dirs["logs"] / "measured.json").read_text()
    assert "specrig-cuda-ext/threads=1/archs=1" in measured


def test_killed_build_leaves_no_wheel(build_python, dirs):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specrig.cli", "build", *args(build_python, dirs, "--jobs", "1")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until compiling has begun
        seen.append(line)
        if "building specrig-cuda-ext" in line:
            break
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _nvcc_running(proc.pid):
        time.sleep(0.1)
    import psutil

    compilers = []
    for k in psutil.Process(proc.pid).children(recursive=True):
        try:
            if k.name() in ("nvcc", "cicc", "ptxas", "cudafe++"):
                compilers.append(k)
        except psutil.Error:  # exited between listing and reading
            pass
    assert compilers, "no compiler was running when the build was killed"
    time.sleep(1.0)  # let the watchdog (0.2 s period) sample the running compile
    proc.send_signal(signal.SIGTERM)
    out = "".join(seen) + proc.communicate(timeout=60)[0]
    assert proc.returncode == 7, out
    assert "interrupted" in out and "nothing was stored" in out
    assert not list(dirs["wheelhouse"].glob("*/*.whl")) if dirs["wheelhouse"].exists() else True
    if dirs["wheelhouse"].exists():
        assert not [p for p in dirs["wheelhouse"].iterdir()]
    time.sleep(0.5)
    assert not [k for k in compilers if _alive(k)]
    # a killed build may have missed the heaviest units: its lower figure is not trusted for the next plan
    assert not (dirs["logs"] / "measured.json").exists()


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _nvcc_running(pid: int) -> bool:
    """Whether a compiler runs under the build session ``pid``."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return False
    names = []
    for k in kids:
        try:
            names.append(k.name())
        except psutil.Error:
            pass
    return any(n in ("nvcc", "cicc", "ptxas", "cudafe++") for n in names)


def test_compile_error_prints_the_first_error(build_python, dirs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES / "cuda_ext", broken)
    (broken / "src" / "scale.cu").write_text('#include "kernels.h"\n__global__ void k() { int x = undefined_name; }\n')
    import subprocess as sp

    r = sp.run(
        [sys.executable, "-m", "specrig.cli", "build", str(broken / "build.toml"), *args(build_python, dirs)[1:]],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 7
    assert "first error" in r.stderr
    assert "undefined_name" in r.stderr and "scale.cu" in r.stderr
    assert not dirs["wheelhouse"].exists() or not list(dirs["wheelhouse"].glob("*/*.whl"))
