"""Running a plan: sources -> build -> wheelhouse -> built-wheel record.

``execute`` fetches and verifies the sources, cross-checks the FetchContent
dependencies, builds in a temporary copy with the watchdog on, keeps the
measured memory per job for the next plan, stores the wheel atomically under
its fingerprint and lists it in the built-wheel record beside the build
environment's lock (never in the lock itself: a build must not change an
environment's lock). A wheel already stored under the same fingerprint is
reused without building.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from specrig.builder.backends import BACKENDS
from specrig.builder.cap import load_measured, record_measured
from specrig.builder.definition import BuildDefinition
from specrig.builder.plan import BuildPlan, BuildRequest
from specrig.builder.progress import BuildStatus, RunResult, run_build_command
from specrig.builder.sources import SourceCache, scan_fetchcontent
from specrig.builder.watchdog import WatchdogReport
from specrig.builder.wheelhouse import explain_mismatch, store_wheel
from specrig.core import locks
from specrig.core.digest import sha256_file
from specrig.core.errors import BuildError, ConfigError
from specrig.core.log import log
from specrig.core.space import Need, check_space
from specrig.lock.built import BuiltWheel, add_wheel, find_wheel, read_manifest

__all__ = ["BuildOutcome", "execute", "fetch_sources", "cross_check_dependencies", "remember_peak", "disk_needs"]


@dataclass(frozen=True, kw_only=True)
class BuildOutcome:
    wheel: Path
    sha256: str
    fingerprint: str
    reused: bool
    run: RunResult | None = None


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
    deps = {dep.name: cache.unpack(dep.archive()) for dep in d.dependencies if dep.fetch}
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


def remember_peak(plan: BuildPlan, report: WatchdogReport, complete: bool) -> None:
    """Keep the measured peak per job for the next plan. A complete build saw every unit,
    so its figure replaces the old one; a failed or killed build may have missed the
    heaviest units, so its figure is kept only if it raises what was known."""
    d = plan.definition
    threads, n_archs = plan.cap.nvcc_threads, len(plan.ctx.archs)
    if report.peak_job_gb <= 0:
        return
    if not complete:
        known = load_measured(plan.log_dir, d.name, nvcc_threads=threads, n_archs=n_archs)
        floor = known if known is not None else d.memory.gb_per_compile * min(threads, n_archs)
        if report.peak_job_gb <= floor:
            return
    record_measured(
        plan.log_dir,
        d.name,
        nvcc_threads=threads,
        n_archs=n_archs,
        gb_per_job=report.peak_job_gb,
        jobs_seen=report.job_commands,
        complete=complete,
        units={n: u["peak_gb"] for n, u in report.units.items() if u.get("peak_gb")} if complete else None,
    )


def disk_needs(plan: BuildPlan, project: Path, work_root: Path) -> tuple[Need, ...]:
    """What a build writes: the copy of ``project``, the objects and the wheel in a folder under
    ``work_root`` (the temporary folder), and the wheel in the wheelhouse (``[disk]``, per arch)."""
    d, archs = plan.definition, max(1, len(plan.ctx.archs))
    tree = sum(f.stat().st_size for f in project.rglob("*") if f.is_file() and not f.is_symlink())
    wheel = int(d.disk.wheel_gib_per_arch * archs * 2**30)
    work = tree + int(d.disk.build_gib_per_arch * archs * 2**30) + wheel
    return (
        Need(work_root, work, f"the build folder of {d.name}", "free some space there, or build elsewhere: TMPDIR=DIR"),
        Need(plan.wheelhouse, wheel, f"the {d.name} wheel", "free some space there, or SPECRIG_WHEELHOUSE=DIR"),
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
    argv += [f"--config-settings={s}" for s in plan.config_settings]
    return argv + [str(src)]


def _build_env(plan: BuildPlan) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(plan.python.parent) + os.pathsep + env.get("PATH", "")
    if plan.cuda_home:
        env["CUDA_HOME"] = str(plan.cuda_home)
    env.update(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _reuse(plan: BuildPlan) -> BuildOutcome | None:
    manifest = read_manifest(plan.wheelhouse, plan.fingerprint)
    path = find_wheel(plan.wheelhouse, plan.fingerprint, manifest["filename"]) if manifest else None
    if manifest is None or path is None:
        return None
    log.step(f"reusing {path.name} from the wheelhouse (fingerprint {plan.fingerprint}); nothing to build")
    return BuildOutcome(wheel=path, sha256=manifest["sha256"], fingerprint=plan.fingerprint, reused=True)


def execute(plan: BuildPlan, req: BuildRequest, status: BuildStatus | None = None) -> BuildOutcome:
    # one build per fingerprint at a time: a second process waits, then reuses the stored wheel
    with locks.hold(plan.wheelhouse / plan.fingerprint, f"building {plan.definition.name} ({plan.fingerprint[:12]})"):
        outcome = _reuse_or_build(plan, req, status)
    _record(plan, outcome)
    return outcome


def _reuse_or_build(plan: BuildPlan, req: BuildRequest, status: BuildStatus | None) -> BuildOutcome:
    d = plan.definition
    outcome = None if req.rebuild else _reuse(plan)
    if outcome is None:
        if req.reuse_only:
            why = explain_mismatch(plan.wheelhouse, plan.fingerprint_inputs)
            raise BuildError(
                f"no wheel for {d.name} with fingerprint {plan.fingerprint} in {plan.wheelhouse}, "
                "and --reuse-only refuses to build" + "".join(f"\n  {line}" for line in why),
                hint="copy the wheelhouse from the host that built it, or build for these inputs (drop --reuse-only)",
            )
        if not plan.python_exists:
            raise ConfigError(
                f"the build python {plan.python} does not exist",
                hint=f"make the recipe's environment first (`nox -s env -- --recipe {plan.ctx.recipe}`), or give --python",
            )
        outcome = _build(plan, req, status)
    return outcome


def _build(plan: BuildPlan, req: BuildRequest, status: BuildStatus | None) -> BuildOutcome:
    d = plan.definition
    project, deps = fetch_sources(plan, offline=req.offline)
    if d.dependencies:
        cross_check_dependencies(d, project)
    # re-plan the settings now that the dependency folders are known
    backend = BACKENDS[d.backend]
    ctx = replace(plan.ctx, dep_dirs=deps)
    plan = replace(plan, ctx=ctx, config_settings=backend.config_settings(ctx))

    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = plan.log_dir / f"{d.name}-{stamp}-{plan.fingerprint[:12]}.log"
    needs = disk_needs(plan, project, Path(tempfile.gettempdir()))
    for line in check_space(needs):  # before the copy: a build that cannot fit never starts
        log.info(line)
    work = Path(tempfile.mkdtemp(prefix=f"specrig-build-{d.name}-"))
    try:
        tree = work / "src"
        ignore = shutil.ignore_patterns("build", "dist", "__pycache__", ".git")
        shutil.copytree(project, tree, symlinks=True, ignore=ignore)
        for line in backend.prepare_tree(ctx, tree):
            log.info(f"edit: {line}")
        outdir = work / "out"
        outdir.mkdir()
        log.step(
            f"building {d.name} {d.version}+{ctx.local_version} for {', '.join('sm_' + a for a in ctx.archs)} "
            f"with {plan.cap.jobs} jobs x {plan.cap.nvcc_threads} nvcc threads (log: {log_path})"
        )
        result = run_build_command(
            _build_argv(plan, tree, outdir),
            env=_build_env(plan),
            cwd=tree,
            log_path=log_path,
            what=f"build {d.name}",
            low_water_gib=max(0.5, d.memory.reserve_gib / 2),
            high_water_gib=d.memory.reserve_gib / 2 + plan.cap.one_job_gib,
            on_report=lambda rep, complete: remember_peak(plan, rep, complete),
            status=status,
            writes=needs,
        )
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
        figures = {
            "seconds": round(result.seconds, 1),
            "jobs": plan.cap.jobs,
            "nvcc_threads": plan.cap.nvcc_threads,
            "peak_total_gb": round(rep.peak_total_gb, 3),
            "peak_job_gb": round(rep.peak_job_gb, 3),
            "peak_parallel_jobs": rep.peak_jobs,
            "compile_jobs_seen": rep.job_commands,
            "log": str(log_path),
            "units": dict(sorted(rep.units.items(), key=lambda kv: -kv[1]["seconds"])),
        }
        stored = store_wheel(wheel, plan.wheelhouse, plan.fingerprint, plan.fingerprint_inputs, {"build": figures})
        log.step(
            f"built {stored.name} in {result.seconds:.0f} s: peak {rep.peak_total_gb:.2f} GiB total, "
            f"{rep.peak_job_gb:.2f} GiB per job, {rep.peak_jobs} jobs at once (cap {plan.cap.jobs})"
        )
        slow = list(figures["units"].items())[:3]
        if slow:
            log.info(
                "longest units: " + ", ".join(f"{n} {u['seconds']:.0f} s ({u['peak_gb']:.2f} GiB)" for n, u in slow)
            )
        return BuildOutcome(
            wheel=stored, sha256=sha256_file(stored), fingerprint=plan.fingerprint, reused=False, run=result
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _record(plan: BuildPlan, outcome: BuildOutcome) -> None:
    """List the wheel in the built-wheel record (``env`` installs it from there)."""
    if plan.record_path is None:
        log.info(plan.unrecorded)
        return
    d, ctx = plan.definition, plan.ctx
    wheel = BuiltWheel(
        name=d.name,
        version=f"{d.version}+{ctx.local_version}",
        filename=outcome.wheel.name,
        sha256=outcome.sha256,
        fingerprint=outcome.fingerprint,
        archs=ctx.archs,
        cuda=ctx.cuda_toolkit,
        torch=ctx.torch or "",
        python_tag=ctx.python_tag,
        definition=d.path.name,
        source_sha256=plan.fingerprint_inputs["source_sha256"],
    )
    add_wheel(plan.record_path, wheel)
    log.step(f"recorded {outcome.wheel.name} in {plan.record_path}")
