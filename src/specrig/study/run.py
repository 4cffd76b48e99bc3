"""Running a study: its steps in order, each its specrig command in a process of its own, into
one study folder.

The folder holds ``study.toml`` (the file as run), ``state.json`` (each step's last run, written
atomically at every start and end), ``logs/NAME.log`` (each step's output, every run appended),
``steps/NAME/`` (the step's output: a bench's results folder, a report's or projection's folder,
a drafter step's ``registration.json``), ``report/`` (one comparison of every finished bench step) and
``manifest.json`` (what ran). A step whose inputs and outputs are unchanged since it last
finished is skipped; one that did not finish (failed, interrupted, killed) runs again. A step
that fails does not stop the study: the steps that read it are blocked, the others run."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.errors import ConfigError, StudyError
from specrig.core.log import log
from specrig.study.plan import Plan, command_line, recipe_inputs, shown
from specrig.study.record import MANIFEST, PLAN_FILE, StepRecord, StudyState, digest_of, now, tree_digest
from specrig.study.steps import PLACED, Step

__all__ = ["run_study", "prepare_folder", "select_steps", "step_log", "STOP_GRACE_S"]

STOP_GRACE_S = 60.0
"""How long a step's command has to stop (its servers included) after the study is interrupted."""

_FIX = "name a folder on a writable disk with space: --out DIR (or SPECRIG_STUDIES_DIR for the default's parent)"


def prepare_folder(plan: Plan) -> Path:
    """The study folder, checked and made, with the study file as run copied in."""
    folder = atomic.check_folder(plan.folder, what="the study folder", fix=_FIX)
    try:
        (folder / "steps").mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(folder / "study.toml", plan.file.read_bytes())
    except OSError as exc:
        raise atomic.os_error(exc, folder, "the study folder", _FIX) or ConfigError(
            f"the study folder {folder} cannot be made: {exc}", hint=_FIX
        ) from None
    return folder


def _inputs(plan: Plan, step: Step, state: StudyState) -> dict[str, Any]:
    """What the step's run depends on (its digest decides a skip)."""
    inputs: dict[str, Any] = {"command": step.command, "argv": list(step.argv)}
    if step.recipe:
        inputs |= recipe_inputs(plan.recipes[step.recipe])
    inputs["needs"] = {n: state.steps[n].outcome for n in step.needs if n in state.steps}
    return inputs


def step_log(plan: Plan, name: str) -> Path:
    """Where a step's command's output is kept (all of it, every run appended)."""
    return plan.folder / "logs" / f"{name}.log"


def _output(plan: Plan, step: Step) -> Path | None:
    """Where the step's output is (a drafter step's: the drafter it registered, once it ran)."""
    if step.command in PLACED:
        return plan.folder / "steps" / step.name
    return None


def _registered(plan: Plan, step: Step) -> tuple[Path | None, str]:
    """A drafter step's drafter, from the registry the command wrote (copied into the step's folder)."""
    import json

    from specrig.model.drafters import drafters_root

    root = drafters_root(step.recipe or "")
    quick = bool(step.options.get("quick"))
    pointer = root / ("current-quick.json" if quick else "current.json")
    if not pointer.is_file():
        return None, f"no registration at {pointer}"
    here = plan.folder / "steps" / step.name
    atomic.write_bytes(here / "registration.json", pointer.read_bytes())
    curve = root / ("curve-quick.json" if quick else "curve.json")
    if step.options.get("curve") and curve.is_file():
        atomic.write_bytes(here / "curve.json", curve.read_bytes())
    drafter = Path(json.loads(pointer.read_text())["drafter"])
    if (drafter / "offline_eval.json").is_file():
        atomic.write_bytes(here / "offline_eval.json", (drafter / "offline_eval.json").read_bytes())
    return drafter, ""


