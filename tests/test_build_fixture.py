"""The CUDA fixture (scikit-build-core + CMake + ninja, six .cu files, two
FetchContent dependencies) built for sm_120 through the same machinery as
flash-attn and sgl-kernel: real nvcc, real wheel, real built-wheel record, and
an environment that gets the wheel without being rebuilt."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from specrig.builder.fatbin import ptx_archs, sass_archs
from specrig.cli import main as specrig_main
from specrig.env.make import make_env
from specrig.lock.built import find_wheel, read_manifest, read_record, record_path
from specrig.lock.resolve import lock_recipe
from specrig.recipe.schema import load_recipe

pytestmark = [pytest.mark.nvcc, pytest.mark.network]

FIXTURES = Path(__file__).parent / "fixtures"
DEFINITION = FIXTURES / "cuda_ext" / "build.toml"


def main(argv: list[str]) -> int:
    return specrig_main(["build", *argv])


def make_dirs(root: Path) -> dict[str, Path]:
    """A pre-filled source cache (the air-gapped case), an empty wheelhouse, a record path."""
    from specrig.builder.definition import load_definition

    cache = root / "sources"
    for dep in load_definition(str(DEFINITION)).dependencies:
        (cache / dep.name).mkdir(parents=True)
        archive = FIXTURES / "build_deps" / f"{dep.name.removeprefix('repo-')}-{dep.commit}.tar.gz"
        shutil.copy(archive, cache / dep.name / f"{dep.sha256}.tar.gz")
    return {"cache": cache, "wheelhouse": root / "wh", "logs": root / "logs", "record": root / "fixture.built.toml"}


@pytest.fixture()
def dirs(tmp_path) -> dict[str, Path]:
    return make_dirs(tmp_path)


@pytest.fixture(scope="module")
def sm120(build_python, tmp_path_factory) -> dict[str, Path]:
    """The fixture built once for sm_120 with --jobs 1 (shared by the tests that read it)."""
    d = make_dirs(tmp_path_factory.mktemp("sm120"))
    assert main(args(build_python, d, "--jobs", "1")) == 0
    return d


def args(python: Path, d: dict[str, Path], *extra: str) -> list[str]:
    return [
        str(DEFINITION),
        "--python",
        str(python),
        "--source-cache",
        str(d["cache"]),
        "--wheelhouse",
        str(d["wheelhouse"]),
        "--log-dir",
        str(d["logs"]),
        "--record",
        str(d["record"]),
        "--offline",
        *extra,
    ]


def only_wheel(wheelhouse: Path) -> Path:
    wheels = list(wheelhouse.glob("*/*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_fixture_builds_for_sm120_into_wheelhouse_and_record(build_python, sm120, tmp_path, capsys):
    dirs = sm120
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
    # every .cu unit of the fixture has its own wall time and peak in the manifest (so do CMake's
    # compiler probes, which are nvcc jobs too)
    units = manifest["build"]["units"]
    assert {p.name for p in (FIXTURES / "cuda_ext").rglob("*.cu")} <= set(units)
    assert all(u["seconds"] > 0 and u["peak_gb"] > 0 for u in units.values())
    assert manifest["inputs"]["archs"] == ["120"]
    log = Path(manifest["build"]["log"]).read_text()
    assert "FETCHCONTENT_FULLY_DISCONNECTED=ON" in log
    assert "arch=compute_120,code=[sm_120]" in log
    assert "[6/7]" in log or "[7/7]" in log

    # listed in the built-wheel record with name, sha256, fingerprint and the build facts
    (built,) = read_record(dirs["record"]).wheel
    assert (built.name, built.filename, built.fingerprint) == ("specrig-cuda-ext", wheel.name, wheel.parent.name)
    assert built.sha256 == manifest["sha256"] and built.archs == ("120",)
    assert built.version == "0.1.0+" + wheel.name.split("+")[1].split("-")[0]
    assert find_wheel(dirs["wheelhouse"], built.fingerprint, built.filename, built.sha256) == wheel

    # a second run reuses the stored wheel without building
    capsys.readouterr()
    assert main(args(build_python, dirs)) == 0
    assert "reusing" in capsys.readouterr().err
    assert only_wheel(dirs["wheelhouse"]) == wheel
    assert len(list(dirs["logs"].glob("specrig-cuda-ext-*.log"))) == 1  # no second build log: nothing compiled

    # a different arch is a different fingerprint; --reuse-only refuses to build it and says what differs
    capsys.readouterr()
    assert main(args(build_python, dirs, "--arch", "90", "--reuse-only")) == 7
    err = capsys.readouterr().err
    assert "--reuse-only refuses to build" in err and "archs: ['120'] -> ['90']" in err
    assert only_wheel(dirs["wheelhouse"]) == wheel


def test_build_then_env_keeps_the_env_and_installs_the_wheel(build_python, sm120, tiny_recipe):
    """Building a wheel never invalidates an environment: the lock is untouched, and `env`
    adds the wheel from the wheelhouse to the environment it already has."""
    recipe = load_recipe(tiny_recipe)
    lock, _ = lock_recipe(recipe, "main")
    env = make_env(recipe, "main", wheelhouse=sm120["wheelhouse"])
    sentinel = env.path / "made-once"
    sentinel.write_text("")
    lock_bytes = lock.path.read_bytes()

    record = record_path(lock.path)
    assert main(args(build_python, {**sm120, "record": record})) == 0  # the sm_120 wheel, recorded for tiny.main
    assert lock.path.read_bytes() == lock_bytes
    (built,) = read_record(record).wheel

    again = make_env(recipe, "main", wheelhouse=sm120["wheelhouse"])
    assert (again.reused, again.added) == (True, ("specrig-cuda-ext",))
    assert sentinel.exists()  # the same environment, not a new one
    site = subprocess.run(
        [
            str(again.python),
            "-c",
            "import importlib.metadata as m; d = m.distribution('specrig-cuda-ext'); "
            "print(d.version); print(d.locate_file(''))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert site[0] == built.version
    (lib,) = Path(site[1]).glob("specrig_cuda_ext/*.so")
    assert sass_archs(lib) == {120: 6}
    assert make_env(recipe, "main", wheelhouse=sm120["wheelhouse"]).added == ()


def test_two_jobs_run_in_parallel(build_python, dirs):
    assert main(args(build_python, dirs, "--jobs", "2", "--arch", "90")) == 0
    wheel = only_wheel(dirs["wheelhouse"])
    assert "+sm90.cu" in wheel.name
    manifest = read_manifest(dirs["wheelhouse"], wheel.parent.name)
    assert manifest["build"]["peak_parallel_jobs"] == 2
    measured = (dirs["logs"] / "measured.json").read_text()
    assert "specrig-cuda-ext/threads=1/archs=1" in measured


def test_killed_build_leaves_no_wheel(build_python, dirs, tmp_path):
    """SIGTERM while nvcc runs: exit 7, nothing stored, and not one process of the build left."""
    # uv's own cache folder: `uv build` waits while any other uv process holds the shared one exclusively
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specrig.cli", "build", *args(build_python, dirs, "--jobs", "1")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    out: list[str] = []  # read on a thread: the pipe never fills, and a failure shows what the build said
    reader = threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        tree = _wait_for_a_compiler(proc, out)
        time.sleep(1.0)  # let the watchdog (0.2 s period) sample the running compile
        tree += [k for k in _descendants(proc.pid) if k not in tree]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
    reader.join(timeout=10)
    said = "".join(out)
    assert proc.returncode == 7, said
    assert "interrupted" in said and "nothing was stored" in said, said
    assert not dirs["wheelhouse"].exists() or not any(dirs["wheelhouse"].iterdir())  # no entry, no temp folder
    assert not dirs["record"].exists()
    time.sleep(0.5)
    left = [f"{k.pid} {k.name()}" for k in tree if _alive(k)]
    assert not left, f"processes of the killed build still running: {left}"
    # a killed build may have missed the heaviest units: its lower figure is not trusted for the next plan
    assert not (dirs["logs"] / "measured.json").exists()


def _wait_for_a_compiler(proc: subprocess.Popen, out: list[str]) -> list[psutil.Process]:
    """The build's process tree once a compiler runs in it; a build that ends first, or runs
    no compiler within 5 minutes (cmake's configure alone took over a minute on a loaded
    2-core box), fails the test with what it printed and which processes it had."""
    deadline = time.monotonic() + 300
    seen: set[str] = set()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the build ended (exit {proc.returncode}) before any compiler ran:\n{''.join(out)}")
        tree = _descendants(proc.pid)
        names = {_name(k) for k in tree}
        seen |= names
        if names & COMPILERS:
            return tree
        time.sleep(0.05)
    pytest.fail(f"no compiler ran within 300 s; processes seen: {sorted(seen)}\n{''.join(out)}")


COMPILERS = {"nvcc", "cicc", "ptxas", "cudafe++"}


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:  # exited between listing and reading
        return ""


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill_tree(pid: int) -> None:
    for p in _descendants(pid):
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_compile_error_prints_the_first_error(build_python, dirs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES / "cuda_ext", broken)
    (broken / "src" / "scale.cu").write_text('#include "kernels.h"\n__global__ void k() { int x = undefined_name; }\n')
    r = subprocess.run(
        [sys.executable, "-m", "specrig.cli", "build", str(broken / "build.toml"), *args(build_python, dirs)[1:]],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 7
    assert "first error" in r.stderr
    assert "undefined_name" in r.stderr and "scale.cu" in r.stderr
    assert not dirs["wheelhouse"].exists() or not any(dirs["wheelhouse"].iterdir())
    assert not dirs["record"].exists()
