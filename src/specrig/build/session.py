"""One build, start to end: resolve -> plan -> sources -> build -> wheelhouse -> lock.

``make_plan`` reads the recipe, the build definition and this host and decides
everything without side effects (``--plan`` prints it). ``execute`` fetches and
verifies the sources, cross-checks the FetchContent dependencies, builds in a
temporary copy with the watchdog on, stores the wheel atomically under its
fingerprint and records it in the recipe's lock. A wheel already stored under
the same fingerprint is reused without building.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..errors import BuildError, ConfigError
from ..log import log
from ..paths import subdir
from .backend import Backend, BuildContext, local_version_tag
from .cap import (
    JobCap,
    host_budget,
    load_measured,
    plan_cap,
    record_measured,
)
from .definition import BuildDefinition, load_definition
from .flash_attn import FlashAttnBackend
from .progress import RunResult, run_build_command
from .skbuild import ScikitBuildBackend
from .sources import SourceCache, fetchcontent_var, scan_fetchcontent
from .watchdog import WatchdogReport
from .wheelhouse import (
    explain_mismatch,
    find_wheel,
    fingerprint,
    read_manifest,
    sha256_file,
    store_wheel,
)

__all__ = [
    "BuildRequest",
    "BuildPlan",
    "BuildOutcome",
    "make_plan",
    "render_plan",
    "execute",
    "fetch_sources",
    "cross_check_dependencies",
    "normalize_arch",
    "BACKENDS",
]

BACKENDS: Final[dict[str, Backend]] = {
    "setuptools-torch": FlashAttnBackend(),
    "scikit-build-core": ScikitBuildBackend(),
}
FINGERPRINT_SCHEMA = 1
DEFAULT_RECIPE = "blackwell-sm120"
# Variables that change how fast a build runs, never the bytes it makes.
PARALLELISM_VARS = {"MAX_JOBS", "NVCC_THREADS", "CMAKE_BUILD_PARALLEL_LEVEL"}


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    target: str
    recipe: str = DEFAULT_RECIPE
    archs: tuple[str, ...] | None = None
    jobs: int | None = None
    nvcc_threads: int | None = None
    source_cache: Path | None = None
    wheelhouse: Path | None = None
    python: Path | None = None
    lock: Path | None = None
    memory_gib: float | None = None
    cores: int | None = None
    offline: bool = False
    rebuild: bool = False
    reuse_only: bool = False
    log_dir: Path | None = None
    plan_only: bool = False
    """Planning only: a build that does not fit is shown (0 jobs), not refused."""


@dataclass(frozen=True, kw_only=True)
class SourceLine:
    name: str
    kind: str
    location: str
    pin: str
    sha256: str
    status: str
    cmake_var: str = ""


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    ctx: BuildContext
    env: dict[str, str]
    config_settings: list[str]
    sources: list[SourceLine]
    fingerprint_inputs: dict[str, Any]
    fingerprint: str
    python: Path
    python_exists: bool
    lock_path: Path | None
    wheelhouse: Path
    source_cache: Path
    log_dir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def definition(self) -> BuildDefinition:
        return self.ctx.definition

    @property
    def cap(self) -> JobCap:
        return self.ctx.cap


@dataclass(frozen=True, kw_only=True)
class BuildOutcome:
    wheel: Path
    sha256: str
    fingerprint: str
    reused: bool
    run: RunResult | None = None


# --------------------------------------------------------------------------- probing


def normalize_arch(a: str) -> str:
    """``12.0``, ``sm_120``, ``120`` -> ``120``."""
    s = a.strip().lower().removeprefix("sm_").removeprefix("sm").replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", s):
        raise ConfigError(f"not a GPU arch: {a!r}", hint="write arch numbers like 120, 90 or 12.0")
    return s


def cuda_home() -> Path | None:
    """The CUDA toolkit root: ``$CUDA_HOME``, the root of the nvcc on PATH (through
    links and one-line ``exec`` wrappers), else ``/usr/local/cuda``."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        try:
            head = real.read_bytes()[:4096]
        except OSError:
            head = b""
        if head.startswith(b"#!"):
            m = re.search(rb"exec\s+(\S+/bin/nvcc)", head)
            if m:
                real = Path(m.group(1).decode()).resolve()
        root = real.parent.parent
        if (root / "include" / "cuda_runtime.h").exists() or (root / "targets").is_dir():
            return root
    default = Path("/usr/local/cuda")
    return default if (default / "bin" / "nvcc").exists() else None