def _stream(cmd: list[str], log_path: Path, cwd: Path, on_start: Callable[[int], None], header: str) -> int:
    """Run ``cmd`` in a process group of its own, its output to ``log_path`` and this console
    line by line; on an interrupt it gets one SIGTERM and ``STOP_GRACE_S`` to stop (its servers
    included), then SIGKILL, and the interrupt goes on."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as logf:  # a stream, appended: the log of every run of the step
        logf.write(f"\n$ {header}   ({time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode())
        logf.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        on_start(proc.pid)
        try:
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                logf.write(line)
                logf.flush()
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
            return proc.wait()
        except BaseException:
            _end(proc)
            raise


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def _finished(plan: Plan, step: Step, rec: StepRecord, rc: int) -> StepRecord:
    """The record of a step whose command ended with ``rc``."""
    from specrig.lab.folder import incomplete

    output, note = _output(plan, step), ""
    done = rc == 0
    if step.command == "bench" and rc == 11 and output is not None and (output / "summary.json").is_file():
        done, note = incomplete(output) is None, "measured; the recipe's gates not met (exit 11)"
    if done and step.command == "drafter":
        output, why = _registered(plan, step)
        done, note = output is not None, why or note
    status = "done" if done else "failed"
    if not done and not note:
        note = f"exit {rc}: see {step_log(plan, step.name)}"
    return rec.model_copy(
        update={
            "status": status,
            "ended": now(),
            "exit_code": rc,
            "note": note,
            "output": str(output) if output is not None else None,
            "outputs_digest": tree_digest(output) if done else "",
        }
    )


def _run_step(plan: Plan, step: Step, state: StudyState, inputs: dict[str, Any], label: str) -> StepRecord:
    cmd = command_line(step, plan.folder, lambda n: state.steps[n].output or "")
    if (out := _output(plan, step)) is not None and out.exists():
        shutil.rmtree(out)  # a step runs again into a clean folder (the bench refuses to mix runs)
    log.step(f"{label} {step.name}: {shown(cmd)}")
    if note := _registry_drift(plan, step, state):
        log.warn(f"{label} {step.name}: {note}")
    rec = StepRecord(
        name=step.name, command=step.command, status="running", argv=cmd, inputs=inputs,
        inputs_digest=digest_of(inputs), started=now(),
    )  # fmt: skip
    state.put(plan.folder, rec)
    log_path = step_log(plan, step.name)
    try:
        rc = _stream(
            [sys.executable, "-m", *cmd],
            log_path,
            plan.file.parent,
            lambda pid: _pid(plan, state, rec, pid),
            shown(cmd),
        )
    except KeyboardInterrupt:
        state.put(plan.folder, rec.model_copy(update={"status": "interrupted", "ended": now(), "note": "interrupted"}))
        raise
    done = _finished(plan, step, state.steps[step.name], rc)
    state.put(plan.folder, done)
    took = (done.ended or 0) - (done.started or 0)
    (log.step if done.status == "done" else log.error)(
        f"{label} {step.name}: {done.status} in {took:.0f} s {done.note}".rstrip()
    )
    return done


def _registry_drift(plan: Plan, step: Step, state: StudyState) -> str:
    """What a step serving ``@eagle3-trained`` gets when the registry no longer names the drafter
    this study's last drafter step registered (a drafter trained elsewhere since): "" when it does."""
    import json

    from specrig.model.drafters import drafters_root

    mine = [state.steps[n].output for n in step.needs if plan.step(n).command == "drafter" and n in state.steps]
    if not mine or not any("@eagle3-trained" in a for a in step.argv):
        return ""
    try:
        current = json.loads((drafters_root(step.recipe or "") / "current.json").read_text())["drafter"]
    except (OSError, ValueError, KeyError):
        return ""
    if current == mine[-1]:
        return ""
    return (
        f"@eagle3-trained is {current}, not {mine[-1]} (this study's drafter): name it step:NAME to serve the study's"
    )


def _pid(plan: Plan, state: StudyState, rec: StepRecord, pid: int) -> None:
    state.put(plan.folder, rec.model_copy(update={"pid": pid}))


