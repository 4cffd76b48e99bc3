"""A build plan for people (``--plan``) and for programs (``--plan --json``)."""

from __future__ import annotations

from typing import Any

from specrig.builder.plan import BuildPlan
from specrig.lock.built import read_manifest

__all__ = ["render_plan", "plan_as_dict"]


def render_plan(plan: BuildPlan) -> str:
    d, ctx, cap = plan.definition, plan.ctx, plan.cap
    archs = ", ".join("sm_" + a for a in ctx.archs)
    out = [
        f"build plan: {d.name} {d.version}+{ctx.local_version}  (recipe {ctx.recipe}, definition {d.path})",
        f"  archs: {archs}   CUDA toolkit {ctx.cuda_toolkit}   torch {ctx.torch or '-'}   python {ctx.python_tag}",
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
    out += ["", f"source cache: {plan.source_cache}", "", f"environment (plus CUDA_HOME={plan.cuda_home}):"]
    out += [f"  {k}={v}" for k, v in plan.env.items()]
    if plan.config_settings:
        out += ["", "config settings (-C):"]
        out += [f"  {s}" for s in plan.config_settings]
    edits = d.rewrites_for(plan.ctx.archs)
    if edits:
        out += ["", "edits to the build copy:"]
        out += [f"  {r.file}: {r.why or r.pattern}" for r in edits]
    out += ["", "job cap:"] + [f"  {line}" for line in cap.explain()]
    out += ["", f"fingerprint: {plan.fingerprint}", f"wheelhouse:  {plan.wheelhouse / plan.fingerprint}"]
    m = read_manifest(plan.wheelhouse, plan.fingerprint)
    out.append(f"  {'present: ' + m['filename'] + ' (would be reused)' if m else 'absent: would build'}")
    out.append(f"record:      {plan.record_path or '(none: not recorded)'}")
    out += [f"note: {n}" for n in plan.notes]
    return "\n".join(out)


def plan_as_dict(plan: BuildPlan) -> dict[str, Any]:
    return {
        "name": plan.definition.name,
        "version": plan.definition.version,
        "local_version": plan.ctx.local_version,
        "archs": list(plan.ctx.archs),
        "cuda_toolkit": plan.ctx.cuda_toolkit,
        "torch": plan.ctx.torch,
        "python_tag": plan.ctx.python_tag,
        "env": plan.env,
        "config_settings": plan.config_settings,
        "sources": [s.__dict__ for s in plan.sources],
        "cap": plan.cap.as_dict(),
        "fingerprint": plan.fingerprint,
        "fingerprint_inputs": plan.fingerprint_inputs,
        "wheelhouse": str(plan.wheelhouse),
        "record": str(plan.record_path) if plan.record_path else None,
        "notes": plan.notes,
    }