def cuda_toolkit_version() -> str | None:
    """The version of ``$CUDA_HOME/bin/nvcc`` (see :func:`cuda_home`)."""
    cands = []
    home = cuda_home()
    if home:
        cands.append(str(home / "bin" / "nvcc"))
    for nvcc in cands:
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
        except OSError:
            continue
        m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
        if m:
            return m.group(1)
    return None


_PY_PROBE = """
import json, sys
info = {"tag": f"cp{sys.version_info[0]}{sys.version_info[1]}", "torch": None, "torch_cuda": None}
try:
    import torch
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
except Exception:
    pass
print(json.dumps(info))
"""


def probe_python(python: Path) -> dict[str, Any]:
    try:
        out = subprocess.run([str(python), "-c", _PY_PROBE], capture_output=True, text=True, timeout=120, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"cannot run the build python {python}: {exc}", hint="give --python of a working environment"
        ) from None


def tree_digest(root: Path) -> str:
    """sha256 over (relative path, content) of a local source folder, skipping build outputs."""
    skip = {"build", "dist", "__pycache__", ".git", ".pytest_cache"}
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part in skip or part.endswith(".egg-info") for part in rel.parts) or not p.is_file():
            continue
        h.update(str(rel).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


# --------------------------------------------------------------------------- planning


def _env_python(recipe, env_name: str) -> Path:
    return subdir("envs") / f"{recipe.name}-{env_name}" / "bin" / "python"


def _resolve_archs(req: BuildRequest, recipe, pin, d: BuildDefinition) -> tuple[str, ...]:
    """``--arch`` > ``[builds.NAME].arch`` > ``host.compute_capability``, checked by the backend."""
    raw = req.archs or (tuple(pin.arch) if pin and pin.arch else tuple(recipe.host.arch_list))
    archs = tuple(dict.fromkeys(normalize_arch(a) for a in raw))
    if not archs:
        raise ConfigError(f"recipe {recipe.name!r} names no GPU arch", hint="give --arch 120 (or a GPU recipe)")
    BACKENDS[d.backend].check_archs(d, archs)
    return archs


def _resolve_python(
    req: BuildRequest, recipe, pin, d: BuildDefinition, notes: list[str]
) -> tuple[Path, bool, str, str | None]:
    """The python that builds (the recipe's env: its torch, no build isolation), its tag and torch.
    An env not made yet is planned from the recipe."""
    if req.python:
        python = Path(req.python)
    elif pin:
        python = _env_python(recipe, pin.env)
    else:
        raise ConfigError(
            f"recipe {recipe.name!r} has no [builds.{d.name}] table, so there is no environment to build in",
            hint="give --python PATH of an environment that has the build requirements",
        )
    if not python.exists():
        notes.append(f"build python {python} does not exist yet (make it with `nox -s env`); planned from the recipe")
        torch = f"{recipe.torch.version}+{recipe.torch.variant}" if d.uses_torch else None
        return python, False, "cp" + recipe.host.python.replace(".", ""), torch
    info = probe_python(python)
    torch = None
    if d.uses_torch:
        if not info["torch"]:
            raise ConfigError(
                f"{python} has no torch; {d.name} builds against the recipe's torch",
                hint="make the env first: nox -s env",
            )
        torch = info["torch"]
        if torch.split("+")[0] != recipe.torch.version:
            raise ConfigError(
                f"{python} has torch {torch}, the recipe locks {recipe.torch.version}",
                hint="rebuild the environment from its lock: nox -s env",
            )
    return python, True, info["tag"], torch


def _resolve_toolkit(recipe, torch: str | None, notes: list[str]) -> str:
    toolkit = cuda_toolkit_version()
    if toolkit is None:
        toolkit = recipe.host.cuda or "unknown"
        notes.append(f"no nvcc found here; planned for CUDA {toolkit} from the recipe")
    if torch and "+cu" in torch and toolkit[:1].isdigit():
        torch_cuda_major = torch.split("+cu", 1)[1][:2]
        if torch_cuda_major != toolkit.split(".")[0]:
            notes.append(
                f"torch {torch} was built with CUDA {torch_cuda_major}.x but nvcc here is {toolkit}: torch's "
                "cpp_extension refuses a CUDA major mismatch; build where the toolkit matches (set CUDA_HOME)"
            )
    return toolkit


def _plan_sources(d: BuildDefinition, cache: SourceCache) -> tuple[list[SourceLine], str, dict[str, Path]]:
    """What is fetched from where, its pin and cache status; the source digest; unpacked dependency dirs."""
    sources: list[SourceLine] = []
    src_archive = d.source_archive()
    if src_archive:
        loc = d.source.url or f"package index: {d.source.distribution}=={d.version} ({d.source.filename})"
        sources.append(
            SourceLine(
                name=d.name, kind=d.source.kind, location=loc, pin=d.source.commit or d.version,
                sha256=d.source.sha256 or "(unpinned)", status=cache.status(src_archive),
            )
        )  # fmt: skip
        source_digest = d.source.sha256
    else:
        local = d.local_path()
        source_digest = tree_digest(local)
        sources.append(
            SourceLine(name=d.name, kind="path", location=str(local), pin="-", sha256=source_digest, status="local")
        )
    dep_dirs: dict[str, Path] = {}
    for dep in d.dependencies:
        a = dep.archive()
        st = "not used by this build" if not dep.fetch else cache.status(a) if dep.sha256 else "unpinned"
        if st == "unpacked":
            dep_dirs[dep.name] = cache.unpacked_path(a)
        sources.append(
            SourceLine(
                name=dep.name, kind="fetchcontent", location=dep.url or dep.repository, pin=dep.commit,
                sha256=dep.sha256 or "(unpinned)", status=st, cmake_var=fetchcontent_var(dep.name) if dep.fetch else "",
            )
        )  # fmt: skip
    return sources, source_digest, dep_dirs


def make_plan(req: BuildRequest) -> BuildPlan:
    from ..recipe import load_recipe

    recipe = load_recipe(req.recipe)
    d = load_definition(req.target)
    backend = BACKENDS[d.backend]
    pin = recipe.builds.get(d.name)
    notes: list[str] = []
    if pin and pin.version != d.version:
        raise ConfigError(
            f"recipe {recipe.name!r} pins {d.name} {pin.version}, but the build definition {d.path.name} is for {d.version}",
            hint=f"update builds.{d.name}.version in the recipe or the definition so they agree",
        )
    archs = _resolve_archs(req, recipe, pin, d)
    python, python_exists, py_tag, torch = _resolve_python(req, recipe, pin, d, notes)
    toolkit = _resolve_toolkit(recipe, torch, notes)

    threads = req.nvcc_threads or 1
    logs = req.log_dir or subdir("build-logs")
    measured = load_measured(logs, d.name, nvcc_threads=threads, n_archs=len(archs)) if req.memory_gib is None else None
    cap = plan_cap(
        d.memory, host_budget(memory_gib=req.memory_gib, cores=req.cores), n_archs=len(archs), nvcc_threads=threads,
        units=d.units, jobs=req.jobs, measured_gb_per_job=measured, refuse=not req.plan_only,
    )  # fmt: skip

    cache_root = req.source_cache or subdir("sources")
    sources, source_digest, dep_dirs = _plan_sources(d, SourceCache(cache_root, offline=req.offline))

    local_version = local_version_tag(d.local_version, archs=archs, cuda_toolkit=toolkit, torch=torch)
    ctx = BuildContext(
        definition=d, recipe=recipe.name, archs=archs, cap=cap, cuda_toolkit=toolkit, torch=torch,
        python_tag=py_tag, local_version=local_version, dep_dirs=dep_dirs,
    )  # fmt: skip
    env = backend.environment(ctx)
    settings = backend.config_settings(ctx)
    inputs = {
        "schema": FINGERPRINT_SCHEMA,
        "name": d.name,
        "version": d.version,
        "backend": d.backend,
        "source_sha256": source_digest,
        "dependencies": {dep.name: dep.sha256 for dep in d.dependencies if dep.fetch},
        "rewrites": [[r.file, r.pattern, r.replacement] for r in d.rewrites],
        "torch": torch,
        "cuda_toolkit": toolkit,
        "archs": list(archs),
        "python_tag": py_tag,
        "local_version": local_version,
        "env": {k: v for k, v in sorted(env.items()) if k not in PARALLELISM_VARS},
        "config_settings": sorted(s for s in settings if not _is_machine_specific(s, d)),
    }
    lock_path = req.lock
    if lock_path is None and pin is not None:
        lock_path = recipe.lock_path(pin.env)
    return BuildPlan(
        ctx=ctx, env=env, config_settings=settings, sources=sources, fingerprint_inputs=inputs,
        fingerprint=fingerprint(inputs), python=python, python_exists=python_exists, lock_path=lock_path,
        wheelhouse=req.wheelhouse or subdir("wheelhouse"), source_cache=cache_root, log_dir=logs, notes=notes,
    )  # fmt: skip


def _is_machine_specific(setting: str, d: BuildDefinition) -> bool:
    """Settings that name local paths or thread counts (not the bytes): left out of the fingerprint."""
    key = setting.split("=", 1)[0]
    if key.startswith("cmake.define.FETCHCONTENT_SOURCE_DIR_") or key == "build.verbose":
        return True
    return bool(d.cmake.threads_define) and key == f"cmake.define.{d.cmake.threads_define}"


def render_plan(plan: BuildPlan) -> str:
    d, ctx, cap = plan.definition, plan.ctx, plan.cap
    out = [
        f"build plan: {d.name} {d.version}+{ctx.local_version}  (recipe {ctx.recipe}, definition {d.path})",
        f"  archs: {', '.join('sm_' + a for a in ctx.archs)}   CUDA toolkit {ctx.cuda_toolkit}   torch {ctx.torch or '-'}   python {ctx.python_tag}",
        f"  build python: {plan.python}{'' if plan.python_exists else '  (not made yet)'}",
        "",
        "sources (all verified by sha256 before use; offline via the source cache):",
    ]
    for s in plan.sources:
        out.append(f"  {s.name:<32} {s.kind:<12} pin {s.pin}")
        out.append(f"  {'':<32} sha256 {s.sha256}  [{s.status}]")
        out.append(f"  {'':<32} from {s.location}")
        if s.cmake_var:
            out.append(f"  {'':<32} -> {s.cmake_var}")
    out += ["", f"source cache: {plan.source_cache}", "", f"environment (plus CUDA_HOME={cuda_home()}):"]
    out += [f"  {k}={v}" for k, v in plan.env.items()]
    if plan.config_settings:
        out += ["", "config settings (-C):"]
        out += [f"  {s}" for s in plan.config_settings]
    if d.rewrites:
        out += ["", "edits to the build copy:"]
        out += [f"  {r.file}: {r.why or r.pattern}" for r in d.rewrites]
    out += ["", "job cap:"] + [f"  {line}" for line in cap.explain()]
    out += ["", f"fingerprint: {plan.fingerprint}", f"wheelhouse:  {plan.wheelhouse / plan.fingerprint}"]
    m = read_manifest(plan.wheelhouse, plan.fingerprint)
    out.append(f"  {'present: ' + m['filename'] + ' (would be reused)' if m else 'absent: would build'}")
    out.append(f"lock:        {plan.lock_path or '(none: not recorded)'}")
    out += [f"note: {n}" for n in plan.notes]
    return "\n".join(out)


# --------------------------------------------------------------------------- execution


def fetch_sources(plan: BuildPlan, *, offline: bool) -> tuple[Path, dict[str, Path]]:
    """Fetch, verify and unpack the project source and every dependency; return their folders."""
    d = plan.definition
    cache = SourceCache(plan.source_cache, offline=offline)
    src = d.source_archive()
    if src is not None:
        with log.timed(f"source {src.filename}"):
            top = cache.unpack(src)
        project = top / d.source.subdir if d.source.subdir else top
        if not project.is_dir():
            raise BuildError(
                f"{d.source.subdir!r} is not in the unpacked source {top}", hint=f"fix source.subdir in {d.path}"
            )
    else:
        project = d.local_path()
    deps: dict[str, Path] = {}
    for dep in d.dependencies:
        if dep.fetch:
            deps[dep.name] = cache.unpack(dep.archive())
    return project, deps


def cross_check_dependencies(d: BuildDefinition, project: Path) -> None:
    """The definition's [[dependency]] list must be exactly the FetchContent declarations of the source."""
    decls = {x.name: x for x in scan_fetchcontent(project)}
    declared = {dep.name: dep for dep in d.dependencies}
    problems = []
    for name in sorted(set(decls) - set(declared)):
        problems.append(f"  {name}: declared in {decls[name].file} but missing from the build definition")
    for name in sorted(set(declared) - set(decls)):
        problems.append(f"  {name}: in the build definition but not declared by the source's CMake files")
    for name in sorted(set(decls) & set(declared)):
        want, got = declared[name].cmake_pin.lower(), (decls[name].pin or "").lower()
        if want and got != want:
            problems.append(f"  {name}: CMake pins {got!r}, the definition recorded {want!r}")
    if problems:
        raise ConfigError(
            f"FetchContent dependencies of {project} do not match {d.path.name}:\n" + "\n".join(problems),
            hint="re-read the pinned CMakeLists and update the [[dependency]] tables (name, commit, sha256, cmake_pin)",
        )


def _build_argv(plan: BuildPlan, src: Path, outdir: Path) -> list[str]:
    uv = shutil.which("uv")
    if uv:
        argv = [uv, "build", "--wheel", "--no-build-isolation", "--python", str(plan.python), "-o", str(outdir)]
        for s in plan.config_settings:
            argv += ["-C", s]
        return argv + [str(src)]
    # -v: pip shows the backend's output (ninja's [n/N] lines) only when verbose
    argv = [str(plan.python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(outdir)]
    for s in plan.config_settings:
        argv.append(f"--config-settings={s}")
    return argv + [str(src)]


def execute(plan: BuildPlan, req: BuildRequest) -> BuildOutcome:
    d = plan.definition
    if not req.rebuild:
        manifest = read_manifest(plan.wheelhouse, plan.fingerprint)
        if manifest:
            path = find_wheel(plan.wheelhouse, plan.fingerprint, manifest["filename"])
            if path:
                log.step(f"reusing {path.name} from the wheelhouse (fingerprint {plan.fingerprint}); nothing to build")
                outcome = BuildOutcome(wheel=path, sha256=manifest["sha256"], fingerprint=plan.fingerprint, reused=True)
                _record(plan, outcome)
                return outcome
    if req.reuse_only:
        why = explain_mismatch(plan.wheelhouse, plan.fingerprint_inputs)
        raise BuildError(
            f"no wheel for {d.name} with fingerprint {plan.fingerprint} in {plan.wheelhouse}, and --reuse-only refuses to build"
            + ("".join(f"\n  {line}" for line in why) if why else ""),
            hint="copy the wheelhouse from the host that built it, or build for these inputs (drop --reuse-only)",
        )
    if not plan.python_exists:
        raise ConfigError(
            f"the build python {plan.python} does not exist",
            hint=f"make the recipe's environment first (`nox -s env -- --recipe {plan.ctx.recipe}`), or give --python",
        )
    project, deps = fetch_sources(plan, offline=req.offline)
    if d.dependencies:
        cross_check_dependencies(d, project)
    # re-plan the settings now that dependency folders are known
    from dataclasses import replace

    backend = BACKENDS[d.backend]
    ctx = replace(plan.ctx, dep_dirs=deps)
    settings = backend.config_settings(ctx)
    plan = replace(plan, ctx=ctx, config_settings=settings)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = plan.log_dir / f"{d.name}-{stamp}-{plan.fingerprint[:12]}.log"
    work = Path(tempfile.mkdtemp(prefix=f"specrig-build-{d.name}-"))
    try:
        tree = work / "src"
        shutil.copytree(
            project, tree, symlinks=True, ignore=shutil.ignore_patterns("build", "dist", "__pycache__", ".git")
        )
        for line in backend.prepare_tree(ctx, tree):
            log.info(f"edit: {line}")
        outdir = work / "out"
        outdir.mkdir()
        env = _build_env(plan)
        argv = _build_argv(plan, tree, outdir)
        log.step(
            f"building {d.name} {d.version}+{ctx.local_version} for {', '.join('sm_' + a for a in ctx.archs)} "
            f"with {plan.cap.jobs} jobs x {plan.cap.nvcc_threads} nvcc threads (log: {log_path})"
        )

        def remember(rep: WatchdogReport, complete: bool) -> None:
            """Keep the measured peak per job for the next plan. A complete build saw every unit,
            so its figure replaces the old one; a failed or killed build may have missed the
            heaviest units, so its figure is kept only if it raises what was known."""
            threads, n_archs = plan.cap.nvcc_threads, len(ctx.archs)
            if rep.peak_job_gb <= 0:
                return
            if not complete:
                known = load_measured(plan.log_dir, d.name, nvcc_threads=threads, n_archs=n_archs)
                floor = known if known is not None else d.memory.gb_per_compile * min(threads, n_archs)
                if rep.peak_job_gb <= floor:
                    return
            record_measured(
                plan.log_dir, d.name, nvcc_threads=threads, n_archs=n_archs,
                gb_per_job=rep.peak_job_gb, jobs_seen=rep.job_commands,
            )  # fmt: skip

        result = run_build_command(
            argv, env=env, cwd=tree, log_path=log_path, what=f"build {d.name}",
            low_water_gib=max(0.5, plan.definition.memory.reserve_gib / 2),
            high_water_gib=plan.definition.memory.reserve_gib / 2 + plan.cap.gb_per_job,
            on_report=remember,
        )  # fmt: skip
        wheels = sorted(outdir.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildError(
                f"the build made {len(wheels)} wheels, expected 1: {[w.name for w in wheels]}", hint=f"see {log_path}"
            )
        wheel = wheels[0]
        if f"+{ctx.local_version}" not in wheel.name:
            raise BuildError(
                f"built wheel {wheel.name} lacks the local version tag +{ctx.local_version}", hint=f"see {log_path}"
            )
        rep = result.watchdog
        extra = {
            "build": {
                "seconds": round(result.seconds, 1), "jobs": plan.cap.jobs, "nvcc_threads": plan.cap.nvcc_threads,
                "peak_total_gb": round(rep.peak_total_gb, 3), "peak_job_gb": round(rep.peak_job_gb, 3),
                "peak_parallel_jobs": rep.peak_jobs, "compile_jobs_seen": rep.job_commands, "log": str(log_path),
            }
        }  # fmt: skip
        stored = store_wheel(wheel, plan.wheelhouse, plan.fingerprint, plan.fingerprint_inputs, extra)
        log.step(
            f"built {stored.name} in {result.seconds:.0f} s: peak {rep.peak_total_gb:.2f} GiB total, "
            f"{rep.peak_job_gb:.2f} GiB per job, {rep.peak_jobs} jobs at once (cap {plan.cap.jobs})"
        )
        outcome = BuildOutcome(
            wheel=stored, sha256=sha256_file(stored), fingerprint=plan.fingerprint, reused=False, run=result
        )
        _record(plan, outcome)
        return outcome
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build_env(plan: BuildPlan) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(plan.python.parent) + os.pathsep + env.get("PATH", "")
    home = cuda_home()
    if home:
        env["CUDA_HOME"] = str(home)
    env.update(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _record(plan: BuildPlan, outcome: BuildOutcome) -> None:
    if plan.lock_path is None:
        return
    from ..built import BuiltWheel, add_wheel, record_path

    d, ctx = plan.definition, plan.ctx
    path = record_path(plan.lock_path)
    add_wheel(
        path,
        BuiltWheel(
            name=d.name, version=f"{d.version}+{ctx.local_version}", filename=outcome.wheel.name,
            sha256=outcome.sha256, fingerprint=outcome.fingerprint, archs=ctx.archs, cuda=ctx.cuda_toolkit,
            torch=ctx.torch or "", python_tag=ctx.python_tag, definition=d.path.name,
            source_sha256=plan.fingerprint_inputs["source_sha256"],
        ),
    )  # fmt: skip
    log.step(f"recorded {outcome.wheel.name} in {path}")