def _decide(plan: Plan, step: Step, state: StudyState, ran: set[str]) -> tuple[str, dict[str, Any]]:
    """``("skip" | "run" | "blocked: WHY", inputs)`` for one step."""
    for need in step.needs:
        rec = state.steps.get(need)
        if need not in ran and (rec is None or rec.status != "done"):
            return f"blocked: it reads step {need}, which did not finish", {}
    inputs = _inputs(plan, step, state)
    rec = state.steps.get(step.name)
    if any(n in ran for n in step.needs) or rec is None or rec.status != "done":
        return "run", inputs
    out = Path(rec.output) if rec.output else None
    if rec.inputs_digest == digest_of(inputs) and rec.outputs_digest == tree_digest(out):
        return "skip", inputs
    return "run", inputs


def select_steps(plan: Plan, names: list[str]) -> Plan:
    """The plan with only the steps ``names`` (in the file's order). A name not in the file, or a
    chosen step that reads a step neither chosen nor finished in the study folder, is refused here,
    before anything runs."""
    known = [s.name for s in plan.steps]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--steps: {', '.join(unknown)}: no such step in {plan.file}",
            hint="its steps: " + ", ".join(known),
        )
    done = {n for n, r in StudyState.load(plan.folder, plan.meta.name).steps.items() if r.status == "done"}
    chosen = [s for s in plan.steps if s.name in names]
    missing = [
        f"{s.name} reads {', '.join(absent)}"
        for s in chosen
        if (absent := [n for n in s.needs if n not in names and n not in done])
    ]
    if missing:
        raise ConfigError(
            f"--steps: {'; '.join(missing)}: neither named nor finished in {plan.folder}",
            hint="add the steps it reads to --steps, or run them first",
        )
    return dataclasses.replace(plan, only=tuple(s.name for s in chosen))


def run_study(plan: Plan, *, dry_run: bool = False) -> StudyState:
    """Run (or, ``dry_run``, say what would run) every step in order; then the report and the
    manifest. Raises :class:`StudyError` naming the steps that failed or were blocked."""
    state = StudyState.load(plan.folder, plan.meta.name)  # empty when the folder has none yet
    if not dry_run:
        prepare_folder(plan)
        atomic.write_json(
            plan.folder / PLAN_FILE, {"steps": [{"name": s.name, "command": s.command} for s in plan.steps]}
        )
    started, ran, total = now(), set(), len(plan.to_run)
    log.step(f"study {plan.meta.name}: {total} steps into {plan.folder}")
    for i, step in enumerate(plan.to_run, 1):
        label = f"[{i}/{total}]"
        what, inputs = _decide(plan, step, state, ran if dry_run else set())
        if what == "skip":
            log.step(f"{label} {step.name}: unchanged since it last finished, skipped")
            continue
        if dry_run:
            log.step(f"{label} {step.name}: would run: {shown(command_line(step, plan.folder))}")
            ran.add(step.name)
            continue
        if what.startswith("blocked"):
            log.warn(f"{label} {step.name}: {what}")
            state.put(plan.folder, StepRecord(name=step.name, command=step.command, status="blocked", note=what))
            continue
        _run_step(plan, step, state, inputs, label)
    if dry_run:
        return state
    _conclude(plan, state, started)
    bad = [
        f"{n} ({r.status}: {r.note})"
        for n, r in state.steps.items()
        if r.status != "done" and n in {s.name for s in plan.to_run}
    ]
    if bad:
        raise StudyError(
            f"study {plan.meta.name}: {len(bad)} of {total} steps did not finish:\n"
            + "\n".join(f"  - {b}" for b in bad),
            hint=f"each step's output is in {plan.folder / 'logs'}/NAME.log; run the study again to rerun them",
        )
    return state


def _conclude(plan: Plan, state: StudyState, started: float) -> None:
    from specrig.study.manifest import write_manifest, write_study_report

    report = write_study_report(plan, state)
    write_manifest(plan, state, started, report)
    log.step(f"study {plan.meta.name}: {plan.folder / MANIFEST}" + (f", report {report}" if report else ""))
