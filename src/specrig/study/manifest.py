"""The end of a study run: one report over its finished bench steps (the comparison
``specrig report`` writes) and ``manifest.json``, what ran: each step's command, options,
recipe and locks' digests, start, end and exit status; the host; specrig's version and commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.log import log
from specrig.study.plan import Plan, recipe_inputs
from specrig.study.record import MANIFEST, StudyState, now, specrig_build

__all__ = ["write_study_report", "write_manifest"]


def write_study_report(plan: Plan, state: StudyState) -> Path | None:
    """``report/compare.md`` and its plots over every bench step that finished (None: none did)."""
    from specrig.lab.folder import incomplete
    from specrig.lab.results import load_summary
    from specrig.report.compare import write_comparison
    from specrig.report.render import console

    summaries, unfinished = [], {}
    for step in plan.steps:
        rec = state.steps.get(step.name)
        if step.command != "bench" or rec is None or rec.output is None:
            continue
        run_dir = Path(rec.output)
        if not (run_dir / "summary.json").is_file():
            continue
        if (why := incomplete(run_dir)) is not None:
            unfinished[run_dir] = why
        summaries.append((run_dir, load_summary(run_dir)))
    if not summaries:
        return None
    out = plan.folder / "report"
    try:
        return write_comparison(summaries, out, console(), unfinished)
    except OSError as exc:
        named = atomic.os_error(exc, out, "the study's report", "free some space, or name another folder: --out DIR")
        if named is None:
            raise
        log.warn(f"{named.message}: the report is not written")
        return None


def _host() -> dict[str, Any]:
    import platform

    from specrig.host.machine import probe

    return probe().as_dict() | {"hostname": platform.node()}


def write_manifest(plan: Plan, state: StudyState, started: float, report: Path | None) -> Path:
    """``manifest.json``: the study, the host, specrig, and every step as it last ran."""
    steps = []
    for step in plan.steps:
        rec = state.steps.get(step.name)
        entry: dict[str, Any] = {
            "name": step.name,
            "command": step.command,
            "options": step.options,
            "needs": list(step.needs),
        }
        if step.recipe:
            entry |= recipe_inputs(plan.recipes[step.recipe])
        if rec is not None:
            entry |= rec.model_dump(
                mode="json",
                include={"status", "argv", "started", "ended", "exit_code", "note", "output", "inputs_digest"},
            )
            if rec.started and rec.ended:
                entry["seconds"] = round(rec.ended - rec.started, 1)
        steps.append(entry)
    manifest = {
        "study": plan.meta.name,
        "description": plan.meta.description,
        "file": str(plan.file),
        "folder": str(plan.folder),
        "started": started,
        "ended": now(),
        "specrig": specrig_build(),
        "host": _host(),
        "report": str(report.relative_to(plan.folder)) if report and report.is_relative_to(plan.folder) else None,
        "steps": steps,
    }
    return atomic.write_json(plan.folder / MANIFEST, manifest, default=str)
